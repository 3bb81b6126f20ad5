// TaskTable: the node's task queue in shared memory (layout in task_layout.h).
//
// Verbs, by who calls them:
//   coordinator  Create, AddWorker / RemoveWorker, AddClient / RemoveClient,
//                FailRunning (a worker died), Expired (timeouts), Stats
//   client       Submit, Poll, Take, Release, Cancel, WaitForCompletion
//   worker       Claim, ClaimNested, Complete, CancelRequested, WaitForWork
// A task id is (generation << 32 | entry index): a stale id (released, reused)
// is NotFound, never another task. Payloads (encoded arguments and results)
// are opaque bytes here; ipc/ defines their encoding.
//
// Task lifecycle: Submit → kQueued (FIFO per resource class) → Claim →
// kRunning → Complete → kDone → Take/Release → free. Cancel: a queued task
// becomes kDone (Cancelled) at once; a running one gets its cancel flag set
// for the worker to see. A worker's death requeues its task (at the head of
// its FIFO) while retries remain, else completes it with the given error.
#ifndef SHOAL_TASKS_TASK_TABLE_H_
#define SHOAL_TASKS_TASK_TABLE_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "shm/segment.h"
#include "tasks/task_layout.h"

namespace shoal::tasks {

struct TaskTableOptions {
  // Tasks in flight (queued, running or done and not yet taken). Default 65536.
  uint32_t max_tasks = 65536;
  // 64 KiB chunks for payloads over 160 bytes. Default 2048 (128 MiB of
  // address space; pages are allocated only when used).
  uint32_t max_chunks = 2048;
  // Longest wait for the table lock before an operation fails. Default 10 s.
  absl::Duration lock_timeout = absl::Seconds(10);
  // Fair queueing charges a flow at least this much of the workers' time
  // per task (task_layout.h: FairQueueing): tasks shorter than it count as
  // equal. Default 20 us, about what claiming and completing one costs.
  absl::Duration fair_min_cost = absl::Microseconds(20);
};

// A task for an actor names it in its function, "<function>@actor=<id>"
// (ipc/task_name.h). Submit queues it in that actor's class, which only the
// actor's worker claims; the worker runs <function>. Naming the actor in the
// function keeps every submit path (local clients, the remote proxy)
// routing actor calls with no new field. These three forward to
// ipc/task_name.h's readers and writer.
// The actor a function name is addressed to, or 0 for an ordinary task.
uint32_t ActorOfFunction(absl::string_view function);
// The function without "@actor=<id>" (what the actor's worker runs).
std::string FunctionWithoutActor(absl::string_view function);
// "<function>@actor=<id>".
std::string ActorFunction(absl::string_view function, uint32_t actor);

// What a client submits.
struct TaskSubmission {
  std::string function;  // at most 95 bytes, the actor suffix included
  uint32_t cpus = 1;
  uint32_t gpus = 0;
  int64_t timeout_ns = 0;  // 0: none
  uint32_t max_retries = 3;
  std::string args;  // encoded arguments (opaque here)
  // Queue it ahead of the tasks already waiting in its class (the coordinator
  // puts an actor's constructor call first when it restarts the actor).
  bool at_head = false;
  // The store account (shm::CreateOptions::account) that every store object
  // the worker creates for the task's outputs is charged to; an output the
  // account's limit refuses fails the task with ResourceExhausted. 0: none
  // (no limit), what a submission has unless its submitter sets one.
  uint32_t account = 0;
};

// What a worker claims.
struct TaskClaim {
  uint64_t id = 0;
  std::string function;
  std::string args;
  uint32_t attempt = 0;  // 1 for the first run
  int64_t timeout_ns = 0;
  int32_t owner_store_slot = -1;  // where output objects go; -1: none
  uint32_t account = 0;           // TaskSubmission::account
  // CLOCK_MONOTONIC: when it was queued (for a requeued task, when its last
  // attempt began) and when this claim took it (for the timeline).
  int64_t queued_ns = 0;
  int64_t claimed_ns = 0;
};

// A finished task's outcome, as its owner takes it.
struct TaskOutcome {
  uint64_t id = 0;
  int32_t code = 0;    // absl::StatusCode
  std::string result;  // encoded result (opaque here)
  uint32_t attempts = 0;
  bool timed_out = false;  // stopped by its deadline
  int64_t timeout_ns = 0;
};

struct TaskTableStats {
  uint64_t submitted = 0;
  uint64_t completed = 0;
  uint32_t queued = 0;
  uint32_t running = 0;
  uint32_t done_untaken = 0;
  uint32_t free_entries = 0;
  uint32_t free_chunks = 0;
};

// A worker slot's counters.
struct TaskWorkerCounters {
  uint64_t done = 0;
  uint64_t failed = 0;
  bool busy = false;
};

// A running task whose deadline passed.
struct ExpiredTask {
  uint64_t id;
  uint32_t worker;
  absl::Duration overdue;
};

class TaskTable {
 public:
  static constexpr uint32_t kChunkBytes = 64 << 10;

