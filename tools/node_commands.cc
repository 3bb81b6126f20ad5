// `shoal start`, `shoal stop`, `shoal status` and the hidden `shoal worker`.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/log.h"
#include "base/process_info.h"
#include "base/runtime_dir.h"
#include "coordinator/client.h"
#include "coordinator/coordinator.h"
#include "coordinator/discovery.h"
#include "observe/dashboard_server.h"
#include "observe/metrics.h"
#include "python/ext/builtin.h"
#include "tools/bench/bench_util.h"
#include "tools/cli/args.h"
#include "tools/cli/json.h"
#include "tools/commands.h"
#include "tools/dashboard_command.h"
#include "worker/python_runner.h"
#include "worker/worker_main.h"

namespace shoal::cli {
namespace {

coordinator::Coordinator* g_coordinator = nullptr;

void OnSignal(int) {
  if (g_coordinator != nullptr) g_coordinator->Stop();
}

// What `shoal start` does besides the node: --metrics-port, --metrics-address,
// --dashboard.
struct NodeExtras {
  std::optional<observe::MetricsServerOptions> metrics;
  std::optional<observe::DashboardServerOptions> dashboard;
};

// The figures of a scrape: the node's status, asked of its own ipc://
// frontend as `shoal status` asks it (one request of the event loop). The
// client connects at the first scrape (the loop runs by then) and again
// after a failure.
observe::FigureSource NodeFigures(std::string frontend) {
  struct State {
    std::string frontend;
    std::unique_ptr<coordinator::Client> client;
  };
  auto state = std::make_shared<State>();
  state->frontend = std::move(frontend);
  return [state]() -> absl::StatusOr<observe::Figures> {
    if (state->client == nullptr) {
      coordinator::ClientOptions co;
      co.endpoint = state->frontend;
      co.force_remote = true;
      co.name = "metrics";
      co.rpc_timeout = absl::Seconds(5);
      absl::StatusOr<std::unique_ptr<coordinator::Client>> c =
          coordinator::Client::Connect(co);
      if (!c.ok()) return c.status();
      state->client = *std::move(c);
    }
    absl::StatusOr<ipc::NodeStatus> st =
        state->client->Status(/*tasks_by_name=*/true);
    if (!st.ok()) state->client.reset();
    return st;
  };
}

// Runs the coordinator in this process until a signal or `shoal stop`.
// `ready_fd` (if ≥ 0) gets one line, "ready ..." or "error ...", then closes.
int RunNode(coordinator::CoordinatorOptions options, const NodeExtras& extras,
            int ready_fd) {
  auto fail_start = [ready_fd](const absl::Status& s) {
    if (ready_fd >= 0) {
      const std::string line = absl::StrCat("error ", s.message(), "\n");
      ssize_t unused = write(ready_fd, line.data(), line.size());
      (void)unused;
      close(ready_fd);
    }
    return Fail(s);
  };
  absl::StatusOr<std::unique_ptr<coordinator::Coordinator>> node =
      coordinator::Coordinator::Create(std::move(options));
  if (!node.ok()) return fail_start(node.status());
  std::unique_ptr<observe::MetricsServer> metrics;
  if (extras.metrics.has_value()) {
    absl::StatusOr<std::unique_ptr<observe::MetricsServer>> m =
        observe::MetricsServer::Start(
            *extras.metrics, NodeFigures((*node)->frontend_endpoint()));
    if (!m.ok()) return fail_start(m.status());
    metrics = *std::move(m);
  }
  std::unique_ptr<observe::DashboardServer> dashboard;
  if (extras.dashboard.has_value()) {
    absl::StatusOr<std::unique_ptr<observe::DashboardServer>> d =
        observe::DashboardServer::Start(
            *extras.dashboard,
            NodeDashboardSources((*node)->job_id(),
                                 (*node)->frontend_endpoint()));
    if (!d.ok()) return fail_start(d.status());
    dashboard = *std::move(d);
  }
  g_coordinator = node->get();
  struct sigaction sa = {};
  sa.sa_handler = OnSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  std::string ready = absl::StrCat(
      "ready job ", (*node)->job_id(), ", frontend ",
      (*node)->frontend_endpoint(), ", store ", (*node)->store_endpoint(),
      ", pid ", getpid(), ", tcp ", (*node)->tcp_endpoint());
  if (metrics != nullptr) {
    absl::StrAppend(&ready, ", metrics http://", metrics->address(),
                    "/metrics");
  }
  if (dashboard != nullptr) {
    absl::StrAppend(&ready, ", dashboard ", dashboard->url());
  }
  if (ready_fd >= 0) {
    const std::string line = ready + "\n";
    ssize_t unused = write(ready_fd, line.data(), line.size());
    (void)unused;
    close(ready_fd);
  } else {
    std::printf("node %s\n", ready.c_str());
    std::fflush(stdout);
  }
  absl::Status s = (*node)->Run();
  g_coordinator = nullptr;
  dashboard.reset();  // its threads end before the node they ask
  metrics.reset();
  node->reset();
  if (!s.ok()) return Fail(s);
  return 0;
}

// Absolute paths for --plugin's libraries and --pythonpath's directories, into
// `o`. Errors: NotFound naming the first that does not exist.
absl::Status ResolveTaskPaths(const std::string& plugins,
                              const std::string& python_path,
                              coordinator::CoordinatorOptions* o) {
  if (!plugins.empty())
    o->plugins = absl::StrSplit(plugins, ':', absl::SkipEmpty());
  for (std::string& plugin : o->plugins) {
    char resolved[PATH_MAX];
    if (realpath(plugin.c_str(), resolved) == nullptr) {
      return absl::NotFoundError(
          absl::StrCat("--plugin ", plugin, ": no such file"));
    }
    plugin = resolved;
  }
  for (absl::string_view dir :
       absl::StrSplit(python_path, ':', absl::SkipEmpty())) {
    char resolved[PATH_MAX];
    if (realpath(std::string(dir).c_str(), resolved) == nullptr) {
      return absl::NotFoundError(
          absl::StrCat("--pythonpath ", dir, ": no such directory"));
    }
    o->python_path.push_back(resolved);
  }
  return absl::OkStatus();
}

// `shoal start`'s flags as the node's options; `*daemon` is --daemon.
// Errors: InvalidArgument (a bad flag), NotFound (ResolveTaskPaths);
// Cancelled after --help.
absl::StatusOr<coordinator::CoordinatorOptions> ParseStartFlags(
    int argc, char** argv, bool* daemon, NodeExtras* extras) {
  ArgParser p(
      "shoal start [flags]",
      "Starts a node: the store, N worker processes and the coordinator that\n"
      "serves tasks (`shoal submit`, the C++ and Python clients). Runs in the\n"
      "foreground until Ctrl-C or `shoal stop`, or in the background with "
      "--daemon.");
  int64_t& n = p.Int("workers", 2, "worker processes");
  int64_t& gpus_per_worker =
      p.Int("gpus-per-worker", 0, "GPUs each worker gets");
  int64_t& cpus_per_worker =
      p.Int("cpus-per-worker", 1, "CPUs each worker offers to tasks");
  std::string& gpus =
      p.String("gpus", "",
               "GPUs to use, as CUDA_VISIBLE_DEVICES (default: all visible)");
  uint64_t& store_bytes = p.Bytes(
      "store-bytes", 0, "store size (default: min(30% RAM, 80% /dev/shm))");
  const SpillFlags spill = AddSpillFlags(p);
  std::string& plugins = p.String(
      "plugin", "", "shared libraries of task functions, ':'-separated");
  std::string& python_path =
      p.String("pythonpath", "",
               "directories the workers' Python searches for task modules, "
               "':'-separated");
  std::string& job_id = p.String("job-id", "", "job id (default: a fresh one)");
  std::string& bind = p.String("bind", "127.0.0.1:0",
                               "frontend HOST:PORT (port 0: any free one)");
  bool& insecure =
      p.Bool("insecure", false, "allow a non-loopback --bind without CURVE");
  std::string& client_keys =
      p.String("client-keys", "", "CURVE: file of admitted client public keys");
  std::string& server_key = p.String(
      "server-key", "", "CURVE: server key-pair file (created if missing)");
  std::string& allow_modules = p.String(
      "allow-modules", "",
      "Python module prefixes frontend clients' py: tasks may name, "
      "','-separated (default: any; with a list, pickled code is refused)");
  int64_t& max_queued = p.Int("max-queued-per-client", 24576,
                              "tasks a frontend client may have queued");
  int64_t& max_held =
      p.Int("max-held-per-client", 24576, "results a frontend client may hold");
  uint64_t& max_store = p.Bytes("max-store-bytes-per-client", uint64_t{1} << 30,
                                "store bytes of results a client may hold");
  uint64_t& max_reply = p.Bytes(
      "max-reply-bytes-per-client", 16 << 20,
      "bytes of replies kept for a client session before its requests wait "
      "and its results stay in the node (never dropped)");
  uint64_t& max_parked = p.Bytes(
      "max-parked-bytes-per-client", uint64_t{64} << 20,
      "bytes of requests a client that does not read may have waiting; more "
      "closes its connection (a resumable session survives)");
  int64_t& max_waits = p.Int("max-waits-per-client", 1024,
                             "waits a frontend client may have pending");
  int64_t& max_actors = p.Int("max-actors-per-client", 16,
                              "actors a client other than the owner may have");
  int64_t& max_connections =
      p.Int("max-connections", 1024,
            "TCP connections at once (at most a quarter of the descriptor "
            "limit); new ones wait while at it");
  int64_t& resume_grace_ms =
      p.Int("resume-grace-ms", 60000,
            "how long a resumable client session outlives its closed "
            "connection");
  int64_t& io_threads =
      p.Int("io-threads", coordinator::CoordinatorOptions().io_threads,
            "ZeroMQ I/O threads of the node's process: they run every "
            "connection's CURVE handshakes and encryption, each connection on "
            "one (1..64)");
  int64_t& status_store_refresh_ms = p.Int(
      "status-store-refresh-ms",
      absl::ToInt64Milliseconds(
          coordinator::CoordinatorOptions().status_store_refresh),
      "how old the store's figures in a status asked for by a client other "
      "than the owner may be (the store's table is scanned at most once in "
      "this time for them; the owner's status is read afresh)");
  bool& daemon_flag = p.Bool(
      "daemon", false, "run in the background; print the endpoint and return");
  int64_t& metrics_port =
      p.Int("metrics-port", -1,
            "serve Prometheus metrics on this port at /metrics (0: any free "
            "one; default: none)");
  std::string& metrics_address =
      p.String("metrics-address", "127.0.0.1",
               "the address --metrics-port listens on (the endpoint has no "
               "authentication: see docs/security.md before widening it)");
  bool& dashboard =
      p.Bool("dashboard", false,
             "serve `shoal dashboard`'s page beside the node (its URL, which "
             "carries a token, ends the ready line)");
  int64_t& dashboard_port =
      p.Int("dashboard-port", 0, "--dashboard's port (0: any free one)");
  std::string& dashboard_address =
      p.String("dashboard-address", "127.0.0.1",
               "the address --dashboard listens on (see docs/security.md "
               "before widening it)");
  p.Alias('n', "workers");
  if (absl::Status s = p.Parse(argc, argv); !s.ok()) return s;
  if (metrics_port >= 0) {
    if (metrics_port > 65535) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--metrics-port ", metrics_port, " is outside 0..65535"));
    }
    observe::MetricsServerOptions m;
    m.port = static_cast<int>(metrics_port);
    m.address = metrics_address;
    extras->metrics = m;
  } else if (p.seen("metrics-address")) {
    return absl::InvalidArgumentError("--metrics-address needs --metrics-port");
  }
  if (dashboard) {
    if (dashboard_port < 0 || dashboard_port > 65535) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--dashboard-port ", dashboard_port, " is outside 0..65535"));
    }
    observe::DashboardServerOptions d;
    d.port = static_cast<int>(dashboard_port);
    d.address = dashboard_address;
    extras->dashboard = d;
  } else if (p.seen("dashboard-port") || p.seen("dashboard-address")) {
    return absl::InvalidArgumentError(
        "--dashboard-port and --dashboard-address need --dashboard");
  }
  coordinator::CoordinatorOptions o;
  o.job_id = job_id.empty() ? NewJobId() : job_id;
  o.num_workers = static_cast<int>(n);
  o.gpus_per_worker = static_cast<int>(gpus_per_worker);
  o.cpus_per_worker = static_cast<int>(cpus_per_worker);
  if (p.seen("gpus")) o.gpus = gpus;
  o.store_bytes = store_bytes;
  if (absl::Status s = ReadSpillFlags(spill, &o.spill_dir, &o.spill_bytes);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = ResolveTaskPaths(plugins, python_path, &o); !s.ok())
    return s;
  o.bind = bind;
  o.insecure = insecure;
  o.client_keys_file = client_keys;
  o.server_key_file = server_key;
  o.allowed_modules = absl::StrSplit(allow_modules, ',', absl::SkipEmpty());
  if (max_queued < 1 || max_held < 1 || max_store < 1 || max_reply < 1 ||
      max_parked < 1 || max_waits < 1 || max_actors < 0 ||
      max_connections < 1 || resume_grace_ms < 0 ||
      status_store_refresh_ms < 0) {
    return absl::InvalidArgumentError(
        "the --max-* limits must be at least 1 (--max-actors-per-client, "
        "--resume-grace-ms and --status-store-refresh-ms at least 0)");
  }
  o.max_queued_per_client = static_cast<uint64_t>(max_queued);
  o.max_held_per_client = static_cast<uint64_t>(max_held);
  o.max_store_bytes_per_client = max_store;
  o.max_reply_bytes_per_client = max_reply;
  o.max_parked_bytes_per_client = max_parked;
  o.max_waits_per_client = static_cast<uint64_t>(max_waits);
  o.max_actors_per_client = static_cast<uint64_t>(max_actors);
  o.connection_limits.max_connections = static_cast<size_t>(max_connections);
  o.resume_grace = absl::Milliseconds(resume_grace_ms);
  o.status_store_refresh = absl::Milliseconds(status_store_refresh_ms);
  if (io_threads < 1 || io_threads > 64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--io-threads must be between 1 and 64, got ", io_threads));
  }
  o.io_threads = static_cast<int>(io_threads);
  *daemon = daemon_flag;
  return o;
}

