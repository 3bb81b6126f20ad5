// TaskTable's client and worker verbs (see task_table.h for each verb's
// contract); construction and the coordinator's verbs are in task_table.cc.
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/monotonic_clock.h"
#include "base/spin_turn.h"
#include "base/status_macros.h"
#include "ipc/task_name.h"
#include "tasks/task_table.h"
#include "tasks/task_table_op.h"

namespace shoal::tasks {

using task_table_internal::FaultPoint;
using task_table_internal::RelaxedLoad;

namespace {

// Submit's argument checks, before it takes the lock.
absl::Status CheckSubmissions(uint32_t client,
                              absl::Span<const TaskSubmission> tasks) {
  if (client >= kMaxTaskClients)
    return absl::InvalidArgumentError("bad client slot");
  for (const TaskSubmission& t : tasks) {
    if (t.function.empty() || t.function.size() >= kFunctionNameBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a task's function name must be 1-", kFunctionNameBytes - 1,
          " bytes, got '", t.function.substr(0, 120), "'"));
    }
    if (t.cpus == 0)
      return absl::InvalidArgumentError("a task needs at least 1 cpu");
  }
  return absl::OkStatus();
}

// Whether worker slot `s` may claim from class `c`.
bool Serves(const TaskWorkerSlot& s, const ResourceClass& c) {
  const uint32_t actor = RelaxedLoad(&c.actor);
  if (actor != 0 || RelaxedLoad(&s.actor) != 0)
    return actor == RelaxedLoad(&s.actor);
  return RelaxedLoad(&c.cpus) <= s.cpus && RelaxedLoad(&c.gpus) <= s.gpus;
}

}  // namespace

uint32_t ActorOfFunction(absl::string_view function) {
  return ipc::ActorOfTaskName(function);
}

std::string FunctionWithoutActor(absl::string_view function) {
  return ipc::TaskNameWithoutActor(function);
}

std::string ActorFunction(absl::string_view function, uint32_t actor) {
  return ipc::ActorTaskName(function, actor);
}

absl::StatusOr<uint32_t> TaskTable::ClassOf(Op& op, const TaskSubmission& t) {
  const uint32_t actor = ActorOfFunction(t.function);
  if (actor == 0) return op.ClassFor(t.cpus, t.gpus);
  for (uint32_t k = 0; k < op.h()->num_classes; ++k) {
    const ResourceClass& c = op.h()->classes[k];
    if (c.actor != actor) continue;
    if (c.actor_ended) {
      return absl::UnavailableError(
          absl::StrCat("actor ", actor, " has ended (it died or was killed)"));
    }
    return k;
  }
  return absl::NotFoundError(
      absl::StrCat("actor ", actor, " does not exist on this node"));
}

// ---- clients
// ------------------------------------------------------------------------