  // Coordinator: creates /dev/shm/shoal-<job>-tasks (removing a dead owner's).
  // Errors: as Segment::Create, InvalidArgument for bad options.
  static absl::StatusOr<std::unique_ptr<TaskTable>> Create(
      absl::string_view job_id, const TaskTableOptions& options);
  // Workers and clients: maps an existing task segment.
  // Errors: as Segment::Open; FailedPrecondition for a different layout.
  static absl::StatusOr<std::unique_ptr<TaskTable>> Open(
      const std::string& segment_name, absl::Duration lock_timeout);

  const std::string& segment_name() const { return segment_->name(); }
  static std::string SegmentNameForJob(absl::string_view job_id);

  // ---- coordinator ----------------------------------------------------------
  // Registers a worker slot; with `actor` != 0 it claims only that actor's
  // calls. Errors: ResourceExhausted (64 workers).
  absl::StatusOr<uint32_t> AddWorker(pid_t pid, uint32_t cpus, uint32_t gpus,
                                     uint32_t actor = 0);
  // Makes the FIFO of actor `actor` (> 0), so calls to it can be submitted.
  // An ended actor's class is reused when the table has no free class.
  // Errors: InvalidArgument (0), AlreadyExists, ResourceExhausted (classes).
  absl::Status AddActor(uint32_t actor);
  // Ends actor `actor`: its queued calls complete with `code` and `result`,
  // and later submits to it fail with Unavailable. Errors: NotFound.
  absl::Status EndActor(uint32_t actor, int32_t code, absl::string_view result);
  // Frees a worker slot. REQUIRES: its task was handled (FailRunning).
  absl::Status RemoveWorker(uint32_t worker);
  // Registers a client slot; `store_slot` is the client's store connection
  // (workers hand it the outputs they put in the store), or -1 for none.
  // Errors: ResourceExhausted (64 clients).
  absl::StatusOr<uint32_t> AddClient(pid_t pid, int32_t store_slot = -1);
  // Frees a client slot: its queued and finished tasks are freed, its running
  // ones are cancelled and freed when they end. Returns the encoded results
  // of the finished tasks it freed (so their output objects can be deleted).
  absl::StatusOr<std::vector<std::string>> RemoveClient(uint32_t client);
  // A worker slot's counters (read without the lock).
  absl::StatusOr<TaskWorkerCounters> WorkerCounters(uint32_t worker) const;
  // The task worker `worker` is running, if any (as an id).
  std::optional<uint64_t> RunningOn(uint32_t worker) const;
  // Handles the tasks a dead worker was running (its stack: the task it ran
  // and those it ran inside it, ClaimNested): each is requeued at the head
  // of its FIFO if it has retries left, else completed with `code` and
  // `result`. Returns true if all were requeued. NotFound if it ran nothing.
  absl::StatusOr<bool> FailRunning(uint32_t worker, int32_t code,
                                   absl::string_view result);
  // Completes a task on its worker's behalf (a timeout the worker ignored).
  absl::Status CompleteFor(uint32_t worker, int32_t code,
                           absl::string_view result);
  // Running tasks past their deadline (and not yet marked timed out).
  std::vector<ExpiredTask> Expired(int64_t now_ns) const;
  // Marks a running task timed out and cancelled: the worker sees
  // CancelRequested, and whatever it completes with becomes DeadlineExceeded
  // with an empty result (TaskOutcome::timed_out tells the owner why).
  absl::Status Expire(uint64_t id);
  absl::StatusOr<TaskTableStats> Stats();
  // Marks the segment closed (waiters give up) at shutdown.
  void Close();