// --daemon: a forked child becomes the node, in its own session with output
// to the job's coordinator.log; this process prints its "ready" line (or its
// error) and returns.
int StartDaemon(coordinator::CoordinatorOptions o, const NodeExtras& extras) {
  int fds[2];
  if (pipe(fds) != 0) return Fail(absl::InternalError("pipe failed"));
  absl::StatusOr<std::string> dir = JobDir(o.job_id);
  if (!dir.ok()) return Fail(dir.status());
  const std::string log = absl::StrCat(*dir, "/coordinator.log");
  const pid_t pid = fork();
  if (pid < 0) return Fail(absl::InternalError("fork failed"));
  if (pid == 0) {
    close(fds[0]);
    setsid();
    int null = open("/dev/null", O_RDONLY);
    int out = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    dup2(null, STDIN_FILENO);
    dup2(out, STDOUT_FILENO);
    dup2(out, STDERR_FILENO);
    _exit(RunNode(std::move(o), extras, fds[1]));
  }
  close(fds[1]);
  std::string line;
  char c;
  while (read(fds[0], &c, 1) == 1 && c != '\n') line += c;
  close(fds[0]);
  if (absl::StartsWith(line, "ready ")) {
    std::printf("node %s (log %s)\n", line.substr(6).c_str(), log.c_str());
    return 0;
  }
  std::fprintf(
      stderr, "shoal: %s\n",
      line.empty() ? "the node failed to start" : line.substr(6).c_str());
  return 1;
}

