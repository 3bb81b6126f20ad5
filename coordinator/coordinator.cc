#include "coordinator/coordinator.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/descriptor_limit.h"
#include "base/event_fd.h"
#include "base/log.h"
#include "base/monotonic_clock.h"
#include "base/process_info.h"
#include "base/python_env.h"
#include "base/runtime_dir.h"
#include "base/status_macros.h"
#include "base/subprocess.h"
#include "coordinator/coordinator_impl.h"
#include "coordinator/discovery.h"
#include "gpu/device_visibility.h"
#include "ipc/router.h"
#include "ipc/task_payload.h"
#include "shm/segment.h"

namespace shoal::coordinator {

// ---- start-up
// ------------------------------------------------------------------

absl::Status Coordinator::Impl::Init() {
  if (options_.num_workers < 1 || options_.num_workers > 64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "-n must be between 1 and 64, got ", options_.num_workers));
  }
  if (options_.cpus_per_worker < 1 || options_.gpus_per_worker < 0) {
    return absl::InvalidArgumentError(
        "--cpus-per-worker must be ≥ 1 and --gpus-per-worker ≥ 0");
  }
  if (options_.job_id.empty()) options_.job_id = NewJobId();
  // Before any socket of this process exists. A process that made sockets
  // before it (a test hosting a node) keeps its context as it is.
  if (absl::Status s = ipc::SetProcessIoThreads(options_.io_threads);
      absl::IsInvalidArgument(s)) {
    return s;
  } else if (!s.ok()) {
    SHOAL_LOG(DEBUG, "%s", s.ToString());
  }
  // Clients' connections cost descriptors: use all the hard limit allows.
  if (absl::StatusOr<uint64_t> limit = RaiseDescriptorLimit(); !limit.ok())
    SHOAL_LOG(WARNING, "%s", limit.status().ToString());
  for (const std::string& job : RemoveStaleJobDirs()) {
    SHOAL_LOG(INFO, "removed the runtime folder of dead job %s", job);
  }
  SHOAL_ASSIGN_OR_RETURN(job_dir_, JobDir(options_.job_id));
  // Forked before the store, the table, the sockets and the workers exist,
  // so it holds none of them.
  SHOAL_ASSIGN_OR_RETURN(std::string store_segment,
                         shm::SegmentNameForJob(options_.job_id));
  SHOAL_ASSIGN_OR_RETURN(
      janitor_,
      Janitor::Start(options_.job_id,
                     {store_segment,
                      tasks::TaskTable::SegmentNameForJob(options_.job_id)}));
  // GPUs first: asking for more than exist is an error before anything runs.
  SHOAL_ASSIGN_OR_RETURN(std::vector<std::string> gpus,
                         gpu::DiscoverGpusFromEnvironment(options_.gpus));
  SHOAL_ASSIGN_OR_RETURN(
      std::vector<std::vector<int>> assignment,
      gpu::AssignGpus(options_.num_workers, options_.gpus_per_worker,
                      static_cast<int>(gpus.size())));
  for (const std::vector<int>& logical : assignment) {
    SHOAL_ASSIGN_OR_RETURN(std::string visible,
                           gpu::ChildVisibleDevices(gpus, logical));
    worker_gpus_.push_back(std::move(visible));
  }
  node_gpus_ = gpus;
  SHOAL_ASSIGN_OR_RETURN(stop_, EventFd::Create());
  SHOAL_ASSIGN_OR_RETURN(completion_, EventFd::Create());
  SHOAL_RETURN_IF_ERROR(StartStore());
  SHOAL_RETURN_IF_ERROR(StartTaskTable());
  SHOAL_RETURN_IF_ERROR(StartSockets());
  SHOAL_RETURN_IF_ERROR(StartWorkers());
  Discovery d;
  d.job_id = options_.job_id;
  d.frontend = frontend_->ipc_endpoint();
  d.tcp = frontend_->tcp_endpoint();
  d.store = store_endpoint_;
  d.tasks = table_->segment_name();
  d.pid = getpid();
  d.server_key = frontend_->server_public_key();
  d.client_key_file = frontend_->owner_key_file();
  return WriteDiscovery(d);
}