absl::Status TaskTable::CheckBatchFits(Op& op,
                                       absl::Span<const TaskSubmission> tasks) {
  std::vector<std::pair<uint32_t, uint32_t>> new_classes;  // (cpus, gpus)
  uint64_t chunks = 0;
  for (const TaskSubmission& t : tasks) {
    SHOAL_ASSIGN_OR_RETURN(const uint32_t need, op.ChunksFor(t.args.size()));
    chunks += need;
    if (ActorOfFunction(t.function) != 0) {
      SHOAL_RETURN_IF_ERROR(ClassOf(op, t).status());  // writes nothing
      continue;
    }
    bool known = false;
    for (uint32_t k = 0; k < op.h()->num_classes && !known; ++k) {
      const ResourceClass& c = op.h()->classes[k];
      known = c.actor == 0 && c.cpus == t.cpus && c.gpus == t.gpus;
    }
    const std::pair<uint32_t, uint32_t> key(t.cpus, t.gpus);
    if (!known && std::find(new_classes.begin(), new_classes.end(), key) ==
                      new_classes.end()) {
      new_classes.push_back(key);
    }
  }
  if (op.h()->num_classes + new_classes.size() > kMaxResourceClasses) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "too many distinct resource requests and actors (", kMaxResourceClasses,
        " at most); nothing of the batch was submitted"));
  }
  if (op.h()->free_entry_count < tasks.size()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the task table is full: a batch of ", tasks.size(),
        " tasks does not fit (max_tasks = ", op.h()->max_tasks,
        " tasks queued, running or finished and not yet taken); nothing of "
        "the batch was submitted; wait for results and release them"));
  }
  if (op.h()->free_chunk_count < chunks) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "no free payload chunks for the batch's ", chunks,
        " (max_chunks = ", op.h()->max_chunks,
        ": too many large tasks in flight); nothing of the batch was "
        "submitted"));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> TaskTable::SubmitOne(Op& op, uint32_t client,
                                              const TaskSubmission& t,
                                              uint32_t* actor) {
  SHOAL_ASSIGN_OR_RETURN(const uint32_t k, ClassOf(op, t));
  SHOAL_ASSIGN_OR_RETURN(const uint32_t i, op.AllocEntry());
  TaskEntry* x = op.e(i);
  InitSubmittedEntry(op, x, t, client, k);
  SHOAL_RETURN_IF_ERROR(
      op.WritePayload(t.args, &x->args_bytes, &x->args_chunk, x->inline_args));
  FaultPoint("submit:before-enqueue");
  op.Enqueue(i, t.at_head);
  FaultPoint("submit:after-enqueue");
  *actor = op.h()->classes[k].actor;
  op.W64(&op.h()->submitted, op.h()->submitted + 1);
  op.W64(&op.h()->clients[client].submitted,
         op.h()->clients[client].submitted + 1);
  return MakeTaskId(x->generation, i);
}

absl::StatusOr<std::vector<uint64_t>> TaskTable::Submit(
    uint32_t client, absl::Span<const TaskSubmission> tasks) {
  SHOAL_RETURN_IF_ERROR(CheckSubmissions(client, tasks));
  std::vector<uint64_t> ids;
  ids.reserve(tasks.size());
  std::vector<uint32_t> actors;  // to wake
  size_t ordinary = 0;
  {
    SHOAL_ASSIGN_OR_RETURN(Op op, Op::Begin(this));
    if (op.h()->prefix.closed.load())
      return absl::UnavailableError("the coordinator has shut down");
    if (!op.h()->clients[client].in_use) {
      return absl::FailedPreconditionError(
          "this client is not registered with the coordinator");
    }
    // All or nothing: one task is one journaled step; a batch is checked to
    // fit as a whole first, and its steps sit between BeginBatch and
    // EndBatch, so a failure or a death midway takes them all back out.
    const bool batch = tasks.size() > 1;
    if (batch) {
      SHOAL_RETURN_IF_ERROR(CheckBatchFits(op, tasks));
      op.BeginBatch(client);
    }
    for (const TaskSubmission& t : tasks) {
      uint32_t actor = 0;
      absl::StatusOr<uint64_t> id = SubmitOne(op, client, t, &actor);
      if (!id.ok()) {
        op.AbortStep();
        if (batch) op.RollBackBatch();
        return id.status();
      }
      op.Checkpoint();
      FaultPoint("submit:after-task");
      ids.push_back(*id);
      if (actor == 0) {
        ++ordinary;
      } else if (std::find(actors.begin(), actors.end(), actor) ==
                 actors.end()) {
        actors.push_back(actor);
      }
    }
    if (batch) op.EndBatch();
  }
  header()->enqueues.fetch_add(ids.size(), std::memory_order_seq_cst);
  WakeSleepingWorkers(ordinary, actors);
  return ids;
}