// The wire's NodeStatus is a plain record generated from proto/shoal.proto,
// so the JSON printer prints it as it is: the schema names the fields.
absl::Status PrintStatusJson(const ipc::NodeStatus& st) {
  return PrintJson(st);
}

void PrintStatusText(const ipc::NodeStatus& st) {
  std::printf("job %s  coordinator pid %d  up %.1f s  frontend %s\n",
              st.job_id().c_str(), st.coordinator_pid(),
              st.uptime_ms() / 1000.0, st.frontend().c_str());
  std::printf("tasks: %u queued, %u running, %llu submitted, %llu completed\n",
              st.queued(), st.running(),
              static_cast<unsigned long long>(st.submitted()),
              static_cast<unsigned long long>(st.completed()));
  std::printf("store: %s of %s used, %llu objects, %llu evictions\n",
              FormatBytes(st.store().used_bytes()).c_str(),
              FormatBytes(st.store().capacity_bytes()).c_str(),
              static_cast<unsigned long long>(st.store().objects()),
              static_cast<unsigned long long>(st.store().evictions()));
  bench::Table t({"worker", "pid", "gpus", "state", "done", "failed",
                  "restarts", "rss", "last exit"});
  for (const ipc::WorkerStatus& w : st.workers()) {
    t.AddRow({absl::StrCat(w.id()), w.pid() ? absl::StrCat(w.pid()) : "-",
              w.gpus().empty() ? "-" : w.gpus(), w.state(),
              absl::StrCat(w.tasks_done()), absl::StrCat(w.tasks_failed()),
              absl::StrCat(w.restarts()),
              w.rss_bytes() ? FormatBytes(w.rss_bytes()) : "-",
              w.last_exit().empty() ? "-" : w.last_exit()});
  }
  std::fputs(t.Render().c_str(), stdout);
}

}  // namespace