absl::Status Coordinator::Impl::StartStore() {
  shm::StoreOptions so;
  so.job_id = options_.job_id;
  so.store_bytes = options_.store_bytes;
  so.spill_dir = options_.spill_dir;
  so.spill_bytes = options_.spill_bytes;
  SHOAL_ASSIGN_OR_RETURN(store_, shm::StoreService::Create(so));
  // The name taken: a fallback when another user held the usual one.
  SHOAL_RETURN_IF_ERROR(janitor_->Watch(store_->segment_name()));
  store_endpoint_ = store_->endpoint();
  shm::StoreService* store = store_.get();
  store_thread_ = std::thread([store] {
    absl::Status s = store->Run();
    if (!s.ok()) SHOAL_LOG(ERROR, "store service stopped: %s", s.ToString());
  });
  shm::StoreClientOptions co;
  co.endpoint = store_endpoint_;
  co.name = "coordinator";
  SHOAL_ASSIGN_OR_RETURN(store_client_, shm::StoreClient::Connect(co));
  return absl::OkStatus();
}

absl::Status Coordinator::Impl::StartTaskTable() {
  SHOAL_ASSIGN_OR_RETURN(
      table_,
      tasks::TaskTable::Create(options_.job_id, tasks::TaskTableOptions()));
  SHOAL_RETURN_IF_ERROR(janitor_->Watch(table_->segment_name()));
  SHOAL_ASSIGN_OR_RETURN(
      own_client_,
      table_->AddClient(getpid(),
                        static_cast<int32_t>(store_client_->client_slot())));
  // Our own task client's completions wake the event loop through an eventfd
  // (the loop waits in zmq_poll, which cannot wait on a futex). With few
  // tasks watched the worker that completes one writes it (inherited: not
  // close-on-exec; SHOAL_COMPLETION_FD), with no thread in between. With
  // many, the watcher thread below turns the bell into the eventfd and lets
  // completions gather between signals.
  if (fcntl(completion_.fd(), F_SETFD, 0) != 0)
    return SHOAL_ERRNO("fcntl(completion eventfd)");
  watcher_ = std::thread([this] { RunWatcher(); });
  return absl::OkStatus();
}

void Coordinator::Impl::RunWatcher() {
  uint32_t seen = table_->ClientRings(own_client_);
  while (!watcher_stop_.load()) {
    if (gather_mode_.load() == 0) {
      // The loop arms the eventfd itself (workers write it): park until
      // it hands over (or stops, which sets gather_mode_ too).
      gather_mode_.wait(0);
      continue;
    }
    const uint32_t armed = table_->ArmClient(own_client_);
    if (armed == seen)
      table_->SleepClient(own_client_, armed, absl::Milliseconds(200));
    table_->DisarmClient(own_client_);
    const uint32_t rings = table_->ClientRings(own_client_);
    if (rings != seen) {
      seen = rings;
      completion_.Signal();
      // Under load (many remote tasks watched), completions gather for a
      // moment before the next signal: one wake-up of the loop, and one
      // pushed WaitReply per request, then carry many results.
      if (gather_mode_.load() == 1) absl::SleepFor(kGatherFor);
    }
  }
}

absl::Status Coordinator::Impl::StartSockets() {
  frontend_ =
      std::make_unique<Frontend>(options_, job_dir_, table_.get(), own_client_,
                                 store_client_.get(), store_endpoint_, this);
  SHOAL_RETURN_IF_ERROR(frontend_->Start());
  SHOAL_ASSIGN_OR_RETURN(backend_, ipc::Socket::Create(ZMQ_ROUTER));
  backend_endpoint_ = absl::StrCat("ipc://", job_dir_, "/backend.sock");
  unlink(absl::StrCat(job_dir_, "/backend.sock").c_str());
  SHOAL_RETURN_IF_ERROR(backend_.Bind(backend_endpoint_));
  return absl::OkStatus();
}

