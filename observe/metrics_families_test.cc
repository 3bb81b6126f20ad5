// FamiliesOf: the figures of a NodeStatus as Prometheus text, and the server
// on loopback answering a real HTTP GET.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "observe/launch_metrics.h"
#include "observe/metrics.h"
#include "observe/task_stats.h"
#include "prometheus/text_serializer.h"

namespace shoal::observe {
namespace {

Figures SomeFigures() {
  Figures f;
  f.set_job_id("job-a");
  f.set_coordinator_pid(42);
  f.set_uptime_ms(1500);
  f.set_submitted(10);
  f.set_completed(7);
  f.set_queued(2);
  f.set_running(1);
  ipc::WorkerStatus* w = f.add_workers();
  w->set_id(0);
  w->set_state("busy");
  w->set_tasks_done(5);
  w->set_tasks_failed(2);
  w->set_restarts(1);
  w->set_rss_bytes(1 << 20);
  w = f.add_workers();
  w->set_id(1);
  w->set_state("idle");
  w->set_role("actor 3 Counter");
  f.mutable_store()->set_capacity_bytes(1000);
  f.mutable_store()->set_used_bytes(250);
  f.mutable_store()->set_evictions(3);
  return f;
}

std::string Text(const std::vector<prometheus::MetricFamily>& families) {
  return prometheus::TextSerializer().Serialize(families);
}

// Whether `text` has the line `line` (a sample: name, labels, value).
::testing::AssertionResult HasLine(const std::string& text,
                                   const std::string& line) {
  if (absl::StrContains(absl::StrCat("\n", text),
                        absl::StrCat("\n", line, "\n")))
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "no line '" << line << "' in:\n"
                                       << text;
}

TEST(MetricsFamiliesTest, NodeStatusBecomesSeries) {
  const std::string t = Text(FamiliesOf(SomeFigures()));
  EXPECT_TRUE(HasLine(t, "shoal_up 1"));
  EXPECT_TRUE(HasLine(t, "shoal_tasks_submitted_total 10"));
  EXPECT_TRUE(HasLine(t, "shoal_tasks_completed_total 7"));
  EXPECT_TRUE(HasLine(t, "shoal_tasks_queued 2"));
  EXPECT_TRUE(HasLine(t, "shoal_tasks_running 1"));
  EXPECT_TRUE(HasLine(t, "shoal_workers{state=\"busy\"} 1"));
  EXPECT_TRUE(HasLine(t, "shoal_workers{state=\"idle\"} 1"));
  EXPECT_TRUE(HasLine(t, "shoal_workers{state=\"restarting\"} 0"));
  EXPECT_TRUE(HasLine(
      t, "shoal_worker_tasks_succeeded_total{worker=\"0\",role=\"pool\"} 5"));
  EXPECT_TRUE(HasLine(
      t, "shoal_worker_tasks_failed_total{worker=\"0\",role=\"pool\"} 2"));
  EXPECT_TRUE(
      HasLine(t, "shoal_worker_restarts_total{worker=\"0\",role=\"pool\"} 1"));
  EXPECT_TRUE(HasLine(t, "shoal_actors 1"));
  EXPECT_TRUE(HasLine(t, "shoal_store_used_bytes 250"));
  EXPECT_TRUE(HasLine(t, "shoal_store_free_bytes 750"));
  EXPECT_TRUE(HasLine(t, "shoal_store_evictions_total 3"));
  EXPECT_TRUE(
      HasLine(t, "shoal_node_info{job_id=\"job-a\",coordinator_pid=\"42\"} 1"));
}

TEST(MetricsFamiliesTest, StoreTrafficAndDeviceMemoryBecomeSeries) {
  Figures f = SomeFigures();
  auto* s = f.mutable_store();
  s->set_creates(4);
  s->set_created_bytes(4096);
  s->set_gets(9);
  s->set_get_bytes(8192);
  s->set_spills(2);
  s->set_restored_bytes(512);
  auto* d = s->add_devices();
  d->set_ordinal(1);
  d->set_capacity_bytes(256 << 20);
  d->set_used_bytes(1 << 20);
  const std::string t = Text(FamiliesOf(f));
  EXPECT_TRUE(HasLine(t, "shoal_store_creates_total 4"));
  EXPECT_TRUE(HasLine(t, "shoal_store_created_bytes_total 4096"));
  EXPECT_TRUE(HasLine(t, "shoal_store_gets_total 9"));
  EXPECT_TRUE(HasLine(t, "shoal_store_get_bytes_total 8192"));
  EXPECT_TRUE(HasLine(t, "shoal_store_spills_total 2"));
  EXPECT_TRUE(HasLine(t, "shoal_store_restored_bytes_total 512"));
  EXPECT_TRUE(
      HasLine(t, "shoal_store_device_capacity_bytes{gpu=\"1\"} 268435456"));
  EXPECT_TRUE(HasLine(t, "shoal_store_device_used_bytes{gpu=\"1\"} 1048576"));
}

TEST(MetricsFamiliesTest, RunsByNameBecomeCountersAndHistograms) {
  Figures f = SomeFigures();
  wire::TaskNameStats* t = f.add_tasks_by_name();
  t->set_name("py:mod:train");
  t->set_started(4);
  t->set_succeeded(3);
  t->set_failed(1);
  t->set_retried(1);
  for (size_t i = 0; i < kLatencyBuckets; ++i) {
    t->add_run_buckets(i == 3 ? 3 : i == kLatencyBuckets - 1 ? 1 : 0);
    t->add_wait_buckets(i == 0 ? 4 : 0);
  }
  t->set_run_seconds(200.5);
  t->set_wait_seconds(0.0001);
  const std::string s = Text(FamiliesOf(f));
  EXPECT_TRUE(
      HasLine(s, "shoal_task_runs_started_total{name=\"py:mod:train\"} 4"));
  EXPECT_TRUE(
      HasLine(s, "shoal_task_runs_succeeded_total{name=\"py:mod:train\"} 3"));
  EXPECT_TRUE(
      HasLine(s, "shoal_task_runs_failed_total{name=\"py:mod:train\"} 1"));
  EXPECT_TRUE(
      HasLine(s, "shoal_task_runs_retried_total{name=\"py:mod:train\"} 1"));
  // Cumulative buckets in seconds: 3 runs <= 1 ms, the 4th above 100 s.
  EXPECT_TRUE(HasLine(
      s,
      "shoal_task_run_seconds_bucket{name=\"py:mod:train\",le=\"0.00025\"} 0"));
  EXPECT_TRUE(HasLine(
      s,
      "shoal_task_run_seconds_bucket{name=\"py:mod:train\",le=\"0.001\"} 3"));
  EXPECT_TRUE(HasLine(
      s, "shoal_task_run_seconds_bucket{name=\"py:mod:train\",le=\"100\"} 3"));
  EXPECT_TRUE(HasLine(
      s, "shoal_task_run_seconds_bucket{name=\"py:mod:train\",le=\"+Inf\"} 4"));
  EXPECT_TRUE(
      HasLine(s, "shoal_task_run_seconds_count{name=\"py:mod:train\"} 4"));
  EXPECT_TRUE(
      HasLine(s, "shoal_task_run_seconds_sum{name=\"py:mod:train\"} 200.5"));
  EXPECT_TRUE(HasLine(
      s, "shoal_task_queue_wait_seconds_count{name=\"py:mod:train\"} 4"));
}

TEST(MetricsFamiliesTest, FrontendFiguresBecomeSeries) {
  Figures f = SomeFigures();
  ipc::FrontendStats* fs = f.mutable_frontend_stats();
  fs->set_sessions(3);
  fs->set_principals(2);
  fs->set_tcp_connections(1);
  fs->set_requests(100);
  fs->set_request_bytes(5000);
  fs->set_reply_bytes(7000);
  fs->set_parked_requests(12);
  fs->set_shared_turns(9);
  for (int code = 0; code < 18; ++code)
    fs->add_errors_by_code(code == 8 ? 4 : 0);
  const std::string s = Text(FamiliesOf(f));
  EXPECT_TRUE(HasLine(s, "shoal_frontend_sessions 3"));
  EXPECT_TRUE(HasLine(s, "shoal_frontend_principals 2"));
  EXPECT_TRUE(HasLine(s, "shoal_frontend_tcp_connections 1"));
  EXPECT_TRUE(HasLine(s, "shoal_frontend_requests_total 100"));
  EXPECT_TRUE(HasLine(s, "shoal_frontend_request_bytes_total 5000"));
  EXPECT_TRUE(HasLine(s, "shoal_frontend_reply_bytes_total 7000"));
  EXPECT_TRUE(HasLine(s, "shoal_frontend_parked_requests_total 12"));
  EXPECT_TRUE(HasLine(s, "shoal_frontend_shared_turns_total 9"));
  EXPECT_TRUE(
      HasLine(s, "shoal_frontend_errors_total{code=\"RESOURCE_EXHAUSTED\"} 4"));
  EXPECT_TRUE(
      HasLine(s, "shoal_frontend_errors_total{code=\"PERMISSION_DENIED\"} 0"));
}

TEST(MetricsFamiliesTest, ALaunchersFiguresAndCollectiveTalliesBecomeSeries) {
  LaunchFigures f;
  f.job_id = "job-l";
  f.node_rank = 1;
  f.local_ranks = 2;
  f.restarts = 3;
  ProcessTimeline rank;
  rank.label = "rank 2";
  CollectiveCount c;
  c.op = "all_reduce";
  c.backend = "shm";
  c.calls = 10;
  c.bytes = 40960;
  c.busy_ns = 2500000000;
  c.wait_ns = 500000000;
  rank.collectives.push_back(c);
  f.tallies.processes.push_back(rank);
  const std::string s = Text(LaunchFamiliesOf(f));
  EXPECT_TRUE(HasLine(s, "shoal_up 1"));
  EXPECT_TRUE(
      HasLine(s, "shoal_launch_info{job_id=\"job-l\",node_rank=\"1\"} 1"));
  EXPECT_TRUE(HasLine(s, "shoal_launch_local_ranks 2"));
  EXPECT_TRUE(HasLine(s, "shoal_launch_restarts_total 3"));
  const std::string labels =
      "{process=\"rank 2\",op=\"all_reduce\",backend=\"shm\"}";
  EXPECT_TRUE(HasLine(s, "shoal_collective_calls_total" + labels + " 10"));
  EXPECT_TRUE(HasLine(s, "shoal_collective_bytes_total" + labels + " 40960"));
  EXPECT_TRUE(HasLine(s, "shoal_collective_seconds_total" + labels + " 2.5"));
  EXPECT_TRUE(
      HasLine(s, "shoal_collective_wait_seconds_total" + labels + " 0.5"));
}

TEST(MetricsFamiliesTest, DownIsUpZeroAlone) {
  EXPECT_EQ(Text(DownFamilies()),
            "# HELP shoal_up 1 when the node's figures were gathered for this "
            "scrape, else 0\n# TYPE shoal_up gauge\nshoal_up 0\n");
}

// GET `path` from 127.0.0.1:`port`: the whole response, or "" on failure.
std::string HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string got;
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
    const std::string req =
        absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
    if (write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size())) {
      char buf[4096];
      ssize_t n;
      while ((n = read(fd, buf, sizeof(buf))) > 0) got.append(buf, n);
    }
  }
  close(fd);
  return got;
}