int StartCommand(int argc, char** argv) {
  bool daemon = false;
  NodeExtras extras;
  absl::StatusOr<coordinator::CoordinatorOptions> o =
      ParseStartFlags(argc, argv, &daemon, &extras);
  if (!o.ok()) return Fail(o.status());
  if (!daemon) return RunNode(*std::move(o), extras, -1);
  return StartDaemon(*std::move(o), extras);
}

int WorkerCommand(int argc, char** argv) {
  (void)argc;
  (void)argv;
  absl::StatusOr<worker::WorkerOptions> o = worker::WorkerOptionsFromEnv();
  if (!o.ok()) return Fail(o.status());
  // Tasks get the client API (nested tasks) from this binary's own copy of
  // the extension: loading _shoal.so beside it cannot work (ext/builtin.h).
  pyext::SetBlockedWaitReporter(&worker::ReportBlockedWait);
  pyext::SetWaitHelper(&worker::HelpWhileWaiting);
  worker::SetPythonStartHook(&pyext::InstallBuiltinModule);
  absl::Status s = worker::RunWorker(*o);
  if (!s.ok()) return Fail(s);
  return 0;
}

int StatusCommand(int argc, char** argv) {
  ArgParser p("shoal status [flags]",
              "Shows a node's workers, task queue and store.");
  std::string& job_id =
      p.String("job-id", "", "which node (default: the one started last)");
  std::string& endpoint =
      p.String("endpoint", "", "the coordinator's frontend (tcp://...)");
  bool& json = p.Bool("json", false, "print JSON");
  if (absl::Status s = p.Parse(argc, argv); !s.ok()) return Fail(s);
  coordinator::ClientOptions co;
  co.job_id = job_id;
  co.endpoint = endpoint;
  co.force_remote = true;  // status needs no fast path
  auto client = coordinator::Client::Connect(co);
  if (!client.ok()) return Fail(client.status());
  absl::StatusOr<ipc::NodeStatus> st = (*client)->Status();
  if (!st.ok()) return Fail(st.status());
  if (json) {
    if (absl::Status s = PrintStatusJson(*st); !s.ok()) return Fail(s);
  } else {
    PrintStatusText(*st);
  }
  return 0;
}