void TaskTable::InitSubmittedEntry(Op& op, TaskEntry* x,
                                   const TaskSubmission& t, uint32_t client,
                                   uint32_t klass) {
  std::memset(x->function, 0, kFunctionNameBytes);
  std::memcpy(x->function, t.function.data(), t.function.size());
  op.W32(&x->owner, client + 1);
  op.W32(&x->worker, 0);
  op.W32(&x->klass, klass);
  op.W32(&x->attempts, 0);
  op.W32(&x->max_retries, t.max_retries);
  op.WA32(&x->flags, 0);
  op.W64(reinterpret_cast<uint64_t*>(&x->timeout_ns),
         static_cast<uint64_t>(t.timeout_ns));
  op.W64(&x->seq, op.h()->next_seq);
  op.W64(&op.h()->next_seq, op.h()->next_seq + 1);
  // An actor's calls keep their FIFO and take no part in fair queueing.
  x->tag = op.h()->classes[klass].actor != 0
               ? 0
               : op.NextFairTag(FlowKey(client, t.account));
  op.W32(&x->result_bytes, 0);
  op.W32(&x->result_chunk, 0);
  // When it was queued, for the timeline, until a claim sets its start:
  // meaningful only once claimed, so it needs no journal entry.
  __atomic_store_n(&x->started_ns, MonotonicNs(), __ATOMIC_RELAXED);
  if (x->account != t.account) op.W32(&x->account, t.account);
}

void TaskTable::WakeSleepingWorkers(size_t n,
                                    absl::Span<const uint32_t> actors) {
  for (uint32_t a : actors) {
    for (TaskWorkerSlot& s : header()->workers) {
      if (RelaxedLoad(&s.in_use) && RelaxedLoad(&s.actor) == a &&
          s.bell.sleepers.load(std::memory_order_seq_cst) != 0) {
        s.bell.RingIfUnrung(s.armed.load(std::memory_order_seq_cst));
      }
    }
  }
  // A worker rung by an earlier submit that has not woken up yet still counts
  // among the sleepers: it is skipped (rung since it armed), so that
  // back-to-back submits wake one worker each instead of ringing the same one
  // twice and leaving the others asleep.
  size_t to_wake = n;
  for (uint32_t w = 0; w < kMaxTaskWorkers && to_wake > 0; ++w) {
    TaskWorkerSlot& s = header()->workers[w];
    if (!RelaxedLoad(&s.in_use) || RelaxedLoad(&s.actor) != 0 ||
        s.bell.sleepers.load(std::memory_order_seq_cst) == 0)
      continue;
    if (s.bell.RingIfUnrung(s.armed.load(std::memory_order_seq_cst))) --to_wake;
  }
}

absl::StatusOr<TaskState> TaskTable::Poll(uint64_t id) const {
  const uint32_t i = TaskIndex(id);
  if (i >= header()->max_tasks)
    return absl::NotFoundError(absl::StrCat("no task ", id));
  const TaskEntry* x = entry(i);
  const auto state =
      static_cast<TaskState>(x->state.load(std::memory_order_acquire));
  if (RelaxedLoad(&x->generation) != TaskGeneration(id) ||
      state == TaskState::kFree) {
    return absl::NotFoundError(
        absl::StrCat("no task ", id, " (unknown or released)"));
  }
  return state;
}

bool TaskTable::RunsOnAnotherCpu(uint64_t id) const {
  const uint32_t i = TaskIndex(id);
  if (i >= header()->max_tasks) return false;
  const TaskEntry* x = entry(i);
  if (static_cast<TaskState>(x->state.load(std::memory_order_acquire)) !=
      TaskState::kRunning) {
    return false;
  }
  const uint32_t w = RelaxedLoad(&x->worker);
  if (w == 0 || w > kMaxTaskWorkers ||
      RelaxedLoad(&x->generation) != TaskGeneration(id)) {
    return false;
  }
  const uint32_t cpu =
      header()->workers[w - 1].cpu.load(std::memory_order_relaxed);
  const int mine = sched_getcpu();
  return cpu != 0 && mine >= 0 && cpu != static_cast<uint32_t>(mine) + 1;
}

bool TaskTable::SpinTurn(uint64_t id) const {
  if (id != 0 && RunsOnAnotherCpu(id)) return RelaxTurn(16);
  return YieldTurn();
}