TEST(MetricsServerTest, ServesTheSourcesFiguresOnLoopback) {
  int calls = 0;
  absl::StatusOr<std::unique_ptr<MetricsServer>> server =
      MetricsServer::Start({}, [&calls]() -> absl::StatusOr<Figures> {
        if (++calls == 2) return absl::UnavailableError("node gone");
        return SomeFigures();
      });
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_GT((*server)->port(), 0);
  EXPECT_EQ((*server)->address(),
            absl::StrCat("127.0.0.1:", (*server)->port()));
  const std::string first = HttpGet((*server)->port(), "/metrics");
  EXPECT_TRUE(absl::StrContains(first, "200 OK")) << first;
  EXPECT_TRUE(HasLine(first, "shoal_tasks_submitted_total 10"));
  // A source that fails: the scrape says so with shoal_up 0.
  const std::string second = HttpGet((*server)->port(), "/metrics");
  EXPECT_TRUE(HasLine(second, "shoal_up 0"));
  EXPECT_FALSE(absl::StrContains(second, "shoal_tasks_submitted_total"));
}

TEST(MetricsServerTest, ATakenPortIsUnavailableNamingIt) {
  absl::StatusOr<std::unique_ptr<MetricsServer>> a = MetricsServer::Start(
      {}, [] { return absl::StatusOr<Figures>(SomeFigures()); });
  ASSERT_TRUE(a.ok()) << a.status();
  MetricsServerOptions o;
  o.port = (*a)->port();
  absl::StatusOr<std::unique_ptr<MetricsServer>> b = MetricsServer::Start(
      o, [] { return absl::StatusOr<Figures>(SomeFigures()); });
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(b.status().message(),
                                absl::StrCat("127.0.0.1:", o.port)))
      << b.status();
}

TEST(MetricsServerTest, BadPortsAndAddressesAreInvalid) {
  auto source = [] { return absl::StatusOr<Figures>(SomeFigures()); };
  MetricsServerOptions o;
  o.port = 70000;
  EXPECT_EQ(MetricsServer::Start(o, source).status().code(),
            absl::StatusCode::kInvalidArgument);
  o.port = 0;
  o.address = "";
  EXPECT_EQ(MetricsServer::Start(o, source).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shoal::observe
