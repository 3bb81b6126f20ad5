#include "launch/launcher.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/log.h"
#include "base/monotonic_clock.h"
#include "base/python_env.h"
#include "base/runtime_dir.h"
#include "base/status_macros.h"
#include "base/subprocess.h"
#include "base/temp_dir.h"
#include "gpu/device_visibility.h"
#include "ipc/socket.h"
#include "launch/kv_client.h"
#include "launch/kv_service.h"
#include "launch/launcher_internal.h"
#include "launch/local_group.h"
#include "launch/slurm.h"
#include "observe/metrics.h"
#include "observe/timeline.h"
#include "observe/timeline_read.h"
#include "shm/store_service.h"

namespace shoal::launch {

using launcher_internal::ExitCodeOf;
using launcher_internal::FreePort;
using launcher_internal::Launcher;
using launcher_internal::LocalOutcome;

namespace {

// SIGINT/SIGTERM arrive through an eventfd the event loop polls.
int g_signal_fd = -1;
std::atomic<int> g_signal{0};

void OnSignal(int sig) {
  g_signal.store(sig);
  const uint64_t one = 1;
  ssize_t unused = write(g_signal_fd, &one, sizeof(one));
  (void)unused;
}

std::string DescribeExit(int status) {
  if (WIFSIGNALED(status)) {
    const char* name = sigabbrev_np(WTERMSIG(status));
    return absl::StrCat("killed by SIG", name ? name : "?");
  }
  return absl::StrCat("exit code ", WEXITSTATUS(status));
}

// Watches a generation's stop key, through a thread with its own connection,
// and makes fd() readable once another node has set it. With no endpoint
// (single-node), fd() never becomes readable.
class StopKeyWatcher {
 public:
  // `rpc_timeout` bounds each wait on the key-value service: the destructor
  // joins the thread, so a node 0 that vanished delays this launcher's exit
  // by up to that long.
  StopKeyWatcher(const std::string& kv_endpoint, std::string key,
                 const std::string& secret, absl::Duration rpc_timeout)
      : fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
    if (kv_endpoint.empty()) return;
    thread_ = std::thread(
        [this, kv_endpoint, key = std::move(key), secret, rpc_timeout] {
          launch::KvClientOptions ko;
          ko.secret = secret;
          ko.rpc_timeout = rpc_timeout;
          auto kv = launch::KvClient::Connect(kv_endpoint, ko);
          while (kv.ok() && watching_.load()) {
            if ((*kv)->Get(key, absl::Milliseconds(500)).ok()) {
              const uint64_t one = 1;
              ssize_t unused = write(fd_, &one, sizeof(one));
              (void)unused;
              return;
            }
          }
        });
  }
  StopKeyWatcher(const StopKeyWatcher&) = delete;
  StopKeyWatcher& operator=(const StopKeyWatcher&) = delete;
  ~StopKeyWatcher() {
    watching_.store(false);
    if (thread_.joinable()) thread_.join();
    close(fd_);
  }

  int fd() const { return fd_; }

 private:
  const int fd_;
  std::atomic<bool> watching_{true};
  std::thread thread_;
};

}  // namespace

namespace launcher_internal {

std::string Hostname() {
  char buf[256] = {};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
}

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 29500;
  sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof(a);
  int port = 29500;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  close(fd);
  return port;
}

int ExitCodeOf(int status) {
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

Launcher::~Launcher() {
  if (kv_service_) kv_service_->Stop();
  if (kv_thread_.joinable()) kv_thread_.join();
  if (store_) store_->Stop();
  if (store_thread_.joinable()) store_thread_.join();
}

absl::Status Launcher::ResolveProcesses() {
  const bool want_gpus =
      o_.nproc_per_node == "gpu" || o_.nproc_per_node == "auto";
  std::vector<std::string> visible;
  if (want_gpus || o_.gpus) {
    SHOAL_ASSIGN_OR_RETURN(visible, gpu::DiscoverGpusFromEnvironment(o_.gpus));
  }
  if (o_.nproc_per_node == "gpu" ||
      (o_.nproc_per_node == "auto" && !visible.empty())) {
    if (visible.empty()) {
      return absl::FailedPreconditionError(
          "--nproc-per-node gpu but no GPU is visible (CUDA_VISIBLE_DEVICES / "
          "--gpus / driver)");
    }
    nproc_ = static_cast<int>(visible.size());
    for (int i = 0; i < nproc_; ++i) {
      SHOAL_ASSIGN_OR_RETURN(std::string one,
                             gpu::ChildVisibleDevices(visible, {i}));
      gpus_.push_back(std::move(one));
    }
    return absl::OkStatus();
  }
  if (o_.nproc_per_node == "auto") {
    nproc_ = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  } else if (!absl::SimpleAtoi(o_.nproc_per_node, &nproc_) || nproc_ < 1 ||
             nproc_ > 1024) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--nproc-per-node must be a count (1-1024), gpu or auto; got '",
        o_.nproc_per_node, "'"));
  }
  gpus_.assign(nproc_, "");
  if (o_.gpus) {
    // Explicit GPUs with a count: every process sees them all.
    for (std::string& g : gpus_) g = absl::StrJoin(visible, ",");
  }
  return absl::OkStatus();
}