  // ---- clients --------------------------------------------------------------
  // Queues tasks (one lock for the batch). Returns their ids in order. All
  // or nothing: on any error no task of the batch was submitted, and a
  // process that dies inside leaves the table as before (the next locker
  // takes a half-submitted batch back out).
  // Errors: InvalidArgument (bad function name, cpus = 0), ResourceExhausted
  // naming the limit (max_tasks: too many tasks in flight; max_chunks, or a
  // payload over the per-task limit; resource classes), NotFound (an actor
  // never created), Unavailable (an actor that ended: the message starts
  // "actor <id>").
  absl::StatusOr<std::vector<uint64_t>> Submit(
      uint32_t client, absl::Span<const TaskSubmission> tasks);
  // A task's state without the lock. NotFound for a stale id.
  absl::StatusOr<TaskState> Poll(uint64_t id) const;
  // Whether `id` is running on a worker that claimed it on another CPU than
  // the caller's now: a hint (lock-free; either may have moved since) that a
  // busy-wait for it takes no CPU time from it. False when not running.
  bool RunsOnAnotherCpu(uint64_t id) const;
  // One turn of a spin that waits for task `id`: a short pause (~0.1-0.6
  // µs) while it runs on another CPU, else sched_yield, so that a worker on
  // this CPU gets it (`id` 0: yield). Returns false when the turn was stolen
  // (base/spin_turn.h: the CPU is contended): the caller stops spinning and
  // sleeps. REQUIRES: the caller spins only while SpinAllowed().
  bool SpinTurn(uint64_t id) const;
  // The outcome of a finished task; with `release`, also frees it.
  // Errors: NotFound (stale id), FailedPrecondition (not done, not owner).
  absl::StatusOr<TaskOutcome> Take(uint32_t client, uint64_t id, bool release);
  // Frees a task: at once if done; a queued one is dropped; a running one is
  // cancelled and freed when it ends. Errors: NotFound, PermissionDenied.
  absl::Status Release(uint32_t client, uint64_t id);
  // Cancels a queued (dropped, completes Cancelled) or running (flagged) task.
  // Returns the state it was in. Errors: NotFound.
  absl::StatusOr<TaskState> Cancel(uint64_t id);
  // Records the client's store slot (outputs of its tasks are handed there).
  absl::Status SetClientStoreSlot(uint32_t client, int32_t store_slot);
  // Sleeps until one of `client`'s tasks completes after `Arm`, or timeout.
  uint32_t ArmClient(uint32_t client) { return ClientBell(client).Arm(); }
  void SleepClient(uint32_t client, uint32_t armed, absl::Duration timeout) {
    ClientBell(client).Sleep(armed, timeout);
  }
  void DisarmClient(uint32_t client) { ClientBell(client).Disarm(); }
  // How many times the client's bell rang (changes when a task completes).
  uint32_t ClientRings(uint32_t client) const {
    return ClientBell(client).rings.load(std::memory_order_seq_cst);
  }
  // A client that sleeps in poll(2) (the coordinator's frontend) is woken
  // through an eventfd rather than its bell: it arms before it sleeps and
  // compares the returned ring count with the one it last handled (a
  // completion between the two is seen there, or it writes the eventfd);
  // it disarms when awake. Completions ring the bell as always; a process
  // that knows the client's eventfd (SetClientWakeFd) also writes it once
  // per arming. The eventfd only wakes: the client still reads the table.
  uint32_t ArmClientWakeFd(uint32_t client) {
    header()->clients[client].wake_fd_armed.store(1, std::memory_order_seq_cst);
    return ClientRings(client);
  }
  void DisarmClientWakeFd(uint32_t client) {
    header()->clients[client].wake_fd_armed.store(0, std::memory_order_seq_cst);
  }
  // In a process that completes tasks (a worker): `fd`, an eventfd it does
  // not own, wakes `client` when armed. REQUIRES: called before the first
  // Complete/Cancel of this object, from one thread; fd stays open.
  void SetClientWakeFd(uint32_t client, int fd) {
    wake_client_ = client;
    wake_fd_ = fd;
  }

  // ---- workers --------------------------------------------------------------
  // The oldest queued task this worker can run (FIFO per class; across
  // classes, the lowest submission number), now marked running; nullopt if
  // none. Errors: lock failures.
  absl::StatusOr<std::optional<TaskClaim>> Claim(uint32_t worker);
  // A waiting task helps (docs/actors.md, "Nested tasks"): claims, as Claim,
  // the oldest queued task this worker can run, on top of the one it runs;
  // Complete of the new one returns the worker to the one below. A worker
  // dying fails or requeues the whole stack (FailRunning).
  // Errors: FailedPrecondition (an actor's worker, whose calls run in order
  // on its instance; or a worker running no task), lock failures.
  absl::StatusOr<std::optional<TaskClaim>> ClaimNested(uint32_t worker);
  // Finishes the worker's running task `id` (the top of its stack). Errors:
  // FailedPrecondition if it is not the task this worker runs (a timeout or
  // cancel already completed it, or a task claimed inside it still runs).
  absl::Status Complete(uint32_t worker, uint64_t id, int32_t code,
                        absl::string_view result);
  // Whether cancellation was requested for `id` (lock-free).
  bool CancelRequested(uint64_t id) const;
  // Waits for work: spins (yielding the CPU) for up to `spin`, then sleeps
  // until a submit rings this worker or `timeout` passes. It does not spin
  // while the CPU is contended (base/spin_turn.h): a submit's ring wakes a
  // sleeping worker at once, while a spinning one would wait out another
  // thread's time slice.
  void WaitForWork(uint32_t worker, absl::Duration spin,
                   absl::Duration timeout);
  // Coordinator (nested tasks): whether a task is queued that worker
  // `like`'s resources serve and no idle ordinary worker (registered,
  // running nothing) serves, so one more worker like `like` would have
  // something to run now. Read without the lock: a hint.
  bool WorkNoIdleWorkerTakes(uint32_t like) const;
  // Wakes every sleeping worker (shutdown, cancellation).
  void WakeAllWorkers();

