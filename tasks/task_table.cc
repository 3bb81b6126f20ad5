#include "tasks/task_table.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/monotonic_clock.h"
#include "base/process_info.h"
#include "base/status_macros.h"
#include "tasks/task_table_op.h"

namespace shoal::tasks {

using task_table_internal::FaultPoint;
using task_table_internal::RelaxedLoad;

namespace task_table_internal {
void (*g_fault_hook)(const char*) = nullptr;
}  // namespace task_table_internal

// ---- an unfinished Submit batch
// -------------------------------------------------------------

void TaskTable::Op::RollBackBatch() {
  const SubmitBatchRecord& b = h()->batch;
  auto in_batch = [&](uint32_t i) {
    return e(i)->state.load(std::memory_order_relaxed) !=
               static_cast<uint32_t>(TaskState::kFree) &&
           e(i)->seq >= b.first_seq;
  };
  // 1. Out of the FIFOs: the batch's tasks are all queued (it held the lock
  // throughout), a run at the head (at_head) and one at the tail of a class.
  // Each run is skipped in one step that keeps the FIFO consistent.
  for (uint32_t k = 0; k < h()->num_classes; ++k) {
    ResourceClass& cls = h()->classes[k];
    uint32_t prev = 0;  // the last task kept, index + 1
    uint32_t cur = cls.head;
    while (cur != 0) {
      if (!in_batch(cur - 1)) {
        prev = cur;
        cur = e(cur - 1)->next;
        continue;
      }
      uint32_t run = 0;
      while (cur != 0 && in_batch(cur - 1)) {
        ++run;
        cur = e(cur - 1)->next;
      }
      W32(prev == 0 ? &cls.head : &e(prev - 1)->next, cur);
      if (cur == 0) W32(&cls.tail, prev);
      W32(&cls.depth, cls.depth - run);
      W32(&h()->queued, h()->queued - run);
      Checkpoint();
    }
  }
  // 2. Freed newest first (each its own step), so the free stacks and the
  // generations (task ids) are as before.
  std::vector<std::pair<uint64_t, uint32_t>> tasks;  // (seq, index)
  for (uint32_t i = 0; i < h()->max_tasks; ++i) {
    if (in_batch(i)) tasks.emplace_back(e(i)->seq, i);
  }
  std::sort(tasks.rbegin(), tasks.rend());
  for (const auto& [seq, i] : tasks) {
    FreeEntry(i);
    W32(&e(i)->generation, e(i)->generation - 1);
    Checkpoint();
  }
  // 3. The counters, the classes it made, and the record itself.
  W32(&h()->num_classes, b.num_classes);
  W64(&h()->next_seq, b.first_seq);
  W64(&h()->submitted, b.submitted);
  if (b.client < kMaxTaskClients)
    W64(&h()->clients[b.client].submitted, b.client_submitted);
  W32(&h()->batch.active, 0);
  Checkpoint();
}

// ---- construction
// ---------------------------------------------------------------

TaskTable::TaskTable(std::unique_ptr<shm::Segment> segment,
                     absl::Duration lock_timeout)
    : segment_(std::move(segment)), lock_timeout_(lock_timeout) {}

std::string TaskTable::SegmentNameForJob(absl::string_view job_id) {
  return absl::StrCat("shoal-", job_id, "-tasks");
}

absl::StatusOr<std::unique_ptr<TaskTable>> TaskTable::Create(
    absl::string_view job_id, const TaskTableOptions& o) {
  SHOAL_RETURN_IF_ERROR(
      shm::SegmentNameForJob(job_id).status());  // validates the id
  if (o.max_tasks == 0 || o.max_chunks == 0) {
    return absl::InvalidArgumentError(
        "max_tasks and max_chunks must be positive");
  }
  const uint64_t entries_offset =
      shm::AlignUp(sizeof(TaskSegmentHeader), shm::kPageSize);
  const uint64_t chunks_offset =
      shm::AlignUp(entries_offset + uint64_t{o.max_tasks} * sizeof(TaskEntry),
                   shm::kPageSize);
  const uint64_t bytes = chunks_offset + uint64_t{o.max_chunks} * kChunkBytes;
  SHOAL_ASSIGN_OR_RETURN(
      std::unique_ptr<shm::Segment> seg,
      shm::Segment::Create(SegmentNameForJob(job_id), bytes));
  seg->InitPrefix(job_id, kTaskLayoutVersion, sizeof(TaskSegmentHeader));
  auto* h = reinterpret_cast<TaskSegmentHeader*>(seg->base());
  h->max_tasks = o.max_tasks;
  h->max_chunks = o.max_chunks;
  h->chunk_bytes = kChunkBytes;
  h->entries_offset = entries_offset;
  h->chunks_offset = chunks_offset;
  h->fair.min_cost_ns = static_cast<uint64_t>(
      std::max<int64_t>(1, absl::ToInt64Nanoseconds(o.fair_min_cost)));
  SHOAL_RETURN_IF_ERROR(shm::InitRobustLock(&h->lock));
  shm::Segment* segment = seg.get();
  std::unique_ptr<TaskTable> t(new TaskTable(std::move(seg), o.lock_timeout));
  // Free lists: entries and chunks in index order (low ones first keeps the
  // touched pages few).
  for (uint32_t i = 0; i < o.max_tasks; ++i) {
    t->entry(i)->next = i + 1 < o.max_tasks ? i + 2 : 0;
  }
  h->free_entries = 1;
  h->free_entry_count = o.max_tasks;
  for (uint32_t i = 0; i < o.max_chunks; ++i) {
    reinterpret_cast<ChunkHeader*>(t->chunk(i))->next =
        i + 1 < o.max_chunks ? i + 2 : 0;
  }
  h->free_chunks = 1;
  h->free_chunk_count = o.max_chunks;
  segment->Publish(kTaskSegmentMagic);
  return t;
}

absl::StatusOr<std::unique_ptr<TaskTable>> TaskTable::Open(
    const std::string& segment_name, absl::Duration lock_timeout) {
  SHOAL_ASSIGN_OR_RETURN(
      std::unique_ptr<shm::Segment> seg,
      shm::Segment::Open(segment_name, kTaskSegmentMagic, kTaskLayoutVersion));
  return std::unique_ptr<TaskTable>(
      new TaskTable(std::move(seg), lock_timeout));
}

void TaskTable::Close() {
  segment_->MarkClosed();
  WakeAllWorkers();
  for (TaskClientSlot& c : header()->clients) c.bell.Ring();
}

// ---- coordinator
// ------------------------------------------------------------------

absl::StatusOr<uint32_t> TaskTable::AddWorker(pid_t pid, uint32_t cpus,
                                              uint32_t gpus, uint32_t actor) {
  SHOAL_ASSIGN_OR_RETURN(Op op, Op::Begin(this));
  for (uint32_t w = 0; w < kMaxTaskWorkers; ++w) {
    TaskWorkerSlot& s = op.h()->workers[w];
    if (s.in_use) continue;
    op.W32(reinterpret_cast<uint32_t*>(&s.pid), static_cast<uint32_t>(pid));
    op.W32(&s.cpus, cpus);
    op.W32(&s.gpus, gpus);
    op.W32(&s.current, 0);
    op.W32(&s.actor, actor);
    op.W32(&s.in_use, 1);
    return w;
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("at most ", kMaxTaskWorkers, " workers"));
}

absl::Status TaskTable::AddActor(uint32_t actor) {
  if (actor == 0) return absl::InvalidArgumentError("actor ids start at 1");
  SHOAL_ASSIGN_OR_RETURN(Op op, Op::Begin(this));
  uint32_t reuse = kMaxResourceClasses;
  for (uint32_t k = 0; k < op.h()->num_classes; ++k) {
    const ResourceClass& c = op.h()->classes[k];
    if (c.actor == actor)
      return absl::AlreadyExistsError(absl::StrCat("actor ", actor));
    if (c.actor != 0 && c.actor_ended && c.depth == 0) reuse = k;
  }
  uint32_t k = reuse;
  if (k == kMaxResourceClasses) {
    if (op.h()->num_classes >= kMaxResourceClasses) {
      return absl::ResourceExhaustedError(
          absl::StrCat("too many actors and distinct resource requests (",
                       kMaxResourceClasses, " at most)"));
    }
    k = op.h()->num_classes;
  }
  ResourceClass& c = op.h()->classes[k];
  op.W32(&c.cpus, 0);
  op.W32(&c.gpus, 0);
  op.W32(&c.head, 0);
  op.W32(&c.tail, 0);
  op.W32(&c.depth, 0);
  op.W32(&c.actor, actor);
  op.W32(&c.actor_ended, 0);
  if (k == op.h()->num_classes) op.W32(&op.h()->num_classes, k + 1);
  return absl::OkStatus();
}

absl::Status TaskTable::EndActor(uint32_t actor, int32_t code,
                                 absl::string_view result) {
  std::vector<uint32_t> ring;
  {
    SHOAL_ASSIGN_OR_RETURN(Op op, Op::Begin(this));
    uint32_t k = 0;
    while (k < op.h()->num_classes && op.h()->classes[k].actor != actor) ++k;
    if (actor == 0 || k == op.h()->num_classes)
      return absl::NotFoundError(absl::StrCat("no actor ", actor));
    ResourceClass& c = op.h()->classes[k];
    op.W32(&c.actor_ended, 1);
    op.Checkpoint();
    while (c.head != 0) {
      const uint32_t i = c.head - 1;
      op.Unlink(i);
      SHOAL_ASSIGN_OR_RETURN(const uint32_t owner, op.Finish(i, code, result));
      op.Checkpoint();
      if (owner != 0) ring.push_back(owner);
    }
  }
  for (uint32_t owner : ring) RingClient(owner - 1);
  return absl::OkStatus();
}

absl::Status TaskTable::RemoveWorker(uint32_t worker) {
  if (worker >= kMaxTaskWorkers)
    return absl::InvalidArgumentError("bad worker slot");
  SHOAL_ASSIGN_OR_RETURN(Op op, Op::Begin(this));
  TaskWorkerSlot& s = op.h()->workers[worker];
  op.W32(&s.current, 0);
  op.W32(&s.actor, 0);
  op.W32(&s.in_use, 0);
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> TaskTable::AddClient(pid_t pid, int32_t store_slot) {
  SHOAL_ASSIGN_OR_RETURN(Op op, Op::Begin(this));
  for (uint32_t c = 0; c < kMaxTaskClients; ++c) {
    TaskClientSlot& s = op.h()->clients[c];
    if (s.in_use) continue;
    op.W32(reinterpret_cast<uint32_t*>(&s.pid), static_cast<uint32_t>(pid));
    op.W32(&s.store_slot, static_cast<uint32_t>(store_slot + 1));
    op.W32(&s.in_use, 1);
    return c;
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("at most ", kMaxTaskClients, " local clients per node"));
}

absl::StatusOr<std::vector<std::string>> TaskTable::RemoveClient(
    uint32_t client) {
  if (client >= kMaxTaskClients)
    return absl::InvalidArgumentError("bad client slot");
  std::vector<std::string> results;
  SHOAL_ASSIGN_OR_RETURN(Op op, Op::Begin(this));
  for (uint32_t i = 0; i < op.h()->max_tasks; ++i) {
    TaskEntry* x = op.e(i);
    if (x->owner != client + 1) continue;
    const auto state =
        static_cast<TaskState>(x->state.load(std::memory_order_relaxed));
    if (state == TaskState::kQueued) {
      op.Unlink(i);
      op.FreeEntry(i);
    } else if (state == TaskState::kDone) {
      results.push_back(
          op.ReadPayload(x->result_bytes, x->result_chunk, x->inline_result));
      op.FreeEntry(i);
    } else if (state == TaskState::kRunning) {
      op.WA32(&x->flags,
              x->flags.load() | kTaskCancelRequested | kTaskReleaseWhenDone);
      op.W32(&x->owner, 0);
    }
    op.Checkpoint();
  }
  op.W32(&op.h()->clients[client].in_use, 0);
  return results;
}

absl::StatusOr<TaskWorkerCounters> TaskTable::WorkerCounters(
    uint32_t worker) const {
  if (worker >= kMaxTaskWorkers)
    return absl::InvalidArgumentError("bad worker slot");
  const TaskWorkerSlot& s = header()->workers[worker];
  TaskWorkerCounters c;
  c.done = __atomic_load_n(&s.done, __ATOMIC_RELAXED);
  c.failed = __atomic_load_n(&s.failed, __ATOMIC_RELAXED);
  c.busy = RelaxedLoad(&s.current) != 0;
  return c;
}

std::optional<uint64_t> TaskTable::RunningOn(uint32_t worker) const {
  const uint32_t cur = RelaxedLoad(&header()->workers[worker].current);
  if (cur == 0) return std::nullopt;
  return MakeTaskId(entry(cur - 1)->generation, cur - 1);
}

absl::StatusOr<bool> TaskTable::FailRunning(uint32_t worker, int32_t code,
                                            absl::string_view result) {
  std::vector<uint32_t> ring_owners;
  bool requeued_all = true;
  bool requeued_any = false;
  {
    SHOAL_ASSIGN_OR_RETURN(Op op, Op::Begin(this));
    TaskWorkerSlot& s = op.h()->workers[worker];
    if (s.current == 0)
      return absl::NotFoundError("the worker was running no task");
    // The worker's stack of tasks (ClaimNested), top first: each pop is one
    // journaled step, so a coordinator dying midway leaves a shorter stack.
    for (uint32_t popped = 0;
         s.current != 0 && s.current <= op.h()->max_tasks &&
         popped < op.h()->max_tasks;
         ++popped) {
      const uint32_t i = s.current - 1;
      TaskEntry* x = op.e(i);
      op.W32(&s.current, x->below);
      op.W32(&x->below, 0);
      op.W64(&s.failed, s.failed + 1);
      const bool cancelled = x->flags.load() & kTaskCancelRequested;
      if (!cancelled && x->attempts <= x->max_retries) {
        op.W32(&x->worker, 0);
        op.Enqueue(i, /*at_head=*/true);
        requeued_any = true;
      } else {
        SHOAL_ASSIGN_OR_RETURN(const uint32_t owner,
                               op.Finish(i, code, result));
        if (owner != 0) ring_owners.push_back(owner);
        requeued_all = false;
      }
      op.Checkpoint();
    }
  }
  if (requeued_any) WakeAllWorkers();
  for (uint32_t owner : ring_owners) RingClient(owner - 1);
  return requeued_all;
}

absl::Status TaskTable::CompleteFor(uint32_t worker, int32_t code,
                                    absl::string_view result) {
  std::optional<uint64_t> id = RunningOn(worker);
  if (!id) return absl::NotFoundError("the worker was running no task");
  return Complete(worker, *id, code, result);
}

std::vector<ExpiredTask> TaskTable::Expired(int64_t now_ns) const {
  std::vector<ExpiredTask> out;
  for (uint32_t w = 0; w < kMaxTaskWorkers; ++w) {
    // Every task of the worker's stack (ClaimNested), read without the
    // lock: bounded, in case it changes under us.
    uint32_t cur = RelaxedLoad(&header()->workers[w].current);
    const uint32_t max_tasks = header()->max_tasks;
    for (uint32_t seen = 0; cur != 0 && cur <= max_tasks && seen < max_tasks;
         ++seen) {
      const TaskEntry* x = entry(cur - 1);
      const int64_t timeout = __atomic_load_n(&x->timeout_ns, __ATOMIC_RELAXED);
      const int64_t started = __atomic_load_n(&x->started_ns, __ATOMIC_RELAXED);
      if (timeout > 0 && now_ns - started > timeout &&
          !(x->flags.load(std::memory_order_relaxed) & kTaskTimedOut)) {
        out.push_back({MakeTaskId(RelaxedLoad(&x->generation), cur - 1), w,
                       absl::Nanoseconds(now_ns - started - timeout)});
      }
      cur = RelaxedLoad(&x->below);
    }
  }
  return out;
}

absl::Status TaskTable::Expire(uint64_t id) {
  SHOAL_ASSIGN_OR_RETURN(Op op, Op::Begin(this));
  SHOAL_ASSIGN_OR_RETURN(const uint32_t i, op.Live(id));
  TaskEntry* x = op.e(i);
  if (static_cast<TaskState>(x->state.load()) != TaskState::kRunning) {
    return absl::FailedPreconditionError("the task is not running");
  }
  op.WA32(&x->flags, x->flags.load() | kTaskCancelRequested | kTaskTimedOut);
  return absl::OkStatus();
}

absl::Status TaskTable::SetClientStoreSlot(uint32_t client,
                                           int32_t store_slot) {
  if (client >= kMaxTaskClients)
    return absl::InvalidArgumentError("bad client slot");
  SHOAL_ASSIGN_OR_RETURN(Op op, Op::Begin(this));
  op.W32(&op.h()->clients[client].store_slot,
         static_cast<uint32_t>(store_slot + 1));
  return absl::OkStatus();
}

absl::StatusOr<TaskTableStats> TaskTable::Stats() {
  SHOAL_ASSIGN_OR_RETURN(Op op, Op::Begin(this));
  TaskTableStats st;
  st.submitted = op.h()->submitted;
  st.completed = op.h()->completed;
  st.queued = op.h()->queued;
  for (const TaskWorkerSlot& w : op.h()->workers)
    st.running += w.in_use && w.current != 0;
  st.free_entries = op.h()->free_entry_count;
  st.free_chunks = op.h()->free_chunk_count;
  st.done_untaken =
      op.h()->max_tasks - st.free_entries - st.queued - st.running;
  return st;
}

}  // namespace shoal::tasks
