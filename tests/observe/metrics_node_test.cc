// `shoal start --metrics-port`: a live node's /metrics passes `promtool check
// metrics`, a real Prometheus server scrapes it, and the endpoint listens on
// loopback unless told otherwise.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/subprocess.h"
#include "coordinator/client.h"
#include "gtest/gtest.h"
#include "tests/observe/http_get.h"
#include "tests/testing/command.h"
#include "tests/testing/test_env.h"

namespace shoal::testing {
namespace {

std::string TempDir() {
  if (const char* t = std::getenv("TEST_TMPDIR")) return t;
  char dir[] = "/tmp/shoal-metrics-test-XXXXXX";  // a private folder
  return mkdtemp(dir) != nullptr ? std::string(dir) : std::string();
}

bool Executable(const std::string& path) {
  return access(path.c_str(), X_OK) == 0;
}

// A `shoal start` node with --metrics-port 0 (and `flags`); stopped with
// SIGTERM at destruction.
class MetricsNode {
 public:
  // The node's "ready" line, or an error naming what it printed.
  absl::Status Start(std::vector<std::string> flags = {}) {
    job_id_ = UniqueJobId();
    std::vector<std::string> argv = {RunfilePath("tools/shoal"),
                                     "start",
                                     "--job-id",
                                     job_id_,
                                     "--store-bytes",
                                     "64M",
                                     "-n",
                                     "2",
                                     "--metrics-port",
                                     "0"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    SubprocessOptions o;
    o.pipe_stdout = true;
    o.parent_death_signal = SIGKILL;
    absl::StatusOr<Subprocess> p = Subprocess::Start(argv, o);
    if (!p.ok()) return p.status();
    process_ = *std::move(p);
    absl::StatusOr<std::string> line = process_.ReadLine(absl::Seconds(30));
    if (!line.ok()) return line.status();
    const std::string key = ", metrics http://";
    const size_t at = line->find(key);
    if (at == std::string::npos)
      return absl::InternalError(absl::StrCat("node said: ", *line));
    const size_t from = at + key.size();
    metrics_ = line->substr(from, line->find('/', from) - from);
    return absl::OkStatus();
  }
  ~MetricsNode() {
    if (process_.running()) {
      process_.Signal(SIGTERM);
      (void)process_.Wait(absl::Seconds(30));
    }
  }

  const std::string& job_id() const { return job_id_; }
  // HOST:PORT of its /metrics.
  const std::string& metrics() const { return metrics_; }

  // Runs `shoal submit FUNCTION` on it `n` times.
  void Submit(const std::string& function, int n) {
    for (int i = 0; i < n; ++i) {
      CommandResult r = RunCommand(
          {RunfilePath("tools/shoal"), "submit", "--job-id", job_id_, function},
          "submit");
      ASSERT_EQ(r.code, 0) << r.err;
    }
  }

 private:
  Subprocess process_;
  std::string job_id_;
  std::string metrics_;
};

// Whether the text has the line `line`.
bool HasLine(const std::string& text, const std::string& line) {
  return absl::StrContains(absl::StrCat("\n", text),
                           absl::StrCat("\n", line, "\n"));
}

// `promtool check metrics` on `text` (kept as `name` in the test's folder);
// skips the test, saying why, where promtool is absent.
void ExpectPromtoolPasses(const std::string& text, const std::string& name) {
  const std::string promtool = "/usr/bin/promtool";
  if (!Executable(promtool)) {
    GTEST_SKIP() << promtool
                 << " is absent (Debian's prometheus package; tools/setup "
                    "installs it): the format check is skipped";
  }
  const std::string file = absl::StrCat(TempDir(), "/", name);
  std::ofstream(file) << text;
  CommandResult check = RunCommand(
      {"/bin/sh", "-c", absl::StrCat(promtool, " check metrics < ", file)},
      "promtool");
  EXPECT_EQ(check.code, 0) << check.OutText() << check.err;
}

TEST(MetricsNodeTest, PromtoolPassesOnALiveNodesMetrics) {
  MetricsNode node;
  ASSERT_TRUE(node.Start().ok());
  EXPECT_TRUE(absl::StartsWith(node.metrics(), "127.0.0.1:")) << node.metrics();
  node.Submit("noop", 3);
  absl::StatusOr<HttpResponse> r = HttpGet(node.metrics(), "/metrics");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_TRUE(HasLine(r->body, "shoal_up 1")) << r->body;
  EXPECT_TRUE(HasLine(r->body, "shoal_tasks_submitted_total 3")) << r->body;
  EXPECT_TRUE(HasLine(r->body, "shoal_tasks_completed_total 3")) << r->body;
  EXPECT_TRUE(HasLine(r->body, "shoal_workers{state=\"idle\"} 2")) << r->body;
  EXPECT_TRUE(absl::StrContains(
      r->body, absl::StrCat("shoal_node_info{job_id=\"", node.job_id())))
      << r->body;
  // The store's usable bytes: --store-bytes less its table.
  EXPECT_TRUE(absl::StrContains(r->body, "\nshoal_store_capacity_bytes "))
      << r->body;
  EXPECT_FALSE(HasLine(r->body, "shoal_store_capacity_bytes 0")) << r->body;

  ExpectPromtoolPasses(r->body, "metrics.txt");
}

// Runs by task function reach the endpoint with the workers' heartbeats
// (every 500 ms): counts, a failed run, and the latency histograms.
TEST(MetricsNodeTest, RunsByTaskFunctionArriveWithTheHeartbeats) {
  MetricsNode node;
  ASSERT_TRUE(node.Start().ok());
  node.Submit("noop", 3);
  CommandResult failing = RunCommand(
      {RunfilePath("tools/shoal"), "submit", "--job-id", node.job_id(), "fail"},
      "submit");
  EXPECT_NE(failing.code, 0) << failing.OutText();
  const std::vector<std::string> want = {
      "shoal_task_runs_started_total{name=\"noop\"} 3",
      "shoal_task_runs_succeeded_total{name=\"noop\"} 3",
      "shoal_task_runs_failed_total{name=\"fail\"} 1",
      "shoal_task_run_seconds_count{name=\"noop\"} 3",
      "shoal_task_queue_wait_seconds_bucket{name=\"noop\",le=\"+Inf\"} 3"};
  std::string body;
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  bool all = false;
  while (!all && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(100));
    absl::StatusOr<HttpResponse> r = HttpGet(node.metrics(), "/metrics");
    ASSERT_TRUE(r.ok()) << r.status();
    body = r->body;
    all = true;
    for (const std::string& line : want) all = all && HasLine(body, line);
  }
  for (const std::string& line : want)
    EXPECT_TRUE(HasLine(body, line)) << line << "\n" << body;
  // The histograms pass the format check too.
  ExpectPromtoolPasses(body, "by_name.txt");
}

// The frontend's figures: a client's session and requests, and a refused
// request counted by its code.
TEST(MetricsNodeTest, TheFrontendsRequestsAndRefusalsAreCounted) {
  MetricsNode node;
  ASSERT_TRUE(node.Start().ok());
  coordinator::ClientOptions o;
  o.job_id = node.job_id();
  o.force_remote = true;
  absl::StatusOr<std::unique_ptr<coordinator::Client>> c =
      coordinator::Client::Connect(o);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(absl::IsNotFound((*c)->KillActor(12345)));
  EXPECT_TRUE(absl::IsNotFound((*c)->KillActor(12346)));
  absl::StatusOr<HttpResponse> r = HttpGet(node.metrics(), "/metrics");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(
      HasLine(r->body, "shoal_frontend_errors_total{code=\"NOT_FOUND\"} 2"))
      << r->body;
  EXPECT_TRUE(HasLine(
      r->body, "shoal_frontend_errors_total{code=\"PERMISSION_DENIED\"} 0"))
      << r->body;
  // This client's session and the metrics endpoint's own.
  EXPECT_FALSE(HasLine(r->body, "shoal_frontend_sessions 0")) << r->body;
  EXPECT_FALSE(HasLine(r->body, "shoal_frontend_requests_total 0")) << r->body;
  EXPECT_TRUE(absl::StrContains(r->body, "\nshoal_frontend_reply_bytes_total "))
      << r->body;
}

// `shoal launch --metrics-port 0`: while two ranks all_reduce, the
// launcher's endpoint reports each rank's calls by op and backend, and its
// own figures; the text passes promtool.
TEST(MetricsNodeTest, ALaunchersEndpointCountsItsRanksCollectives) {
  const std::string stop = absl::StrCat(TempDir(), "/stop-ranks");
  SubprocessOptions o;
  o.pipe_stdout = true;
  o.parent_death_signal = SIGKILL;
  absl::StatusOr<Subprocess> launch = Subprocess::Start(
      {"/bin/sh", "-c",
       absl::StrCat("exec ", RunfilePath("tools/shoal"),
                    " launch --nproc-per-node 2 --store-bytes 64M "
                    "--metrics-port 0 -- ",
                    RunfilePath("tests/observe/dashboard_ranks"), " ", stop,
                    " 2>&1")},
      o);
  ASSERT_TRUE(launch.ok()) << launch.status();
  std::string metrics;
  while (metrics.empty()) {
    absl::StatusOr<std::string> line = launch->ReadLine(absl::Seconds(60));
    ASSERT_TRUE(line.ok()) << line.status();
    const std::string key = "metrics http://";
    if (const size_t at = line->find(key); at != std::string::npos) {
      const size_t from = at + key.size();
      metrics = line->substr(from, line->find('/', from) - from);
    }
  }
  const std::vector<std::string> want = {"shoal_up 1",
                                         "shoal_launch_local_ranks 2",
                                         "shoal_launch_restarts_total 0"};
  std::string body;
  bool both = false;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (!both && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(200));
    absl::StatusOr<HttpResponse> r = HttpGet(metrics, "/metrics");
    ASSERT_TRUE(r.ok()) << r.status();
    body = r->body;
    // Each rank's all_reduce calls, counted (at least one each).
    both = true;
    for (const char* rank : {"rank 0", "rank 1"}) {
      const std::string series =
          absl::StrCat("\nshoal_collective_calls_total{process=\"", rank,
                       "\",op=\"all_reduce\",backend=\"shm\"} ");
      both = both && absl::StrContains(body, series);
    }
  }
  EXPECT_TRUE(both) << body;
  for (const std::string& line : want)
    EXPECT_TRUE(HasLine(body, line)) << line << "\n" << body;
  EXPECT_TRUE(absl::StrContains(body, "\nshoal_collective_wait_seconds_total{"))
      << body;
  std::ofstream(stop) << "stop";
  absl::StatusOr<int> code = launch->Wait(absl::Seconds(60));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0);
  ExpectPromtoolPasses(body, "launch.txt");
}