absl::Status Launcher::Setup() {
  if (o_.command.empty()) {
    return absl::InvalidArgumentError(
        "no command: shoal launch [flags] -- COMMAND ARGS...");
  }
  if (o_.nnodes < 1 || o_.node_rank < 0 || o_.node_rank >= o_.nnodes) {
    return absl::InvalidArgumentError(
        absl::StrCat("--node-rank must be in [0, --nnodes); got ", o_.node_rank,
                     " of ", o_.nnodes));
  }
  if (o_.nnodes > 1 && o_.coordinator.empty()) {
    return absl::InvalidArgumentError(
        "a multi-node job needs --coordinator HOST:PORT (node 0's address and "
        "a port)");
  }
  if (o_.max_restarts < 0)
    return absl::InvalidArgumentError("--max-restarts must be ≥ 0");
  SHOAL_RETURN_IF_ERROR(ResolveProcesses());
  if (o_.job_id.empty()) o_.job_id = NewJobId();
  const int64_t setup_ns = MonotonicNs();
  if (absl::Status s = observe::StartTimeline(
          o_.job_id, absl::StrCat("launcher ", o_.node_rank));
      !s.ok()) {
    SHOAL_LOG(WARNING, "shoal launch: no timeline: %s", s.ToString());
  }
  if (!o_.log_dir.empty()) {
    // Made 0700 when missing; refused when it is a link, another user's, or
    // others may write to it (LocalGroup opens the rank files in it).
    SHOAL_ASSIGN_OR_RETURN(
        const int dir_fd,
        OpenPrivateFolder(o_.log_dir, /*create=*/true, "--log-dir"));
    close(dir_fd);
  }
  // This node's store.
  shm::StoreOptions so;
  so.job_id = o_.job_id;
  so.store_bytes = o_.store_bytes;
  SHOAL_ASSIGN_OR_RETURN(store_, shm::StoreService::Create(so));
  store_thread_ = std::thread([s = store_.get()] { (void)s->Run(); });
  // The job's key-value store, on node 0.
  std::string host = "127.0.0.1", port = "*";
  if (!o_.coordinator.empty()) {
    const size_t colon = o_.coordinator.rfind(':');
    if (colon == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--coordinator must be HOST:PORT, got '", o_.coordinator, "'"));
    }
    host = o_.coordinator.substr(0, colon);
    port = o_.coordinator.substr(colon + 1);
  }
  SHOAL_ASSIGN_OR_RETURN(kv_secret_, JobSecret(o_.nnodes));
  if (o_.node_rank == 0) {
    KvServiceOptions ko;
    ko.curve_secret_key = kv_secret_;
    ko.endpoint = o_.nnodes > 1 ? absl::StrCat("tcp://0.0.0.0:", port)
                                : absl::StrCat("tcp://", host, ":", port);
    SHOAL_ASSIGN_OR_RETURN(kv_service_, KvService::Create(ko));
    kv_thread_ = std::thread([k = kv_service_.get()] { (void)k->Run(); });
    const std::string bound = kv_service_->endpoint();
    port = bound.substr(bound.rfind(':') + 1);
  }
  kv_endpoint_ = absl::StrCat("tcp://", host, ":", port);
  master_addr_ = host;
  if (o_.nnodes > 1) {
    launch::KvClientOptions ko;
    ko.rpc_timeout = absl::Seconds(30);
    ko.secret = kv_secret_;
    SHOAL_ASSIGN_OR_RETURN(kv_, launch::KvClient::Connect(kv_endpoint_, ko));
    const int64_t rendezvous_ns = MonotonicNs();
    SHOAL_RETURN_IF_ERROR(Rendezvous());
    observe::RecordSpan(observe::EventKind::kLauncher, rendezvous_ns,
                        "rendezvous", absl::StrCat(o_.nnodes, " nodes"));
  } else {
    world_size_ = nproc_;
    master_port_ = FreePort();
  }
  observe::RecordSpan(observe::EventKind::kLauncher, setup_ns, "setup",
                      absl::StrCat("node ", o_.node_rank));
  return absl::OkStatus();
}

