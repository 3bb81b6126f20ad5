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

TEST(DashboardJsonTest, ShortEventsOfAThreadMergeIntoOneSpan) {
  Timeline t;
  t.job_id = "j";
  t.since_ns = 0;
  t.until_ns = 60'000'000'000;  // a minute: events under 15 ms are short
  ProcessTimeline p;
  p.pid = 1;
  p.label = "worker 0";
  const int64_t ms = 1'000'000;
  for (int i = 0; i < 10; ++i) {  // 10 tasks of 1 ms, 1 ms apart
    p.events.push_back(
        Event(EventKind::kTask, "tiny", (10 + 2 * i) * ms, (11 + 2 * i) * ms));
  }
  TimelineEvent failed = Event(EventKind::kTask, "tiny", 31 * ms, 32 * ms);
  failed.code = 2;
  p.events.push_back(failed);  // its own span: not ok
  p.events.push_back(Event(EventKind::kTask, "tiny", 33 * ms, 34 * ms));
  p.events.push_back(Event(EventKind::kTask, "other", 35 * ms, 36 * ms));
  TimelineEvent elsewhere = Event(EventKind::kTask, "other", 37 * ms, 38 * ms);
  elsewhere.tid = 9;  // another thread: its own span
  p.events.push_back(elsewhere);
  p.events.push_back(Event(EventKind::kTask, "other", 39 * ms, 40 * ms));
  p.events.push_back(Event(EventKind::kTask, "other", 100 * ms, 101 * ms));
  p.events.push_back(Event(EventKind::kTask, "long", 102 * ms, 200 * ms));
  p.events.push_back(Event(EventKind::kTask, "long", 201 * ms, 300 * ms));
  t.processes.push_back(p);
  const std::string json = DashboardTimelineJson(t);
  // 10 tiny ones: one span from the first start to the last end.
  EXPECT_TRUE(absl::StrContains(
      json,
      "\"n\":\"tiny\",\"d\":\"\",\"s\":-59990.000,\"e\":-59971.000,"
      "\"c\":0,\"id\":0,\"b\":0,\"m\":10,\"u\":10.000}"))
      << json;
  EXPECT_TRUE(
      absl::StrContains(json, "\"s\":-59969.000,\"e\":-59968.000,\"c\":2"));
  EXPECT_TRUE(absl::StrContains(json,
                                "\"s\":-59967.000,\"e\":-59966.000,\"c\":0,"
                                "\"id\":0,\"b\":0}"));
  // "other": 35-36 and 39-40 merge around another thread's; 100 ms is far.
  EXPECT_TRUE(absl::StrContains(json,
                                "\"s\":-59965.000,\"e\":-59960.000,\"c\":0,"
                                "\"id\":0,\"b\":0,\"m\":2,\"u\":2.000}"));
  EXPECT_TRUE(absl::StrContains(json, "\"s\":-59963.000,\"e\":-59962.000,"));
  EXPECT_TRUE(absl::StrContains(json, "\"s\":-59900.000,\"e\":-59899.000,"));
  // Long ones stay apart.
  EXPECT_TRUE(absl::StrContains(json, "\"s\":-59898.000,\"e\":-59800.000,"));
  EXPECT_TRUE(absl::StrContains(json, "\"s\":-59799.000,\"e\":-59700.000,"));
  size_t spans = 0;
  for (size_t at = json.find("{\"k\""); at != std::string::npos;
       at = json.find("{\"k\"", at + 1)) {
    ++spans;
  }
  EXPECT_EQ(spans, 8u) << json;
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
