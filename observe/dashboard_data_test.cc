// The dashboard's JSON: a node's status and a timeline as the page reads
// them, escaped whatever a ring or a worker's role holds, and bounded.
#include "observe/dashboard_data.h"

#include <unistd.h>

#include <cstring>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace shoal::observe {
namespace {

TimelineEvent Event(EventKind kind, const char* name, int64_t start_ns,
                    int64_t end_ns) {
  TimelineEvent e;
  e.kind = static_cast<uint16_t>(kind);
  std::strncpy(e.name, name, sizeof(e.name) - 1);
  e.start_ns = start_ns;
  e.end_ns = end_ns;
  return e;
}

TEST(DashboardJsonTest, StringsAreEscapedToAscii) {
  EXPECT_EQ(JsonString("plain"), "\"plain\"");
  EXPECT_EQ(JsonString("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(JsonString("line\nnext\t"), "\"line\\u000anext\\u0009\"");
  EXPECT_EQ(JsonString("</script>"), "\"</script>\"");  // not markup: data
  EXPECT_EQ(JsonString("\xc3\xa9"), "\"\\u00c3\\u00a9\"");
}

TEST(DashboardJsonTest, TimelineTimesBeforeNowAndTheNewestEvents) {
  Timeline t;
  t.job_id = "j\"1";
  t.since_ns = 1'000'000'000;
  t.until_ns = 61'000'000'000;
  ProcessTimeline p;
  p.pid = 42;
  p.label = "worker 0";
  p.dropped = 3;
  TimelineEvent bad = Event(EventKind::kTask, "<img src=x onerror=1>",
                            60'000'000'000, 60'500'000'000);
  bad.code = 13;
  bad.id = 7;
  std::strncpy(bad.detail, "d\x01", sizeof(bad.detail) - 1);
  p.events.push_back(
      Event(EventKind::kTask, "old", 2'000'000'000, 2'000'100'000));
  p.events.push_back(bad);
  p.events.push_back(Event(EventKind::kCollective, "all_reduce", 60'900'000'000,
                           61'000'000'000));
  t.processes.push_back(p);
  const std::string all = DashboardTimelineJson(t);
  EXPECT_TRUE(absl::StrContains(all, "\"job_id\":\"j\\\"1\""));
  EXPECT_TRUE(absl::StrContains(all, "\"window_ms\":60000"));
  EXPECT_TRUE(absl::StrContains(
      all, "{\"pid\":42,\"label\":\"worker 0\",\"omitted\":0,\"dropped\":3"));
  EXPECT_TRUE(absl::StrContains(
      all,
      "{\"k\":\"task\",\"n\":\"<img src=x onerror=1>\",\"d\":\"d\\u0001\","
      "\"s\":-1000.000,\"e\":-500.000,\"c\":13,\"id\":7,\"b\":0}"));
  EXPECT_TRUE(absl::StrContains(all, "\"k\":\"collective\""));
  // Bounded: the newest two of three.
  const std::string two = DashboardTimelineJson(t, 2);
  EXPECT_TRUE(absl::StrContains(two, "\"omitted\":1"));
  EXPECT_FALSE(absl::StrContains(two, "\"old\""));
  EXPECT_TRUE(absl::StrContains(two, "all_reduce"));
}

TEST(DashboardJsonTest, StatusWorkersAndCpu) {
  ipc::NodeStatus st;
  st.set_job_id("job");
  st.set_queued(2);
  st.set_completed(9);
  st.mutable_store()->set_capacity_bytes(1024);
  st.mutable_store()->set_used_bytes(512);
  ipc::WorkerStatus* w = st.add_workers();
  w->set_id(0);
  w->set_pid(getpid());
  w->set_state("busy");
  ipc::WorkerStatus* a = st.add_workers();
  a->set_id(1);
  a->set_pid(1 << 30);  // no such process
  a->set_state("idle");
  a->set_role("actor 3 \"Counter\"");
  CpuSampler sampler;
  EXPECT_TRUE(sampler.Sample(st).empty());  // the first sample knows none
  volatile double x = 0;
  for (int i = 0; i < 20'000'000; ++i) x = x + i;  // some CPU to measure
  const std::map<int, double> cpu = sampler.Sample(st);
  ASSERT_EQ(cpu.count(getpid()), 1u);
  EXPECT_GE(cpu.at(getpid()), 0.0);
  EXPECT_EQ(cpu.count(1 << 30), 0u);
  const std::string json = DashboardStatusJson(st, cpu);
  EXPECT_TRUE(absl::StartsWith(json, "{\"ok\":true,\"job_id\":\"job\""));
  EXPECT_TRUE(absl::StrContains(json, "\"queued\":2"));
  EXPECT_TRUE(absl::StrContains(json, "\"used_bytes\":512"));
  EXPECT_TRUE(
      absl::StrContains(json, absl::StrCat("{\"id\":0,\"pid\":", getpid(),
                                           ",\"state\":\"busy\",\"cpu\":")));
  EXPECT_TRUE(absl::StrContains(json, "\"role\":\"pool\""));
  EXPECT_TRUE(absl::StrContains(
      json,
      "\"cpu\":null,\"rss_bytes\":0,\"gpus\":\"\",\"done\":0,"
      "\"failed\":0,\"restarts\":0,\"role\":\"actor 3 \\\"Counter\\\"\""));
  EXPECT_EQ(DashboardErrorJson(absl::UnavailableError("no \"node\"")),
            "{\"ok\":false,\"error\":\"no \\\"node\\\"\"}");
}

}  // namespace
}  // namespace shoal::observe