std::vector<RankSpec> Launcher::Specs(int generation) const {
  const char* omp = std::getenv("OMP_NUM_THREADS");
  // `import shoal` works in a launched Python program without an install.
  const char* own_path = std::getenv("PYTHONPATH");
  const std::string python_path =
      PythonPathWithBundledPackage(own_path != nullptr ? own_path : "");
  std::vector<RankSpec> specs;
  for (int i = 0; i < nproc_; ++i) {
    RankSpec s;
    s.local_rank = i;
    s.rank = rank_offset_ + i;
    s.env = {{"RANK", absl::StrCat(s.rank)},
             {"LOCAL_RANK", absl::StrCat(i)},
             {"WORLD_SIZE", absl::StrCat(world_size_)},
             {"LOCAL_WORLD_SIZE", absl::StrCat(nproc_)},
             {"GROUP_RANK", absl::StrCat(o_.node_rank)},
             {"MASTER_ADDR", master_addr_},
             {"MASTER_PORT", absl::StrCat(master_port_)},
             {"SHOAL_NNODES", absl::StrCat(o_.nnodes)},
             {"SHOAL_JOB_ID", o_.job_id},
             {"SHOAL_STORE_ENDPOINT", store_->endpoint()},
             {"SHOAL_KV_ENDPOINT", kv_endpoint_},
             {kKvSecretEnv, kv_secret_},
             {"SHOAL_RESTART_COUNT", absl::StrCat(generation)},
             {"OMP_NUM_THREADS", omp != nullptr ? omp : "1"}};
    if (!gpus_[i].empty() || o_.nproc_per_node == "gpu") {
      s.env["CUDA_VISIBLE_DEVICES"] = gpus_[i];
    }
    // Ordinals in the order of the driver's entries, which gpus_ follows.
    s.env["CUDA_DEVICE_ORDER"] = gpu::ChildCudaDeviceOrder();
    if (!python_path.empty()) s.env["PYTHONPATH"] = python_path;
    specs.push_back(std::move(s));
  }
  return specs;
}

