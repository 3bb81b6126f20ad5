#include "worker/worker_main.h"

#include <fcntl.h>
#include <unistd.h>
#include <zmq.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/log.h"
#include "base/monotonic_clock.h"
#include "base/mutex.h"
#include "ipc/protocol.h"
#include "ipc/socket.h"
#include "ipc/task_name.h"
#include "observe/task_stats.h"
#include "observe/timeline.h"
#include "shm/store_client.h"
#include "tasks/task_table.h"
#include "worker/executor.h"
#include "worker/python_runner.h"
#include "worker/registry.h"

namespace shoal::worker {
namespace {

absl::StatusOr<std::string> Env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') {
    return absl::InvalidArgumentError(absl::StrCat(
        name,
        " is not set (a worker is started by the coordinator, `shoal start`)"));
  }
  return std::string(v);
}

absl::StatusOr<uint32_t> EnvInt(const char* name) {
  auto v = Env(name);
  if (!v.ok()) return v.status();
  uint32_t n;
  if (!absl::SimpleAtoi(*v, &n)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, "='", *v, "' is not a number"));
  }
  return n;
}

// The coordinator's completion eventfd, inherited (SHOAL_COMPLETION_FD) with
// the task-table client it wakes (SHOAL_COMPLETION_CLIENT): completing one of
// that client's tasks writes it when the coordinator sleeps on it, so the
// frontend wakes with no thread in between. Taken only if it is an eventfd;
// made close-on-exec so that the tasks' own children do not inherit it.
void UseCompletionFd(tasks::TaskTable* table) {
  const char* fd_text = std::getenv("SHOAL_COMPLETION_FD");
  const char* client_text = std::getenv("SHOAL_COMPLETION_CLIENT");
  int fd;
  uint32_t client;
  if (fd_text == nullptr || client_text == nullptr ||
      !absl::SimpleAtoi(fd_text, &fd) ||
      !absl::SimpleAtoi(client_text, &client) || fd < 3 ||
      client >= tasks::kMaxTaskClients) {
    return;
  }
  char target[64] = {};
  const std::string link = absl::StrCat("/proc/self/fd/", fd);
  const ssize_t n = readlink(link.c_str(), target, sizeof(target) - 1);
  if (n <= 0 || absl::string_view(target, n) != "anon_inode:[eventfd]") {
    SHOAL_LOG(WARNING, "SHOAL_COMPLETION_FD=%d is not an eventfd: ignored", fd);
    return;
  }
  fcntl(fd, F_SETFD, FD_CLOEXEC);
  table->SetClientWakeFd(client, fd);
}

class Heartbeat;
// This process's runs by task function, sent with each heartbeat.
observe::TaskStats g_task_stats;
// ReportBlockedWait's: the waits now open, and the heartbeat to nudge.
std::atomic<int> g_blocked_waits{0};
std::atomic<Heartbeat*> g_heartbeat{nullptr};

// Says hello to the coordinator's backend and heartbeats until stopped. The
// coordinator restarts a worker whose heartbeats stop (a hung process). A
// heartbeat also says whether the worker waits for tasks (blocked), sent at
// once when that changes.
class Heartbeat {
 public:
  Heartbeat(const WorkerOptions& o, std::atomic<uint64_t>* done)
      : o_(o), done_(done) {
    thread_ = std::thread([this] { Run(); });
    g_heartbeat.store(this);
  }
  void Nudge() ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    nudged_ = true;
    cv_.SignalAll();
  }
  ~Heartbeat() {
    g_heartbeat.store(nullptr);
    {
      MutexLock lock(&mu_);
      stop_ = true;
      cv_.SignalAll();
    }
    thread_.join();
  }

 private:
  void Run() ABSL_LOCKS_EXCLUDED(mu_) {
    auto socket = ipc::Socket::Create(ZMQ_DEALER);
    if (!socket.ok() || !socket->Connect(o_.backend).ok()) {
      SHOAL_LOG(ERROR, "worker %d: cannot reach the coordinator at %s",
                o_.worker_id, o_.backend);
      return;
    }
    auto send = [&](ipc::Message m) {
      auto frame = ipc::Encode(0, std::move(m));
      if (frame.ok()) (void)socket->Send(*frame, /*dontwait=*/true);
    };
    send(ipc::WorkerHello{o_.worker_id, static_cast<int32_t>(getpid()),
                          RegisteredTasks()});
    MutexLock lock(&mu_);
    bool sent_blocked = false;
    uint64_t sent_runs = 0;  // g_task_stats.runs() when last sent
    while (!stop_) {
      cv_.WaitWithDeadline(&mu_, absl::Now() + o_.heartbeat_interval);
      if (stop_) break;
      if (nudged_) {
        // A wait that ends within 20 ms is not worth a temporary worker:
        // look again then.
        nudged_ = false;
        cv_.WaitWithDeadline(&mu_, absl::Now() + absl::Milliseconds(20));
        if (stop_) break;
        const bool blocked = g_blocked_waits.load() > 0;
        if (blocked == sent_blocked) continue;
      }
      sent_blocked = g_blocked_waits.load() > 0;
      // The runs by name only when there are new ones (else none: the
      // coordinator keeps the last totals it had).
      const uint64_t runs = g_task_stats.runs();
      std::vector<wire::TaskNameStats> tasks;
      if (runs != sent_runs) {
        tasks = g_task_stats.Snapshot();
        sent_runs = runs;
      }
      send(ipc::WorkerHeartbeat{o_.worker_id,
                                done_->load(std::memory_order_relaxed),
                                sent_blocked, std::move(tasks)});
    }
  }

  const WorkerOptions& o_;
  std::atomic<uint64_t>* done_;
  Mutex mu_;
  CondVar cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool nudged_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// What HelpWhileWaiting needs of RunWorker: set while it runs. The depth is
