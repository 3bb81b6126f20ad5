// Nested tasks: a task that waits for tasks (get/result/wait inside a task)
// gives up its worker slot while it waits, so a node never deadlocks on
// children queued behind their waiting parents (docs/actors.md, "Nested
// tasks"). It does not hand its slot over (a slot runs one task: the table's
// FailRunning requeues exactly that one when a worker dies): the coordinator
// starts a temporary pool worker per blocked worker instead, as Ray does.
//
// The worker says it is blocked in its heartbeat (sent at once when that
// changes, after 20 ms: shorter waits never ask). A temporary worker exits by
// itself once it had no task for kTemporaryIdleExit, so it never leaves in
// the middle of a task and nothing has to stop it; it is never restarted.
#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "coordinator/coordinator_impl.h"

namespace shoal::coordinator {
namespace {

// At most this many temporary workers at once (each is a process with its
// own interpreter): a recursion deeper than this can still deadlock.
constexpr size_t kMaxTemporaryWorkers = 16;
constexpr char kTemporaryIdleExitMs[] = "2000";
// A temporary worker's role in `shoal status` starts with this.
constexpr char kTemporaryLabel[] = "temporary, for blocked worker ";

}  // namespace

bool Coordinator::Impl::ListedInStatus(const ipc::WorkerStatus& w) const {
  // A temporary worker that exited is gone for good (never restarted): the
  // listing shows the node's live pool, not every process it ever started.
  return !(w.state() == "stopped" &&
           absl::StartsWith(w.role(), kTemporaryLabel));
}

void Coordinator::Impl::OnWorkerBlocked(uint32_t worker, bool blocked) {
  // An actor's process holds no pool slot: its waits block nobody else.
  if (actors_->IsActorWorker(worker)) return;
  if (!blocked) {
    blocked_workers_.erase(worker);
    return;
  }
  blocked_workers_.insert(worker);
  // The dead (and restarting) are neither blocked nor standing in.
  auto gone = [this](uint32_t w) { return supervisor_->Pid(w) == 0; };
  for (auto it = blocked_workers_.begin(); it != blocked_workers_.end();)
    it = gone(*it) ? blocked_workers_.erase(it) : std::next(it);
  temporary_workers_.erase(std::remove_if(temporary_workers_.begin(),
                                          temporary_workers_.end(), gone),
                           temporary_workers_.end());
  if (temporary_workers_.size() >= blocked_workers_.size()) return;
  // Only for work that waits: a blocked worker has nothing it could run
  // inline (it runs queued tasks inside its wait while it can), and an idle
  // worker takes what it serves.
  const int32_t slot = worker < worker_slot_.size() ? worker_slot_[worker] : -1;
  if (slot < 0 || !table_->WorkNoIdleWorkerTakes(static_cast<uint32_t>(slot)))
    return;
  if (temporary_workers_.size() >= kMaxTemporaryWorkers) {
    SHOAL_LOG(WARNING,
              "%d workers wait for tasks and %d temporary workers (the most) "
              "run: no more are started",
              blocked_workers_.size(), temporary_workers_.size());
    return;
  }
  WorkerSpec spec;
  spec.cpus = static_cast<uint32_t>(options_.cpus_per_worker);
  spec.gpus = static_cast<uint32_t>(options_.gpus_per_worker);
  // It stands in for the blocked worker: the same GPUs (CUDA_VISIBLE_DEVICES).
  if (worker < worker_gpus_.size()) spec.visible_devices = worker_gpus_[worker];
  spec.max_restarts = 0;
  spec.label = absl::StrCat(kTemporaryLabel, worker);
  spec.env["SHOAL_WORKER_IDLE_EXIT_MS"] = kTemporaryIdleExitMs;
  const uint32_t id = ReserveWorker();
  absl::StatusOr<uint32_t> started = supervisor_->Add(std::move(spec));
  if (!started.ok() || *started != id) {
    SHOAL_LOG(
        WARNING, "starting a temporary worker for worker %d: %s", worker,
        started.ok() ? "worker ids out of step" : started.status().ToString());
    return;
  }
  temporary_workers_.push_back(id);
  SHOAL_LOG(INFO, "worker %d waits for tasks: started temporary worker %d",
            worker, id);
}

}  // namespace shoal::coordinator