// A TCP port nobody listens on now (bound, read back, closed).
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    close(fd);
    return 0;
  }
  close(fd);
  return ntohs(a.sin_port);
}

TEST(MetricsNodeTest, APrometheusServerScrapesTheNode) {
  const std::string prometheus = "/usr/bin/prometheus";
  if (!Executable(prometheus)) {
    GTEST_SKIP() << prometheus
                 << " is absent (Debian's prometheus package; tools/setup "
                    "installs it): no server to scrape the node";
  }
  MetricsNode node;
  ASSERT_TRUE(node.Start().ok());
  node.Submit("noop", 2);

  const std::string dir = absl::StrCat(TempDir(), "/prometheus");
  const std::string config = absl::StrCat(dir, ".yml");
  std::ofstream(config) << "global:\n  scrape_interval: 1s\n"
                        << "scrape_configs:\n  - job_name: shoal\n"
                        << "    static_configs:\n      - targets: ['"
                        << node.metrics() << "']\n";
  // The server's port: a free one, tried again if another process takes it
  // between our check and its bind.
  Subprocess server;
  std::string web;
  const std::string log = absl::StrCat(TempDir(), "/prometheus.log");
  for (int attempt = 0; attempt < 3 && web.empty(); ++attempt) {
    const int port = FreePort();
    ASSERT_GT(port, 0);
    SubprocessOptions o;
    o.stdout_file = log;
    o.stderr_file = log;
    o.parent_death_signal = SIGKILL;
    absl::StatusOr<Subprocess> p = Subprocess::Start(
        {prometheus, absl::StrCat("--config.file=", config),
         absl::StrCat("--storage.tsdb.path=", dir),
         absl::StrCat("--web.listen-address=127.0.0.1:", port)},
        o);
    ASSERT_TRUE(p.ok()) << p.status();
    server = *std::move(p);
    const std::string address = absl::StrCat("127.0.0.1:", port);
    if (WaitUntil(
            [&] {
              absl::StatusOr<HttpResponse> r =
                  HttpGet(address, "/-/ready", absl::Seconds(2));
              return (r.ok() && r->status == 200) || !server.running();
            },
            absl::Seconds(60)) &&
        server.running()) {
      web = address;
    }
  }
  ASSERT_FALSE(web.empty()) << "prometheus did not start:\n" << ReadFile(log);

  // shoal_tasks_submitted_total{job="shoal"} as the server stored it.
  const std::string query =
      "/api/v1/query?query=shoal_tasks_submitted_total%7Bjob%3D%22shoal%22%7D";
  std::string body;
  const bool found = WaitUntil(
      [&] {
        absl::StatusOr<HttpResponse> r = HttpGet(web, query, absl::Seconds(2));
        if (!r.ok() || r->status != 200) return false;
        body = r->body;
        return absl::StrContains(body, "\"job\":\"shoal\"") &&
               absl::StrContains(body, ",\"2\"]");
      },
      absl::Seconds(60));
  EXPECT_TRUE(found) << body << "\n" << ReadFile(log);
  server.Signal(SIGTERM);
  (void)server.Wait(absl::Seconds(30));
}

TEST(MetricsNodeTest, ATakenPortFailsTheStartNamingIt) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const std::string port = absl::StrCat(ntohs(a.sin_port));
  CommandResult r = RunCommand(
      {RunfilePath("tools/shoal"), "start", "--job-id", UniqueJobId(),
       "--store-bytes", "64M", "-n", "1", "--metrics-port", port},
      "start");
  close(fd);
  EXPECT_EQ(r.code, 1) << r.OutText();
  EXPECT_TRUE(absl::StrContains(r.err, absl::StrCat("127.0.0.1:", port)))
      << r.err;
}

TEST(MetricsNodeTest, AnAddressWithoutAPortIsRefused) {
  CommandResult r = RunCommand(
      {RunfilePath("tools/shoal"), "start", "--metrics-address", "0.0.0.0"},
      "start");
  EXPECT_EQ(r.code, 2) << r.OutText();  // a usage error
  EXPECT_TRUE(
      absl::StrContains(r.err, "--metrics-address needs --metrics-port"))
      << r.err;
}

}  // namespace
}  // namespace shoal::testing