LocalOutcome Launcher::Monitor(int generation) {
  LocalGroupOptions go;
  go.command = o_.command;
  go.tee = o_.tee;
  go.log_dir = o_.log_dir;
  go.grace = o_.stop_grace;
  LocalGroup group(go);
  LocalOutcome outcome;
  // The group's life, start to last exit, as one span on the launcher's track.
  struct GenerationSpan {
    int generation;
    int64_t start_ns = MonotonicNs();
    ~GenerationSpan() {
      observe::RecordSpan(observe::EventKind::kLauncher, start_ns,
                          absl::StrCat("ranks (generation ", generation, ")"));
    }
  } span{generation};
  absl::Status started = group.Start(Specs(generation));
  if (!started.ok()) {
    SHOAL_LOG(ERROR, "shoal launch: %s", started.ToString());
    outcome.failure =
        RankExit{rank_offset_, 0, 127 << 8, {std::string(started.message())}};
  }
  // Another node's failure arrives as the generation's stop key.
  // Its waits are bounded as the keep-alive's (node_keepalive.cc), so that
  // a lost node 0 does not hold this launcher's exit for the KV client's
  // default timeout.
  StopKeyWatcher watcher(o_.nnodes > 1 ? kv_endpoint_ : "",
                         Key(generation, "stop"), kv_secret_,
                         std::max(absl::Seconds(1), o_.keepalive_timeout / 4));
  // Another node lost without a word (its launcher killed, its machine
  // gone): noticed through the launchers' keep-alive counters.
  lost_node_.reset();
  KeepAliveOptions ka;
  ka.kv_endpoint = o_.nnodes > 1 ? kv_endpoint_ : "";
  ka.secret = kv_secret_;
  ka.prefix = Key(generation, "alive/");
  ka.node = o_.node_rank;
  ka.nnodes = o_.nnodes;
  ka.dead_after = o_.keepalive_timeout;
  ka.period = std::clamp(o_.keepalive_timeout / 10, absl::Milliseconds(50),
                         absl::Seconds(1));
  NodeKeepAlive keepalive(ka);
  bool stopping = !started.ok();
  if (stopping) group.StopAll();
  std::vector<zmq_pollitem_t> items;
  while (!group.AllExited()) {
    items.clear();
    items.push_back({nullptr, g_signal_fd, ZMQ_POLLIN, 0});
    items.push_back({nullptr, watcher.fd(), ZMQ_POLLIN, 0});
    items.push_back({nullptr, keepalive.fd(), ZMQ_POLLIN, 0});
    group.AppendPollItems(&items);
    const absl::Time now = absl::Now();
    const absl::Time wake = group.Tick(now);
    zmq_poll(items.data(), static_cast<int>(items.size()),
             ipc::PollTimeoutMs(wake == absl::InfiniteFuture()
                                    ? absl::InfiniteDuration()
                                    : wake - now));
    group.Handle(items, 3);
    if (items[0].revents & ZMQ_POLLIN)
      OnSignal(generation, group, &outcome, &stopping);
    if ((items[2].revents & ZMQ_POLLIN) && !lost_node_)
      OnLostNode(generation, keepalive, group, &stopping);
    if ((items[1].revents & ZMQ_POLLIN) && !stopping) {
      stopping = true;  // another node failed
      group.StopAll();
    }
    if (group.first_failure() && !stopping)
      OnFirstFailure(generation, group, &outcome, &stopping);
  }
  if (!outcome.failure && group.first_failure())
    outcome.failure = group.first_failure();
  outcome.ok = !outcome.failure && !outcome.interrupted && !stopping;
  return outcome;
}

void Launcher::OnSignal(int generation, LocalGroup& group,
                        LocalOutcome* outcome, bool* stopping) {
  uint64_t v;
  ssize_t unused = read(g_signal_fd, &v, sizeof(v));
  (void)unused;
  outcome->interrupted = g_signal.load();
  group.Forward(outcome->interrupted);
  if (*stopping) return;
  *stopping = true;
  group.StopAll();
  if (kv_) {
    (void)kv_->SetIfAbsent(
        Key(generation, "stop"),
        absl::StrCat(128 + outcome->interrupted, "\nthe launcher on node ",
                     o_.node_rank, " got SIG",
                     sigabbrev_np(outcome->interrupted)));
  }
}

void Launcher::OnFirstFailure(int generation, LocalGroup& group,
                              LocalOutcome* outcome, bool* stopping) {
  *stopping = true;
  outcome->failure = group.first_failure();
  observe::RecordInstant("first failure",
                         absl::StrCat("rank ", outcome->failure->rank),
                         /*code=*/2);
  if (kv_) {
    // The first failure anywhere is the root cause: set only if unset.
    (void)kv_->SetIfAbsent(
        Key(generation, "stop"),
        absl::StrCat(ExitCodeOf(outcome->failure->wait_status), "\n",
                     RootCause(*outcome)));
  }
  group.StopAll();
}

void Launcher::OnLostNode(int generation, const NodeKeepAlive& keepalive,
                          LocalGroup& group, bool* stopping) {
  std::optional<NodeKeepAlive::Lost> lost = keepalive.lost();
  if (!lost) return;
  lost_node_ = lost->node;
  lost_cause_ = lost->why;
  std::fprintf(stderr,
               "shoal launch: lost node %d: %s; stopping this node's ranks\n",
               lost->node, lost->why.c_str());
  if (*stopping) return;
  *stopping = true;
  group.StopAll();
  // Node 0's key-value service is gone with node 0: nothing to tell there.
  if (kv_ && lost->node != 0) {
    (void)kv_->SetIfAbsent(
        Key(generation, "stop"),
        absl::StrCat("1\nlost node ", lost->node, ": ", lost->why));
  }
}

std::string Launcher::RootCause(const LocalOutcome& outcome) const {
  if (!outcome.failure) return "";
  const RankExit& f = *outcome.failure;
  std::string out = absl::StrCat("rank ", f.rank, " (local rank ", f.local_rank,
                                 " on node ", o_.node_rank, ", host ", host_,
                                 ") failed: ", DescribeExit(f.wait_status));
  if (f.stderr_tail.empty()) {
    absl::StrAppend(&out, "; it wrote nothing to stderr");
  } else {
    absl::StrAppend(&out, "; the last lines of its stderr:");
    for (const std::string& line : f.stderr_tail)
      absl::StrAppend(&out, "\n  | ", line);
  }
  return out;
}