absl::StatusOr<TaskOutcome> TaskTable::Take(uint32_t client, uint64_t id,
                                            bool release) {
  SHOAL_ASSIGN_OR_RETURN(Op op, Op::Begin(this));
  SHOAL_ASSIGN_OR_RETURN(const uint32_t i, op.Owned(id, client));
  TaskEntry* x = op.e(i);
  if (static_cast<TaskState>(x->state.load()) != TaskState::kDone) {
    return absl::FailedPreconditionError(
        absl::StrCat("task ", id, " has not finished"));
  }
  TaskOutcome out;
  out.id = id;
  out.code = x->result_code;
  out.attempts = x->attempts;
  out.result =
      op.ReadPayload(x->result_bytes, x->result_chunk, x->inline_result);
  out.timed_out = x->flags.load() & kTaskTimedOut;
  out.timeout_ns = x->timeout_ns;
  if (release) {
    op.FreeEntry(i);
    FaultPoint("take:after-free");
  }
  return out;
}

absl::Status TaskTable::Release(uint32_t client, uint64_t id) {
  SHOAL_ASSIGN_OR_RETURN(Op op, Op::Begin(this));
  SHOAL_ASSIGN_OR_RETURN(const uint32_t i, op.Owned(id, client));
  TaskEntry* x = op.e(i);
  switch (static_cast<TaskState>(x->state.load())) {
    case TaskState::kQueued:
      op.Unlink(i);
      FaultPoint("release:after-unlink");
      op.FreeEntry(i);
      FaultPoint("release:after-free");
      break;
    case TaskState::kDone:
      op.FreeEntry(i);
      break;
    case TaskState::kRunning:
      op.WA32(&x->flags,
              x->flags.load() | kTaskCancelRequested | kTaskReleaseWhenDone);
      break;
    case TaskState::kFree:
      break;
  }
  return absl::OkStatus();
}

absl::StatusOr<TaskState> TaskTable::Cancel(uint64_t id) {
  uint32_t ring_owner = 0;
  TaskState was;
  {
    SHOAL_ASSIGN_OR_RETURN(Op op, Op::Begin(this));
    SHOAL_ASSIGN_OR_RETURN(const uint32_t i, op.Live(id));
    TaskEntry* x = op.e(i);
    was = static_cast<TaskState>(x->state.load());
    if (was == TaskState::kQueued) {
      op.Unlink(i);
      FaultPoint("cancel:after-unlink");
      SHOAL_ASSIGN_OR_RETURN(
          ring_owner,
          op.Finish(i, static_cast<int32_t>(absl::StatusCode::kCancelled), ""));
      FaultPoint("cancel:after-finish");
    } else if (was == TaskState::kRunning) {
      op.WA32(&x->flags, x->flags.load() | kTaskCancelRequested);
    }
  }
  if (ring_owner != 0) RingClient(ring_owner - 1);
  return was;
}

// ---- workers
// ------------------------------------------------------------------------

absl::StatusOr<std::optional<TaskClaim>> TaskTable::Claim(uint32_t worker) {
  return ClaimOnto(worker, /*nested=*/false);
}

absl::StatusOr<std::optional<TaskClaim>> TaskTable::ClaimNested(
    uint32_t worker) {
  return ClaimOnto(worker, /*nested=*/true);
}