int StopCommand(int argc, char** argv) {
  ArgParser p("shoal stop [flags]",
              "Stops a node: its workers, store and coordinator.");
  std::string& job_id =
      p.String("job-id", "", "which node (default: the one started last)");
  if (absl::Status s = p.Parse(argc, argv); !s.ok()) return Fail(s);
  absl::StatusOr<coordinator::Discovery> d = coordinator::ReadDiscovery(job_id);
  if (!d.ok()) return Fail(d.status());
  coordinator::ClientOptions co;
  co.endpoint = d->frontend;  // the owner's ipc:// socket
  co.force_remote = true;
  auto client = coordinator::Client::Connect(co);
  if (!client.ok()) return Fail(client.status());
  absl::Status s = (*client)->StopNode();
  if (!s.ok()) return Fail(s);
  const absl::Time deadline = absl::Now() + absl::Seconds(15);
  while (ProcessIsAlive(d->pid) && absl::Now() < deadline)
    absl::SleepFor(absl::Milliseconds(10));
  if (ProcessIsAlive(d->pid)) {
    return Fail(absl::DeadlineExceededError(absl::StrCat(
        "the coordinator (pid ", d->pid, ") is still running after 15 s")));
  }
  std::printf("stopped job %s\n", d->job_id.c_str());
  return 0;
}

}  // namespace shoal::cli