observe::LaunchFigures Launcher::Figures() const {
  observe::LaunchFigures f;
  f.job_id = o_.job_id;
  f.node_rank = o_.node_rank;
  f.local_ranks = nproc_;
  f.restarts = restarts_.load(std::memory_order_relaxed);
  absl::StatusOr<observe::Timeline> t =
      observe::GatherCollectiveTallies(o_.job_id);
  if (t.ok()) f.tallies = *std::move(t);
  return f;
}

absl::StatusOr<int> Launcher::Run() {
  for (int generation = 0;; ++generation) {
    LocalOutcome outcome = Monitor(generation);
    Decision d = Decide(generation, outcome);
    switch (d.kind) {
      case Decision::kDone:
        return 0;
      case Decision::kRestart:
        restarts_.fetch_add(1, std::memory_order_relaxed);
        observe::RecordInstant(absl::StrCat("restart ", generation + 1),
                               d.cause.substr(0, 15));
        std::fprintf(stderr,
                     "shoal launch: %s\nshoal launch: restarting the group "
                     "(restart %d of %d)\n",
                     d.cause.c_str(), generation + 1, o_.max_restarts);
        continue;
      case Decision::kExit:
        std::fprintf(
            stderr, "shoal launch: %s\nshoal launch: exiting with code %d%s\n",
            d.cause.c_str(), d.code,
            generation > 0
                ? absl::StrCat(" after ", generation, " restarts").c_str()
                : "");
        return d.code;
    }
  }
}

}  // namespace launcher_internal

absl::Status ApplySlurmDefaults(LaunchOptions* o, bool nnodes_given,
                                bool node_rank_given, bool coordinator_given) {
  SHOAL_ASSIGN_OR_RETURN(std::optional<SlurmJob> slurm,
                         SlurmJobFromEnvironment());
  if (!slurm) return absl::OkStatus();
  if (!nnodes_given) o->nnodes = slurm->nnodes;
  if (!node_rank_given) o->node_rank = slurm->node_rank;
  if (!coordinator_given && o->nnodes > 1)
    o->coordinator = absl::StrCat(slurm->head_host, ":29400");
  if (o->job_id.empty()) o->job_id = absl::StrCat("slurm-", slurm->job_id);
  return absl::OkStatus();
}

absl::StatusOr<int> Launch(LaunchOptions options) {
  g_signal_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  struct sigaction sa = {};
  sa.sa_handler = OnSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  const std::string timeline_out = options.timeline_out;
  observe::MetricsServerOptions metrics_options;
  metrics_options.port = options.metrics_port;
  metrics_options.address = options.metrics_address;
  Launcher launcher(std::move(options));
  absl::Status setup = launcher.Setup();
  // Serves while the ranks run; destroyed before `launcher`.
  std::unique_ptr<observe::MetricsServer> metrics;
  if (setup.ok() && metrics_options.port >= 0) {
    absl::StatusOr<std::unique_ptr<observe::MetricsServer>> m =
        observe::MetricsServer::Start(
            metrics_options, observe::FamilySource([&launcher] {
              return observe::LaunchFamiliesOf(launcher.Figures());
            }));
    if (m.ok()) {
      metrics = *std::move(m);
      std::fprintf(stderr, "shoal launch: metrics http://%s/metrics\n",
                   metrics->address().c_str());
    } else {
      setup = m.status();
    }
  }
  absl::StatusOr<int> code =
      setup.ok() ? launcher.Run() : absl::StatusOr<int>(setup);
  metrics.reset();
  // The job's ranks are gone: write its timeline if asked, then remove the
  // rings of this launcher and its ranks.
  const std::string& job = launcher.job_id();
  if (!job.empty()) {
    if (!timeline_out.empty()) {
      if (absl::Status s = observe::WriteJobTimeline(job, timeline_out);
          !s.ok())
        SHOAL_LOG(WARNING, "shoal launch: --timeline: %s", s.ToString());
    }
    observe::RemoveTimelineRings(job, /*only_dead=*/true);
  }
  return code;
}

}  // namespace shoal::launch