absl::StatusOr<std::optional<TaskClaim>> TaskTable::ClaimOnto(uint32_t worker,
                                                              bool nested) {
  if (worker >= kMaxTaskWorkers)
    return absl::InvalidArgumentError("bad worker slot");
  SHOAL_ASSIGN_OR_RETURN(Op op, Op::Begin(this));
  if (op.h()->prefix.closed.load())
    return absl::UnavailableError("the coordinator has shut down");
  TaskWorkerSlot& s = op.h()->workers[worker];
  if (nested && s.actor != 0) {
    return absl::FailedPreconditionError(
        "an actor's worker runs only its actor's calls, in order");
  }
  if (nested && s.current == 0) {
    return absl::FailedPreconditionError(
        "the worker runs no task to run another inside");
  }
  if (op.h()->queued == 0) return std::nullopt;
  // The lowest fair tag among the heads this worker serves (ties: the
  // oldest).
  uint32_t best = kMaxResourceClasses;
  uint64_t best_tag = ~uint64_t{0}, best_seq = ~uint64_t{0};
  for (uint32_t k = 0; k < op.h()->num_classes; ++k) {
    const ResourceClass& c = op.h()->classes[k];
    if (c.head == 0 || !Serves(s, c)) continue;
    const TaskEntry* head = op.e(c.head - 1);
    if (head->tag < best_tag ||
        (head->tag == best_tag && head->seq < best_seq)) {
      best_tag = head->tag;
      best_seq = head->seq;
      best = k;
    }
  }
  if (best == kMaxResourceClasses) return std::nullopt;
  const uint32_t i = op.h()->classes[best].head - 1;
  op.Unlink(i);
  TaskEntry* x = op.e(i);
  if (op.h()->classes[best].actor == 0) {
    op.h()->fair.vtime = std::max(op.h()->fair.vtime, x->tag);
  }
  op.WA32(&x->state, static_cast<uint32_t>(TaskState::kRunning));
  op.W32(&x->worker, worker + 1);
  op.W32(&x->attempts, x->attempts + 1);
  const int64_t queued_ns = x->started_ns;
  const int64_t claimed_ns = MonotonicNs();
  op.W64(reinterpret_cast<uint64_t*>(&x->started_ns),
         static_cast<uint64_t>(claimed_ns));
  op.W32(&x->below, nested ? s.current : 0);
  FaultPoint("claim:before-assign");
  op.W32(&s.current, i + 1);
  const int cpu = sched_getcpu();
  s.cpu.store(cpu < 0 ? 0 : static_cast<uint32_t>(cpu) + 1,
              std::memory_order_relaxed);
  TaskClaim claim;
  claim.id = MakeTaskId(x->generation, i);
  claim.function = x->function;
  claim.args = op.ReadPayload(x->args_bytes, x->args_chunk, x->inline_args);
  claim.attempt = x->attempts;
  claim.timeout_ns = x->timeout_ns;
  claim.account = x->account;
  claim.queued_ns = queued_ns;
  claim.claimed_ns = claimed_ns;
  if (x->owner != 0) {
    claim.owner_store_slot =
        static_cast<int32_t>(op.h()->clients[x->owner - 1].store_slot) - 1;
  }
  return claim;
}

absl::Status TaskTable::Complete(uint32_t worker, uint64_t id, int32_t code,
                                 absl::string_view result) {
  uint32_t ring_owner = 0;
  {
    SHOAL_ASSIGN_OR_RETURN(Op op, Op::Begin(this));
    SHOAL_ASSIGN_OR_RETURN(const uint32_t i, op.Live(id));
    TaskEntry* x = op.e(i);
    TaskWorkerSlot& s = op.h()->workers[worker];
    if (static_cast<TaskState>(x->state.load()) != TaskState::kRunning ||
        x->worker != worker + 1 || s.current != i + 1) {
      return absl::FailedPreconditionError(
          absl::StrCat("task ", id, " is no longer running on this worker"));
    }
    if (op.h()->classes[x->klass].actor == 0) {
      op.ChargeFairFlow(FlowKey(x->owner - 1, x->account),
                        MonotonicNs() - x->started_ns);
    }
    // Back to the task it ran inside, if any (ClaimNested).
    op.W32(&s.current, x->below);
    op.W32(&x->below, 0);
    if (code == 0) {
      op.W64(&s.done, s.done + 1);
    } else {
      op.W64(&s.failed, s.failed + 1);
    }
    FaultPoint("complete:before-finish");
    SHOAL_ASSIGN_OR_RETURN(ring_owner, op.Finish(i, code, result));
    FaultPoint("complete:after-finish");
  }
  if (ring_owner != 0) RingClient(ring_owner - 1);
  return absl::OkStatus();
}