  // Tests only: called at named points inside operations (with the lock held)
  // so a test can kill the process exactly there. Not thread-safe to change.
  static void SetFaultHookForTesting(void (*hook)(const char* point));

 private:
  TaskTable(std::unique_ptr<shm::Segment> segment, absl::Duration lock_timeout);

  TaskSegmentHeader* header() const {
    return reinterpret_cast<TaskSegmentHeader*>(segment_->base());
  }
  TaskEntry* entry(uint32_t i) const {
    return reinterpret_cast<TaskEntry*>(segment_->base() +
                                        header()->entries_offset) +
           i;
  }
  uint8_t* chunk(uint32_t i) const {
    return segment_->base() + header()->chunks_offset +
           uint64_t{i} * header()->chunk_bytes;
  }
  shm::Doorbell& ClientBell(uint32_t client) const {
    return header()->clients[client].bell;
  }

  class Op;  // one locked, journaled operation

  // Claim and ClaimNested: with `nested`, on top of the running task.
  absl::StatusOr<std::optional<TaskClaim>> ClaimOnto(uint32_t worker,
                                                     bool nested);

  // Submit's steps: an allocated entry's fields for `t` (all but the payload),
  // written through `op`; then, with the lock released, up to `n` sleeping
  // workers woken, one each.
  static void InitSubmittedEntry(Op& op, TaskEntry* x, const TaskSubmission& t,
                                 uint32_t client, uint32_t klass);
  // The class a submission goes to (its actor's, or one for its resources).
  static absl::StatusOr<uint32_t> ClassOf(Op& op, const TaskSubmission& t);
  // The fair-queueing flow a task of `client` charged to `account` belongs
  // to (task_layout.h: FairQueueing): the account where there is one, else
  // the client slot.
  static uint64_t FlowKey(uint32_t client, uint32_t account) {
    return account != 0 ? (uint64_t{1} << 63) | account
                        : (uint64_t{1} << 62) | (uint64_t{client} + 1);
  }
  // Whether a whole batch fits (entries, payload chunks, resource classes,
  // live actors), checked before any of it is written. Writes nothing.
  // Errors: as Submit.
  static absl::Status CheckBatchFits(Op& op,
                                     absl::Span<const TaskSubmission> tasks);
  // One task of Submit, in the current journaled step; sets `actor` to the
  // actor it is for (0: none). Errors: as Submit (the step is then undone
  // by the caller).
  static absl::StatusOr<uint64_t> SubmitOne(Op& op, uint32_t client,
                                            const TaskSubmission& t,
                                            uint32_t* actor);
  // Wakes up to `n` sleeping ordinary workers, and the worker of each actor
  // in `actors`.
  void WakeSleepingWorkers(size_t n, absl::Span<const uint32_t> actors = {});

  // Rings `client`'s bell (one of its tasks finished) and, if it is the
  // client whose eventfd this process knows and it is armed, writes that.
  void RingClient(uint32_t client);

  std::unique_ptr<shm::Segment> segment_;
  uint32_t wake_client_ = kMaxTaskClients;  // SetClientWakeFd; none
  int wake_fd_ = -1;
  absl::Duration lock_timeout_;
};

// Task ids.
inline uint64_t MakeTaskId(uint32_t generation, uint32_t index) {
  return (uint64_t{generation} << 32) | index;
}
inline uint32_t TaskIndex(uint64_t id) { return static_cast<uint32_t>(id); }
inline uint32_t TaskGeneration(uint64_t id) {
  return static_cast<uint32_t>(id >> 32);
}

}  // namespace shoal::tasks

#endif  // SHOAL_TASKS_TASK_TABLE_H_