absl::Status Coordinator::Impl::StartWorkers() {
  SupervisorOptions so;
  so.command = options_.worker_command.empty()
                   ? std::vector<std::string>{SelfExePath(), "worker"}
                   : options_.worker_command;
  so.log_dir = options_.log_dir.empty() ? absl::StrCat(job_dir_, "/logs")
                                        : options_.log_dir;
  if (mkdir(so.log_dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return SHOAL_ERRNO(absl::StrCat("mkdir ", so.log_dir));
  }
  so.heartbeat_timeout = options_.heartbeat_timeout;
  so.env = {{"SHOAL_JOB_ID", options_.job_id},
            {"SHOAL_TASK_SEGMENT", table_->segment_name()},
            {"SHOAL_STORE_ENDPOINT", store_endpoint_},
            {"SHOAL_BACKEND_ENDPOINT", backend_endpoint_},
            {"SHOAL_COORDINATOR", frontend_->ipc_endpoint()},
            {"SHOAL_PLUGINS", absl::StrJoin(options_.plugins, ":")},
            {"SHOAL_COMPLETION_FD", absl::StrCat(completion_.fd())},
            {"SHOAL_COMPLETION_CLIENT", absl::StrCat(own_client_)},
            {"WORLD_SIZE", absl::StrCat(options_.num_workers)},
            {"LOCAL_WORLD_SIZE", absl::StrCat(options_.num_workers)}};
  // Python tasks search --pythonpath first, then the coordinator's own
  // PYTHONPATH, then the shoal package built beside this binary (so a task
  // module can `import shoal` for shoal.task).
  std::string python_path = absl::StrJoin(options_.python_path, ":");
  if (const char* own = std::getenv("PYTHONPATH"); own != nullptr && *own) {
    absl::StrAppend(&python_path, python_path.empty() ? "" : ":", own);
  }
  python_path = PythonPathWithBundledPackage(python_path);
  if (!python_path.empty()) so.env["PYTHONPATH"] = python_path;
  // Workers number GPUs in the order of the driver's entries, as the
  // CUDA_VISIBLE_DEVICES values handed to them do.
  so.env["CUDA_DEVICE_ORDER"] = gpu::ChildCudaDeviceOrder();
  std::vector<WorkerSpec> specs;
  for (int i = 0; i < options_.num_workers; ++i) {
    specs.push_back({static_cast<uint32_t>(i),
                     static_cast<uint32_t>(options_.cpus_per_worker),
                     static_cast<uint32_t>(options_.gpus_per_worker),
                     worker_gpus_[i]});
  }
  worker_slot_.assign(options_.num_workers, -1);
  Supervisor::Hooks hooks;
  hooks.before_start =
      [this](uint32_t w) -> absl::StatusOr<std::map<std::string, std::string>> {
    if (actors_->IsActorWorker(w)) {
      SHOAL_ASSIGN_OR_RETURN(ActorDirectory::Start start,
                             actors_->BeforeStart(w));
      worker_slot_[w] = static_cast<int32_t>(start.slot);
      return std::move(start.env);
    }
    SHOAL_ASSIGN_OR_RETURN(
        const uint32_t slot,
        table_->AddWorker(0, static_cast<uint32_t>(options_.cpus_per_worker),
                          static_cast<uint32_t>(options_.gpus_per_worker)));
    worker_slot_[w] = static_cast<int32_t>(slot);
    return std::map<std::string, std::string>{
        {"SHOAL_WORKER_SLOT", absl::StrCat(slot)},
        {"RANK", absl::StrCat(w)},
        {"LOCAL_RANK", absl::StrCat(w)}};
  };
  hooks.on_exit = [this](uint32_t w, const std::string& how) {
    OnWorkerExit(w, how);
  };
  supervisor_ = std::make_unique<Supervisor>(std::move(so), std::move(specs),
                                             std::move(hooks));
  ActorDirectory::Options ao;
  ao.host = this;
  ao.table = table_.get();
  ao.own_client = own_client_;
  ao.store = store_client_.get();
  ao.supervisor = supervisor_.get();
  ao.node_gpus = node_gpus_;
  ao.max_actors_per_client = options_.max_actors_per_client;
  actors_ = std::make_unique<ActorDirectory>(std::move(ao));
  return supervisor_->StartAll();
}

// ---- event loop
// ----------------------------------------------------------------

void Coordinator::Impl::Stop() { stop_.Signal(); }

void Coordinator::Impl::DrainBackend() {
  MarkTouched(kBackendItem);
  std::vector<std::string> frames;
  for (int i = 0; i < 256; ++i) {
    absl::StatusOr<bool> ready = backend_.Poll(absl::ZeroDuration());
    if (!ready.ok() || !*ready || !backend_.Recv(&frames).ok()) return;
    if (frames.size() != 2) continue;
    ipc::DecodeResult decoded = ipc::Decode(frames[1]);
    if (!decoded.envelope.ok()) continue;
    if (const auto* h =
            std::get_if<ipc::WorkerHello>(&decoded.envelope->body)) {
      supervisor_->OnHeartbeat(h->worker_id, h->pid);
      functions_.insert(h->functions.begin(), h->functions.end());
    } else if (const auto* b =
                   std::get_if<ipc::WorkerHeartbeat>(&decoded.envelope->body)) {
      const int32_t pid = supervisor_->Pid(b->worker_id);
      supervisor_->OnHeartbeat(b->worker_id, pid);
      task_stats_.Report(b->worker_id, pid, b->tasks);
      OnWorkerBlocked(b->worker_id, b->blocked);
    }
  }
}

uint32_t Coordinator::Impl::ReserveWorker() {
  worker_slot_.push_back(-1);
  return static_cast<uint32_t>(worker_slot_.size() - 1);
}

void Coordinator::Impl::CountSessionActor(uint64_t session, int delta) {
  if (delta > 0) {
    frontend_->ActorStarted(session);
  } else {
    frontend_->ActorEnded(session);
  }
}

absl::StatusOr<ipc::ActorCreateReply> Coordinator::Impl::CreateActor(
    const ActorCreator& creator, const ipc::ActorCreateRequest& m) {
  // The process it ends with, when the request names a local client's.
  pid_t owner = 0;
  for (const auto& [slot, c] : local_clients_) {
    if (c.pid == m.pid() && m.pid() > 0) owner = c.pid;
  }
  return actors_->Create(creator, m, owner);
}

absl::Status Coordinator::Impl::KillActor(const ActorCreator& caller,
                                          uint32_t actor) {
  return actors_->Kill(caller, actor);
}

absl::Status Coordinator::Impl::MayCallActor(const std::string& principal,
                                             uint32_t actor) const {
  return actors_->MayCall(principal, actor);
}

void Coordinator::Impl::EndActorsOfSession(uint64_t session) {
  actors_->EndOfSession(session);
}

void Coordinator::Impl::OnLocalClientExit(uint32_t client) {
  auto it = local_clients_.find(client);
  if (it == local_clients_.end()) return;
  close(it->second.pidfd);
  SHOAL_LOG(DEBUG, "local client pid %d exited; freeing its tasks",
            it->second.pid);
  const pid_t pid = it->second.pid;
  local_clients_.erase(it);
  actors_->EndOwnedBy(pid);
  absl::StatusOr<std::vector<std::string>> freed = table_->RemoveClient(client);
  if (!freed.ok()) {
    SHOAL_LOG(ERROR, "freeing a dead client's tasks: %s",
              freed.status().ToString());
    return;
  }
  // Its results' output objects die with them (the store already dropped the
  // client's references when the process died).
  for (const std::string& payload : *freed) {
    absl::StatusOr<ipc::TaskOutcomeBody> body = ipc::DecodeTaskOutcome(payload);
    if (!body.ok()) continue;
    for (const Value& v : body->outputs) {
      if (const auto* o = std::get_if<ObjectValue>(&v))
        (void)store_client_->Delete(o->id);
    }
  }
}

void Coordinator::Impl::OnWorkerExit(uint32_t w, const std::string& how) {
  const int32_t slot = worker_slot_[w];
  worker_slot_[w] = -1;
  // Its timed-out task (if any) is no longer waited on.
  bool timed_out = false;
  for (auto it = expiring_.begin(); slot >= 0 && it != expiring_.end();) {
    const bool mine = it->second.worker == static_cast<uint32_t>(slot);
    timed_out |= mine;
    it = mine ? expiring_.erase(it) : std::next(it);
  }
  if (actors_->IsActorWorker(w)) {
    actors_->OnWorkerExit(w, slot, how);
    return;
  }
  if (slot < 0) return;
  // A task cancelled before its worker died (a forced cancellation kills the
  // worker of a task that goes on, python_interrupt.h) is not retried: it
  // completes as Cancelled.
  const std::optional<uint64_t> running =
      table_->RunningOn(static_cast<uint32_t>(slot));
  const bool cancelled =
      !timed_out && running.has_value() && table_->CancelRequested(*running);
  const std::string message =
      timed_out ? absl::StrCat("worker ", w,
                               " ignored the task's timeout and was killed")
      : cancelled
          ? absl::StrCat("task cancelled: its worker ", w, " was stopped (",
                         how, ") after the task went on running")
          : absl::StrCat("worker ", w, " died (", how,
                         ") while running this task");
  const absl::StatusCode code = timed_out ? absl::StatusCode::kDeadlineExceeded
                                : cancelled ? absl::StatusCode::kCancelled
                                            : absl::StatusCode::kAborted;
  // Not gated on the lock-free RunningOn: a worker SIGKILLed inside Complete
  // has cleared its slot while its journal still holds the undo; the lock
  // FailRunning takes rolls that back first (RemoveWorker would otherwise,
  // and leave the task running forever). NotFound: it ran nothing.
  absl::StatusOr<bool> requeued = table_->FailRunning(
      static_cast<uint32_t>(slot), static_cast<int32_t>(code),
      ipc::EncodeTaskOutcome(
          cancelled ? message : absl::StrCat(message, "; retries exhausted"),
          {}));
  if (requeued.ok()) {
    SHOAL_LOG(INFO, "%s; %s", message,
              *requeued ? "requeued" : "failed after its last retry");
  }
  (void)table_->RemoveWorker(static_cast<uint32_t>(slot));
}

void Coordinator::Impl::CheckTimeouts(absl::Time now) {
  for (const tasks::ExpiredTask& e : table_->Expired(MonotonicNs())) {
    if (table_->Expire(e.id).ok()) {
      expiring_[e.id] = Expiring{e.worker, now + options_.cancel_grace};
    }
  }
  for (auto it = expiring_.begin(); it != expiring_.end();) {
    absl::StatusOr<tasks::TaskState> state = table_->Poll(it->first);
    if (!state.ok() || *state != tasks::TaskState::kRunning) {
      it = expiring_.erase(it);  // the worker honoured the cancellation
      continue;
    }
    if (now >= it->second.kill_at) {
      // The worker ignores cancellation: kill it; its exit completes the task.
      for (size_t w = 0; w < worker_slot_.size(); ++w) {
        if (worker_slot_[w] == static_cast<int32_t>(it->second.worker)) {
          SHOAL_LOG(WARNING, "worker %d ignored task %d's timeout: killing it",
                    w, it->first);
          supervisor_->Signal(static_cast<uint32_t>(w), SIGKILL);
        }
      }
      it->second.kill_at = now + absl::Seconds(5);
    }
    ++it;
  }
}

Coordinator::Impl::~Impl() {
  if (supervisor_) supervisor_->StopAll(absl::Seconds(2));
  if (table_) table_->Close();
  watcher_stop_.store(true);  // Close() rang every client bell, waking it
  gather_mode_.store(2);      // and this wakes it where it parks
  gather_mode_.notify_one();
  if (watcher_.joinable()) watcher_.join();
  for (auto& [slot, c] : local_clients_) close(c.pidfd);
  if (frontend_) frontend_->Close();
  frontend_.reset();
  store_client_.reset();
  if (store_) store_->Stop();
  if (store_thread_.joinable()) store_thread_.join();
  store_.reset();
  table_.reset();
  backend_.Close();
  if (!backend_endpoint_.empty())
    unlink(absl::StrCat(job_dir_, "/backend.sock").c_str());
  RemoveDiscovery(options_.job_id);
}

// ---- the frontend's host
// -----------------------------------------------------------------

bool Coordinator::Impl::AdmitLocalClient(pid_t pid,
                                         ipc::ClientWelcome* welcome) {
  absl::StatusOr<int> pidfd = OpenPidFd(pid);
  if (!pidfd.ok()) return false;
  absl::StatusOr<uint32_t> slot = table_->AddClient(pid);
  if (!slot.ok()) {
    close(*pidfd);
    SHOAL_LOG(WARNING, "local client pid %d served remotely: %s", pid,
              slot.status().ToString());
    return false;
  }
  local_clients_[*slot] = LocalClient{pid, *pidfd};
  welcome->local = true;
  welcome->task_segment = table_->segment_name();
  welcome->task_client = *slot;
  return true;
}

ipc::NodeStatus Coordinator::Impl::Status(bool tasks_by_name,
                                          bool fresh_store) {
  ipc::NodeStatus st;
  st.set_job_id(options_.job_id);
  st.set_coordinator_pid(getpid());
  st.set_uptime_ms(absl::ToInt64Milliseconds(absl::Now() - started_));
  st.set_frontend(frontend_->ipc_endpoint());
  *st.mutable_frontend_stats() = frontend_->Stats();
  for (ipc::WorkerStatus& w : supervisor_->Status()) {
    if (ListedInStatus(w)) *st.add_workers() = std::move(w);
  }
  for (ipc::WorkerStatus& w : *st.mutable_workers()) {
    const int32_t slot =
        w.id() < worker_slot_.size() ? worker_slot_[w.id()] : -1;
    if (slot >= 0) {
      absl::StatusOr<tasks::TaskWorkerCounters> c =
          table_->WorkerCounters(static_cast<uint32_t>(slot));
      if (c.ok()) {
        w.set_tasks_done(c->done);
        w.set_tasks_failed(c->failed);
        if (w.state() == "running") w.set_state(c->busy ? "busy" : "idle");
      }
    }
  }
  if (absl::StatusOr<tasks::TaskTableStats> ts = table_->Stats(); ts.ok()) {
    st.set_queued(ts->queued);
    st.set_running(ts->running);
    st.set_submitted(ts->submitted);
    st.set_completed(ts->completed);
    st.set_results_held(ts->done_untaken);
  }
  // Read in place: a round trip to the store's thread would wait behind
  // every request the store has queued, and hold this thread meanwhile.
  // Scanned at most once per status_store_refresh for other clients.
  const absl::Time now = absl::Now();
  if (fresh_store || !store_stats_ ||
      now - store_stats_at_ >= options_.status_store_refresh) {
    if (absl::StatusOr<shm::StoreStats> ss = store_->Stats(); ss.ok()) {
      store_stats_ = *std::move(ss);
      store_stats_at_ = now;
    }
  }
  if (store_stats_) *st.mutable_store() = *store_stats_;
  if (tasks_by_name) {
    for (wire::TaskNameStats& t : task_stats_.Sum())
      *st.add_tasks_by_name() = std::move(t);
  }
  return st;
}

// ---- Coordinator
// -----------------------------------------------------------------

Coordinator::Coordinator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Coordinator::~Coordinator() = default;

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Create(
    CoordinatorOptions options) {
  auto impl = std::make_unique<Impl>(std::move(options));
  SHOAL_RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<Coordinator>(new Coordinator(std::move(impl)));
}

absl::Status Coordinator::Run() { return impl_->Run(); }
void Coordinator::Stop() { impl_->Stop(); }
const std::string& Coordinator::job_id() const { return impl_->job_id(); }
const std::string& Coordinator::frontend_endpoint() const {
  return impl_->frontend_endpoint();
}
const std::string& Coordinator::tcp_endpoint() const {
  return impl_->tcp_endpoint();
}
const std::string& Coordinator::store_endpoint() const {
  return impl_->store_endpoint();
}

}  // namespace shoal::coordinator