void TaskTable::RingClient(uint32_t client) {
  ClientBell(client).Ring();
  if (client != wake_client_ || wake_fd_ < 0) return;
  // After the ring (seq_cst on both sides): an armer that saw the old ring
  // count is seen armed here. One writer per arming: the exchange.
  std::atomic<uint32_t>& armed = header()->clients[client].wake_fd_armed;
  if (armed.load(std::memory_order_seq_cst) == 0 ||
      armed.exchange(0, std::memory_order_seq_cst) == 0) {
    return;
  }
  const uint64_t one = 1;
  // EAGAIN only when the counter is at its maximum: readable already.
  ssize_t unused = write(wake_fd_, &one, sizeof(one));
  (void)unused;
}

bool TaskTable::CancelRequested(uint64_t id) const {
  const TaskEntry* x = entry(TaskIndex(id));
  return RelaxedLoad(&x->generation) != TaskGeneration(id) ||
         (x->flags.load(std::memory_order_acquire) & kTaskCancelRequested) !=
             0 ||
         header()->prefix.closed.load(std::memory_order_relaxed) != 0;
}

void TaskTable::WaitForWork(uint32_t worker, absl::Duration spin,
                            absl::Duration timeout) {
  TaskSegmentHeader* h = header();
  TaskWorkerSlot& s = h->workers[worker];
  // Work this worker can run, read without the lock (a hint; Claim decides).
  auto runnable = [&] {
    if (h->prefix.closed.load(std::memory_order_relaxed)) return true;
    if (RelaxedLoad(&h->queued) == 0) return false;
    const uint32_t n =
        std::min(RelaxedLoad(&h->num_classes), kMaxResourceClasses);
    for (uint32_t k = 0; k < n; ++k) {
      const ResourceClass& c = h->classes[k];
      if (RelaxedLoad(&c.depth) > 0 && Serves(s, c)) return true;
    }
    return false;
  };
  if (runnable()) return;
  // Spin, yielding the CPU: another process on this core runs at once, and a
  // task submitted meanwhile is picked up without a wake-up (a futex
  // wake-up of an idle vCPU costs several times a yield loop's turn).
  // Not while the CPU is contended: each yield would then wait out another
  // thread's time slice (base/spin_turn.h).
  const absl::Time spin_until = absl::Now() + spin;
  const uint64_t seen = h->enqueues.load(std::memory_order_relaxed);
  bool spinning = spin > absl::ZeroDuration() && SpinAllowed();
  while (spinning && absl::Now() < spin_until) {
    if (h->enqueues.load(std::memory_order_relaxed) != seen && runnable())
      return;
    spinning = YieldTurn();
  }
  const uint32_t armed = s.bell.Arm();
  s.armed.store(armed, std::memory_order_seq_cst);  // before runnable()
  if (!runnable()) s.bell.Sleep(armed, timeout);
  s.bell.Disarm();
}

bool TaskTable::WorkNoIdleWorkerTakes(uint32_t like) const {
  if (like >= kMaxTaskWorkers) return false;
  const TaskSegmentHeader* h = header();
  if (RelaxedLoad(&h->queued) == 0) return false;
  const TaskWorkerSlot& model = h->workers[like];
  const uint32_t n =
      std::min(RelaxedLoad(&h->num_classes), kMaxResourceClasses);
  for (uint32_t k = 0; k < n; ++k) {
    const ResourceClass& c = h->classes[k];
    if (RelaxedLoad(&c.depth) == 0 || RelaxedLoad(&c.actor) != 0 ||
        !Serves(model, c))
      continue;
    bool taken = false;
    for (const TaskWorkerSlot& w : h->workers) {
      if (RelaxedLoad(&w.in_use) != 0 && RelaxedLoad(&w.actor) == 0 &&
          RelaxedLoad(&w.current) == 0 && Serves(w, c)) {
        taken = true;
        break;
      }
    }
    if (!taken) return true;
  }
  return false;
}

void TaskTable::SetFaultHookForTesting(void (*hook)(const char*)) {
  task_table_internal::g_fault_hook = hook;
}

void TaskTable::WakeAllWorkers() {
  for (TaskWorkerSlot& s : header()->workers) s.bell.Ring();
}

}  // namespace shoal::tasks