// touched only on the worker's main thread (`thread`).
struct InlineRunner {
  tasks::TaskTable* table;
  Executor* executor;
  uint32_t slot;
  std::atomic<uint64_t>* done;
  std::thread::id thread;
  int max_depth;
  int depth = 0;
};
std::atomic<InlineRunner*> g_inline{nullptr};

// Default of WorkerOptions::max_inline_depth: each level holds the frames of
// a task and its wait on the main thread's stack (8 MiB by default).
constexpr int kDefaultMaxInlineDepth = 100;

// Counts task `c`, claimed → done now, by its name, and puts it on the
// timeline: an actor's call ("<method>@actor=<id>") as kActorCall named by
// its method.
void RecordTask(const tasks::TaskClaim& c, int32_t code) {
  const int64_t end_ns = MonotonicNs();
  g_task_stats.Record(
      {c.function, c.attempt, c.queued_ns, c.claimed_ns, end_ns, code == 0});
  if (!observe::TimelineOn()) return;
  observe::TimelineEventHead e;
  e.start_ns = c.claimed_ns;
  e.end_ns = end_ns;
  e.aux_ns = c.queued_ns;
  e.id = c.id;
  e.code = static_cast<int16_t>(code);
  absl::string_view name = c.function;
  absl::string_view actor;
  const size_t at = name.rfind(ipc::kActorMarker);
  e.kind = static_cast<uint16_t>(at == absl::string_view::npos
                                     ? observe::EventKind::kTask
                                     : observe::EventKind::kActorCall);
  if (at != absl::string_view::npos) {
    actor = name.substr(at + 1);
    name = name.substr(0, at);
  }
  // The end of a long name says more ("py:pkg.module:fn").
  if (name.size() >= observe::kTimelineNameBytes)
    name = name.substr(name.size() - (observe::kTimelineNameBytes - 1));
  observe::Record(e, name, actor);
}

// Runs claimed task `c` in slot `slot` and completes it; counts it in
// `done`. Errors: Complete's, except FailedPrecondition and NotFound (the
// task was taken back meanwhile: cancelled, timed out, or its client gone).
absl::Status RunClaimed(tasks::TaskTable* table, Executor* executor,
                        uint32_t slot, const tasks::TaskClaim& c,
                        std::atomic<uint64_t>* done) {
  TaskOutcome outcome = executor->Execute(c);
  absl::Status s = table->Complete(slot, c.id, outcome.code, outcome.payload);
  RecordTask(c, outcome.code);
  if (!s.ok() && !absl::IsFailedPrecondition(s) && !absl::IsNotFound(s))
    return s;
  done->fetch_add(1, std::memory_order_relaxed);
  return absl::OkStatus();
}

// This worker's timeline ring, labelled as `shoal status` names it. A
// worker without one still runs its tasks.
void StartWorkerTimeline(const WorkerOptions& o) {
  const char* job = std::getenv("SHOAL_JOB_ID");
  if (job == nullptr || *job == '\0') return;
  const char* actor = std::getenv("SHOAL_ACTOR_ID");
  const std::string label =
      o.actor && actor != nullptr
          ? absl::StrCat("actor ", actor, " (worker ", o.worker_id, ")")
          : absl::StrCat("worker ", o.worker_id);
  if (absl::Status s = observe::StartTimeline(job, label); !s.ok())
    SHOAL_LOG(WARNING, "worker %d: no timeline: %s", o.worker_id, s.ToString());
}

}  // namespace

int HelpWhileWaiting() {
  InlineRunner* r = g_inline.load();
  // Only the thread that runs the worker's tasks: the slot's stack of tasks
  // then nests exactly as this thread's calls do.
  if (r == nullptr || std::this_thread::get_id() != r->thread) return -1;
  if (r->depth >= r->max_depth) return -1;
  absl::StatusOr<std::optional<tasks::TaskClaim>> claim =
      r->table->ClaimNested(r->slot);
  if (!claim.ok()) {
    // An actor's worker (FailedPrecondition), or shutting down.
    if (!absl::IsFailedPrecondition(claim.status()) &&
        !absl::IsUnavailable(claim.status())) {
      SHOAL_LOG(WARNING, "worker slot %d: claiming a task inline: %s", r->slot,
                claim.status().ToString());
    }
    return -1;
  }
  if (!claim->has_value()) return 0;
  const tasks::TaskClaim& c = **claim;
  ++r->depth;
  absl::Status s = RunClaimed(r->table, r->executor, r->slot, c, r->done);
  --r->depth;
  if (!s.ok()) {
    SHOAL_LOG(WARNING, "worker slot %d: completing task %d run inline: %s",
              r->slot, c.id, s.ToString());
  }
  return 1;
}

void ReportBlockedWait(bool begins) {
  const int before = g_blocked_waits.fetch_add(begins ? 1 : -1);
  if (before != (begins ? 0 : 1)) return;  // still blocked, or already was
  if (Heartbeat* h = g_heartbeat.load(); h != nullptr) h->Nudge();
}

absl::StatusOr<WorkerOptions> WorkerOptionsFromEnv() {
  WorkerOptions o;
  SHOAL_ASSIGN_OR_RETURN(o.worker_id, EnvInt("SHOAL_WORKER_ID"));
  SHOAL_ASSIGN_OR_RETURN(o.task_slot, EnvInt("SHOAL_WORKER_SLOT"));
  SHOAL_ASSIGN_OR_RETURN(o.task_segment, Env("SHOAL_TASK_SEGMENT"));
  SHOAL_ASSIGN_OR_RETURN(o.store_endpoint, Env("SHOAL_STORE_ENDPOINT"));
  SHOAL_ASSIGN_OR_RETURN(o.backend, Env("SHOAL_BACKEND_ENDPOINT"));
  if (const char* p = std::getenv("SHOAL_PLUGINS"); p != nullptr && *p) {
    o.plugins = absl::StrSplit(p, ':', absl::SkipEmpty());
  }
  if (const char* s = std::getenv("SHOAL_WORKER_IDLE_EXIT_MS"); s != nullptr) {
    int64_t ms;
    if (absl::SimpleAtoi(s, &ms) && ms > 0)
      o.idle_exit = absl::Milliseconds(ms);
  }
  if (const char* s = std::getenv("SHOAL_WORKER_MAX_INLINE_DEPTH");
      s != nullptr) {
    int depth;
    if (absl::SimpleAtoi(s, &depth) && depth >= 0) o.max_inline_depth = depth;
  }
  if (const char* a = std::getenv("SHOAL_ACTOR_ID"); a != nullptr && *a)
    o.actor = true;
  if (const char* s = std::getenv("SHOAL_WORKER_SPIN_US"); s != nullptr) {
    int64_t us;
    if (absl::SimpleAtoi(s, &us) && us >= 0) o.spin = absl::Microseconds(us);
  }
  return o;
}

absl::Status RunWorker(const WorkerOptions& o) {
  RegisterBuiltins();
  StartWorkerTimeline(o);
  for (const std::string& plugin : o.plugins)
    SHOAL_RETURN_IF_ERROR(LoadPlugin(plugin));
  shm::StoreClientOptions so;
  so.endpoint = o.store_endpoint;
  so.name = absl::StrCat("worker ", o.worker_id);
  SHOAL_ASSIGN_OR_RETURN(std::unique_ptr<shm::StoreClient> store,
                         shm::StoreClient::Connect(so));
  SHOAL_ASSIGN_OR_RETURN(
      std::unique_ptr<tasks::TaskTable> table,
      tasks::TaskTable::Open(o.task_segment, absl::Seconds(10)));
  UseCompletionFd(table.get());
  std::vector<std::unique_ptr<TaskRunner>> runners;
  runners.push_back(MakeCppRunner());
  PythonRunnerOptions python;
  python.isolate_tasks = !o.actor;
  runners.push_back(MakePythonRunner(python));
  Executor executor(o.worker_id, store.get(), table.get(), std::move(runners));
  std::atomic<uint64_t> done{0};
  Heartbeat heartbeat(o, &done);
  InlineRunner inline_runner{
      table.get(),
      &executor,
      o.task_slot,
      &done,
      std::this_thread::get_id(),
      o.max_inline_depth < 0 ? kDefaultMaxInlineDepth : o.max_inline_depth};
  g_inline.store(&inline_runner);
  struct Unset {
    ~Unset() { g_inline.store(nullptr); }
  } unset;
  absl::Time idle_since = absl::Now();
  while (true) {
    absl::StatusOr<std::optional<tasks::TaskClaim>> claim =
        table->Claim(o.task_slot);
    if (!claim.ok()) {
      if (absl::IsUnavailable(claim.status()))
        return absl::OkStatus();  // shutting down
      return claim.status();
    }
    if (!claim->has_value()) {
      if (absl::Now() - idle_since >= o.idle_exit) {
        SHOAL_LOG(INFO, "worker %d: idle for %s, exiting (temporary worker)",
                  o.worker_id, absl::FormatDuration(o.idle_exit));
        return absl::OkStatus();
      }
      table->WaitForWork(o.task_slot, o.spin, absl::Seconds(1));
      continue;
    }
    SHOAL_RETURN_IF_ERROR(
        RunClaimed(table.get(), &executor, o.task_slot, **claim, &done));
    idle_since = absl::Now();
  }
}

}  // namespace shoal::worker
