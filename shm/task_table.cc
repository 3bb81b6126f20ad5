#include "shm/task_table.h"

#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "ipc/process_info.h"
#include "ipc/status_macros.h"
#include "shm/robust_lock.h"

namespace shoal::shm {
namespace {

constexpr uint32_t kMaxPayloadChunks = 8;  // ≤ ~512 KiB per task payload

int64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

uint32_t RelaxedLoad(const uint32_t* p) {
  return __atomic_load_n(p, __ATOMIC_RELAXED);
}

void (*g_fault_hook)(const char*) = nullptr;
inline void FaultPoint(const char* point) {
  if (g_fault_hook != nullptr) g_fault_hook(point);
}

}  // namespace

// One operation on the table: holds the lock and journals every write, so a
// process dying inside it leaves the table as it was before it began.
class TaskTable::Op {
 public:
  static absl::StatusOr<Op> Begin(const TaskTable* t) {
    SHOAL_ASSIGN_OR_RETURN(
        LockGuard guard,
        LockGuard::Acquire(t->segment_->base(), &t->header()->lock,
                           t->lock_timeout_, "task table"));
    return Op(t, std::move(guard));
  }

  // Ends the current journal transaction and starts the next (for long scans
  // that must not overflow the journal).
  void Checkpoint() {
    journal_.reset();
    journal_ = std::make_unique<JournaledWriter>(t_->segment_->base(),
                                                 &h()->lock.journal);
  }

  void W32(uint32_t* f, uint32_t v) { journal_->Write32(f, v); }
  void W64(uint64_t* f, uint64_t v) { journal_->Write64(f, v); }
  void WA32(std::atomic<uint32_t>* f, uint32_t v) {
    journal_->WriteAtomic32(f, v);
  }

  TaskSegmentHeader* h() const { return t_->header(); }
  TaskEntry* e(uint32_t i) const { return t_->entry(i); }
  ChunkHeader* c(uint32_t i) const {
    return reinterpret_cast<ChunkHeader*>(t_->chunk(i));
  }

  // The entry of a live (non-free) task id, or NotFound.
  absl::StatusOr<uint32_t> Live(uint64_t id) const {
    const uint32_t i = TaskIndex(id);
    if (i >= h()->max_tasks || e(i)->generation != TaskGeneration(id) ||
        e(i)->state.load(std::memory_order_relaxed) ==
            static_cast<uint32_t>(TaskState::kFree)) {
      return absl::NotFoundError(
          absl::StrCat("no task ", id, " (unknown or released)"));
    }
    return i;
  }

  absl::StatusOr<uint32_t> ClassFor(uint32_t cpus, uint32_t gpus) {
    for (uint32_t k = 0; k < h()->num_classes; ++k) {
      if (h()->classes[k].cpus == cpus && h()->classes[k].gpus == gpus)
        return k;
    }
    if (h()->num_classes >= kMaxResourceClasses) {
      return absl::ResourceExhaustedError(
          "too many distinct resource requests (16 at most)");
    }
    const uint32_t k = h()->num_classes;
    W32(&h()->classes[k].cpus, cpus);
    W32(&h()->classes[k].gpus, gpus);
    W32(&h()->num_classes, k + 1);
    return k;
  }

  absl::StatusOr<uint32_t> AllocEntry() {
    const uint32_t top = h()->free_entries;
    if (top == 0) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the task table is full (", h()->max_tasks,
                       " tasks queued, running or finished and not yet taken); "
                       "wait for results "
                       "and release them"));
    }
    TaskEntry* x = e(top - 1);
    W32(&h()->free_entries, x->next);
    W32(&x->generation, x->generation + 1);
    return top - 1;
  }

  void FreeEntry(uint32_t i) {
    TaskEntry* x = e(i);
    FreeChain(&x->args_chunk);
    FreeChain(&x->result_chunk);
    WA32(&x->state, static_cast<uint32_t>(TaskState::kFree));
    WA32(&x->flags, 0);
    W32(&x->owner, 0);
    W32(&x->worker, 0);
    W32(&x->next, h()->free_entries);
    W32(&h()->free_entries, i + 1);
  }

  // Stores `data` inline or in a chain of chunks.
  absl::Status WritePayload(absl::string_view data, uint32_t* bytes,
                            uint32_t* chunk_head, uint8_t* inline_buf) {
    W32(bytes, static_cast<uint32_t>(data.size()));
    if (data.size() <= kInlinePayloadBytes) {
      std::memcpy(inline_buf, data.data(), data.size());
      W32(chunk_head, 0);
      return absl::OkStatus();
    }
    const uint32_t per_chunk = h()->chunk_bytes - sizeof(ChunkHeader);
    const uint64_t need = (data.size() + per_chunk - 1) / per_chunk;
    if (need > kMaxPayloadChunks) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "a task's encoded arguments or results take ", data.size(),
          " bytes, above the ", kMaxPayloadChunks * per_chunk,
          "-byte limit; put large values in the store"));
    }
    uint32_t prev = 0;
    size_t off = 0;
    for (uint64_t n = 0; n < need; ++n) {
      const uint32_t top = h()->free_chunks;
      if (top == 0) {
        return absl::ResourceExhaustedError(
            "no free payload chunks (too many large tasks in flight)");
      }
      ChunkHeader* ch = c(top - 1);
      W32(&h()->free_chunks, ch->next);
      const size_t len = std::min<size_t>(per_chunk, data.size() - off);
      std::memcpy(reinterpret_cast<uint8_t*>(ch) + sizeof(ChunkHeader),
                  data.data() + off, len);
      off += len;
      W32(&ch->bytes, static_cast<uint32_t>(len));
      W32(&ch->next, 0);
      if (prev == 0) {
        W32(chunk_head, top);
      } else {
        W32(&c(prev - 1)->next, top);
      }
      prev = top;
    }
    return absl::OkStatus();
  }

  std::string ReadPayload(uint32_t bytes, uint32_t chunk_head,
                          const uint8_t* inline_buf) const {
    if (chunk_head == 0) {
      return std::string(reinterpret_cast<const char*>(inline_buf),
                         std::min<uint32_t>(bytes, kInlinePayloadBytes));
    }
    std::string out;
    out.reserve(bytes);
    for (uint32_t k = chunk_head; k != 0 && out.size() < bytes;) {
      const ChunkHeader* ch = c(k - 1);
      out.append(reinterpret_cast<const char*>(ch) + sizeof(ChunkHeader),
                 ch->bytes);
      k = ch->next;
    }
    return out;
  }

  void FreeChain(uint32_t* head) {
    for (uint32_t k = *head; k != 0;) {
      ChunkHeader* ch = c(k - 1);
      const uint32_t next = ch->next;
      W32(&ch->next, h()->free_chunks);
      W32(&h()->free_chunks, k);
      k = next;
    }
    W32(head, 0);
  }

  void Enqueue(uint32_t i, bool at_head) {
    TaskEntry* x = e(i);
    ResourceClass& k = h()->classes[x->klass];
    WA32(&x->state, static_cast<uint32_t>(TaskState::kQueued));
    if (at_head) {
      W32(&x->next, k.head);
      W32(&k.head, i + 1);
      if (k.tail == 0) W32(&k.tail, i + 1);
    } else {
      W32(&x->next, 0);
      if (k.tail == 0) {
        W32(&k.head, i + 1);
      } else {
        W32(&e(k.tail - 1)->next, i + 1);
      }
      W32(&k.tail, i + 1);
    }
    W32(&k.depth, k.depth + 1);
    W32(&h()->queued, h()->queued + 1);
  }

  // Removes queued entry `i` from its FIFO.
  void Unlink(uint32_t i) {
    TaskEntry* x = e(i);
    ResourceClass& k = h()->classes[x->klass];
    uint32_t prev = 0;
    for (uint32_t cur = k.head; cur != 0 && cur != i + 1;
         cur = e(cur - 1)->next)
      prev = cur;
    if (prev == 0) {
      W32(&k.head, x->next);
    } else {
      W32(&e(prev - 1)->next, x->next);
    }
    if (k.tail == i + 1) W32(&k.tail, prev);
    W32(&x->next, 0);
    W32(&k.depth, k.depth - 1);
    W32(&h()->queued, h()->queued - 1);
  }

  // Writes the result and marks `i` done, or frees it at once if its owner
  // released it or is gone. Returns the owner slot + 1 to ring (0: none).
  absl::StatusOr<uint32_t> Finish(uint32_t i, int32_t code,
                                  absl::string_view result) {
    TaskEntry* x = e(i);
    FreeChain(&x->args_chunk);
    W32(&x->args_bytes, 0);
    const uint32_t owner = x->owner;
    W32(&x->worker, 0);
    W64(&h()->completed, h()->completed + 1);
    if (x->flags.load(std::memory_order_relaxed) & kTaskReleaseWhenDone) {
      FreeEntry(i);
      return 0;
    }
    if (x->flags.load(std::memory_order_relaxed) & kTaskTimedOut) {
      // Whatever the worker ended with, a task stopped by its deadline failed
      // with DeadlineExceeded (the owner composes the message).
      code = static_cast<int32_t>(absl::StatusCode::kDeadlineExceeded);
      result = "";
    }
    absl::Status s = WritePayload(result, &x->result_bytes, &x->result_chunk,
                                  x->inline_result);
    if (!s.ok()) {
      // The result does not fit: the task fails with that reason instead.
      const std::string why(s.message());
      code = static_cast<int32_t>(s.code());
      SHOAL_RETURN_IF_ERROR(WritePayload(why.substr(0, kInlinePayloadBytes),
                                         &x->result_bytes, &x->result_chunk,
                                         x->inline_result));
    }
    W32(reinterpret_cast<uint32_t*>(&x->result_code),
        static_cast<uint32_t>(code));
    WA32(&x->state, static_cast<uint32_t>(TaskState::kDone));
    if (owner != 0) {
      TaskClientSlot& cs = h()->clients[owner - 1];
      W64(&cs.completed, cs.completed + 1);
    }
    return owner;
  }

 private:
  Op(const TaskTable* t, LockGuard guard)
      : t_(t),
        guard_(std::make_unique<LockGuard>(std::move(guard))),
        journal_(std::make_unique<JournaledWriter>(
            t->segment_->base(), &t->header()->lock.journal)) {}

 public:
  Op(Op&&) = default;
  ~Op() {
    journal_.reset();  // commit before unlocking
    guard_.reset();
  }

 private:
  const TaskTable* t_;
  std::unique_ptr<LockGuard> guard_;
  std::unique_ptr<JournaledWriter> journal_;
};

// ---- construction
// ---------------------------------------------------------------

TaskTable::TaskTable(std::unique_ptr<Segment> segment,
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
  const uint64_t entries_offset = AlignUp(sizeof(TaskSegmentHeader), kPageSize);
  const uint64_t chunks_offset = AlignUp(
      entries_offset + uint64_t{o.max_tasks} * sizeof(TaskEntry), kPageSize);
  const uint64_t bytes = chunks_offset + uint64_t{o.max_chunks} * kChunkBytes;
  SHOAL_ASSIGN_OR_RETURN(std::unique_ptr<Segment> seg,
                         Segment::Create(SegmentNameForJob(job_id), bytes));
  seg->InitPrefix(job_id, kTaskLayoutVersion, sizeof(TaskSegmentHeader));
  auto* h = reinterpret_cast<TaskSegmentHeader*>(seg->base());
  h->max_tasks = o.max_tasks;
  h->max_chunks = o.max_chunks;
  h->chunk_bytes = kChunkBytes;
  h->entries_offset = entries_offset;
  h->chunks_offset = chunks_offset;
  SHOAL_RETURN_IF_ERROR(InitRobustLock(&h->lock));
  Segment* segment = seg.get();
  std::unique_ptr<TaskTable> t(new TaskTable(std::move(seg), o.lock_timeout));
  // Free lists: entries and chunks in index order (low ones first keeps the
  // touched pages few).
  for (uint32_t i = 0; i < o.max_tasks; ++i) {
    t->entry(i)->next = i + 1 < o.max_tasks ? i + 2 : 0;
  }
  h->free_entries = 1;
  for (uint32_t i = 0; i < o.max_chunks; ++i) {
    reinterpret_cast<ChunkHeader*>(t->chunk(i))->next =
        i + 1 < o.max_chunks ? i + 2 : 0;
  }
  h->free_chunks = 1;
  segment->Publish(kTaskSegmentMagic);
  return t;
}

absl::StatusOr<std::unique_ptr<TaskTable>> TaskTable::Open(
    const std::string& segment_name, absl::Duration lock_timeout) {
  SHOAL_ASSIGN_OR_RETURN(
      std::unique_ptr<Segment> seg,
      Segment::Open(segment_name, kTaskSegmentMagic, kTaskLayoutVersion));
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
                                              uint32_t gpus) {
  SHOAL_ASSIGN_OR_RETURN(Op op, Op::Begin(this));
  for (uint32_t w = 0; w < kMaxTaskWorkers; ++w) {
    TaskWorkerSlot& s = op.h()->workers[w];
    if (s.in_use) continue;
    op.W32(reinterpret_cast<uint32_t*>(&s.pid), static_cast<uint32_t>(pid));
    op.W32(&s.cpus, cpus);
    op.W32(&s.gpus, gpus);
    op.W32(&s.current, 0);
    op.W32(&s.in_use, 1);
    return w;
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("at most ", kMaxTaskWorkers, " workers"));
}

absl::Status TaskTable::RemoveWorker(uint32_t worker) {
  if (worker >= kMaxTaskWorkers)
    return absl::InvalidArgumentError("bad worker slot");
  SHOAL_ASSIGN_OR_RETURN(Op op, Op::Begin(this));
  TaskWorkerSlot& s = op.h()->workers[worker];
  op.W32(&s.current, 0);
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
  uint32_t ring_owner = 0;
  bool requeued = false;
  {
    SHOAL_ASSIGN_OR_RETURN(Op op, Op::Begin(this));
    TaskWorkerSlot& s = op.h()->workers[worker];
    if (s.current == 0)
      return absl::NotFoundError("the worker was running no task");
    const uint32_t i = s.current - 1;
    TaskEntry* x = op.e(i);
    op.W32(&s.current, 0);
    op.W64(&s.failed, s.failed + 1);
    const bool cancelled = x->flags.load() & kTaskCancelRequested;
    if (!cancelled && x->attempts <= x->max_retries) {
      op.W32(&x->worker, 0);
      op.Enqueue(i, /*at_head=*/true);
      requeued = true;
    } else {
      SHOAL_ASSIGN_OR_RETURN(ring_owner, op.Finish(i, code, result));
    }
  }
  if (requeued) WakeAllWorkers();
  if (ring_owner != 0) ClientBell(ring_owner - 1).Ring();
  return requeued;
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
    const uint32_t cur = RelaxedLoad(&header()->workers[w].current);
    if (cur == 0) continue;
    const TaskEntry* x = entry(cur - 1);
    const int64_t timeout = __atomic_load_n(&x->timeout_ns, __ATOMIC_RELAXED);
    const int64_t started = __atomic_load_n(&x->started_ns, __ATOMIC_RELAXED);
    if (timeout > 0 && now_ns - started > timeout &&
        !(x->flags.load(std::memory_order_relaxed) & kTaskTimedOut)) {
      out.push_back({MakeTaskId(x->generation, cur - 1), w,
                     absl::Nanoseconds(now_ns - started - timeout)});
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
  for (uint32_t k = op.h()->free_entries; k != 0; k = op.e(k - 1)->next)
    ++st.free_entries;
  for (uint32_t k = op.h()->free_chunks; k != 0; k = op.c(k - 1)->next)
    ++st.free_chunks;
  st.done_untaken =
      op.h()->max_tasks - st.free_entries - st.queued - st.running;
  return st;
}

// ---- clients
// ------------------------------------------------------------------------

absl::StatusOr<std::vector<uint64_t>> TaskTable::Submit(
    uint32_t client, absl::Span<const TaskSubmission> tasks) {
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
  std::vector<uint64_t> ids;
  ids.reserve(tasks.size());
  std::vector<uint32_t> classes;
  {
    SHOAL_ASSIGN_OR_RETURN(Op op, Op::Begin(this));
    if (op.h()->prefix.closed.load())
      return absl::UnavailableError("the coordinator has shut down");
    if (!op.h()->clients[client].in_use) {
      return absl::FailedPreconditionError(
          "this client is not registered with the coordinator");
    }
    for (const TaskSubmission& t : tasks) {
      SHOAL_ASSIGN_OR_RETURN(const uint32_t k, op.ClassFor(t.cpus, t.gpus));
      SHOAL_ASSIGN_OR_RETURN(const uint32_t i, op.AllocEntry());
      TaskEntry* x = op.e(i);
      std::memset(x->function, 0, kFunctionNameBytes);
      std::memcpy(x->function, t.function.data(), t.function.size());
      op.W32(&x->owner, client + 1);
      op.W32(&x->worker, 0);
      op.W32(&x->klass, k);
      op.W32(&x->attempts, 0);
      op.W32(&x->max_retries, t.max_retries);
      op.WA32(&x->flags, 0);
      op.W64(reinterpret_cast<uint64_t*>(&x->timeout_ns),
             static_cast<uint64_t>(t.timeout_ns));
      op.W64(&x->seq, op.h()->next_seq);
      op.W64(&op.h()->next_seq, op.h()->next_seq + 1);
      op.W32(&x->result_bytes, 0);
      op.W32(&x->result_chunk, 0);
      absl::Status s = op.WritePayload(t.args, &x->args_bytes, &x->args_chunk,
                                       x->inline_args);
      if (!s.ok()) {
        // This task is dropped; the ones before it stay submitted.
        op.FreeEntry(i);
        op.Checkpoint();
        if (ids.empty()) return s;
        return absl::Status(
            s.code(), absl::StrCat(s.message(), " (the first ", ids.size(),
                                   " tasks of the batch were submitted)"));
      }
      FaultPoint("submit:before-enqueue");
      op.Enqueue(i, /*at_head=*/false);
      FaultPoint("submit:after-enqueue");
      op.W64(&op.h()->submitted, op.h()->submitted + 1);
      op.W64(&op.h()->clients[client].submitted,
             op.h()->clients[client].submitted + 1);
      op.Checkpoint();
      ids.push_back(MakeTaskId(x->generation, i));
      classes.push_back(k);
    }
  }
  header()->enqueues.fetch_add(ids.size(), std::memory_order_seq_cst);
  // Wake sleeping workers that can run these, one per task.
  size_t to_wake = ids.size();
  for (uint32_t w = 0; w < kMaxTaskWorkers && to_wake > 0; ++w) {
    TaskWorkerSlot& s = header()->workers[w];
    if (!RelaxedLoad(&s.in_use) ||
        s.bell.sleepers.load(std::memory_order_seq_cst) == 0)
      continue;
    s.bell.Ring();
    --to_wake;
  }
  return ids;
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

absl::StatusOr<TaskOutcome> TaskTable::Take(uint32_t client, uint64_t id,
                                            bool release) {
  SHOAL_ASSIGN_OR_RETURN(Op op, Op::Begin(this));
  SHOAL_ASSIGN_OR_RETURN(const uint32_t i, op.Live(id));
  TaskEntry* x = op.e(i);
  if (x->owner != client + 1) {
    return absl::PermissionDeniedError(
        absl::StrCat("task ", id, " belongs to another client"));
  }
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
  if (release) op.FreeEntry(i);
  return out;
}

absl::Status TaskTable::Release(uint32_t client, uint64_t id) {
  SHOAL_ASSIGN_OR_RETURN(Op op, Op::Begin(this));
  SHOAL_ASSIGN_OR_RETURN(const uint32_t i, op.Live(id));
  TaskEntry* x = op.e(i);
  if (x->owner != client + 1) {
    return absl::PermissionDeniedError(
        absl::StrCat("task ", id, " belongs to another client"));
  }
  switch (static_cast<TaskState>(x->state.load())) {
    case TaskState::kQueued:
      op.Unlink(i);
      op.FreeEntry(i);
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
      SHOAL_ASSIGN_OR_RETURN(
          ring_owner,
          op.Finish(i, static_cast<int32_t>(absl::StatusCode::kCancelled), ""));
    } else if (was == TaskState::kRunning) {
      op.WA32(&x->flags, x->flags.load() | kTaskCancelRequested);
    }
  }
  if (ring_owner != 0) ClientBell(ring_owner - 1).Ring();
  return was;
}

// ---- workers
// ------------------------------------------------------------------------

absl::StatusOr<std::optional<TaskClaim>> TaskTable::Claim(uint32_t worker) {
  if (worker >= kMaxTaskWorkers)
    return absl::InvalidArgumentError("bad worker slot");
  SHOAL_ASSIGN_OR_RETURN(Op op, Op::Begin(this));
  if (op.h()->prefix.closed.load())
    return absl::UnavailableError("the coordinator has shut down");
  TaskWorkerSlot& s = op.h()->workers[worker];
  if (op.h()->queued == 0) return std::nullopt;
  uint32_t best = kMaxResourceClasses;
  uint64_t best_seq = ~uint64_t{0};
  for (uint32_t k = 0; k < op.h()->num_classes; ++k) {
    const ResourceClass& c = op.h()->classes[k];
    if (c.head == 0 || c.cpus > s.cpus || c.gpus > s.gpus) continue;
    const uint64_t seq = op.e(c.head - 1)->seq;
    if (seq < best_seq) {
      best_seq = seq;
      best = k;
    }
  }
  if (best == kMaxResourceClasses) return std::nullopt;
  const uint32_t i = op.h()->classes[best].head - 1;
  op.Unlink(i);
  TaskEntry* x = op.e(i);
  op.WA32(&x->state, static_cast<uint32_t>(TaskState::kRunning));
  op.W32(&x->worker, worker + 1);
  op.W32(&x->attempts, x->attempts + 1);
  op.W64(reinterpret_cast<uint64_t*>(&x->started_ns),
         static_cast<uint64_t>(MonotonicNs()));
  FaultPoint("claim:before-assign");
  op.W32(&s.current, i + 1);
  TaskClaim claim;
  claim.id = MakeTaskId(x->generation, i);
  claim.function = x->function;
  claim.args = op.ReadPayload(x->args_bytes, x->args_chunk, x->inline_args);
  claim.attempt = x->attempts;
  claim.timeout_ns = x->timeout_ns;
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
    op.W32(&s.current, 0);
    if (code == 0) {
      op.W64(&s.done, s.done + 1);
    } else {
      op.W64(&s.failed, s.failed + 1);
    }
    FaultPoint("complete:before-finish");
    SHOAL_ASSIGN_OR_RETURN(ring_owner, op.Finish(i, code, result));
    FaultPoint("complete:after-finish");
  }
  if (ring_owner != 0) ClientBell(ring_owner - 1).Ring();
  return absl::OkStatus();
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
      if (RelaxedLoad(&c.depth) > 0 && RelaxedLoad(&c.cpus) <= s.cpus &&
          RelaxedLoad(&c.gpus) <= s.gpus) {
        return true;
      }
    }
    return false;
  };
  if (runnable()) return;
  // Spin, yielding the CPU: another process on this core runs at once, and a
  // task submitted meanwhile is picked up without a wake-up (a futex wake-up
  // costs ~20 µs here; the yield loop ~3 µs).
  const absl::Time spin_until = absl::Now() + spin;
  const uint64_t seen = h->enqueues.load(std::memory_order_relaxed);
  while (absl::Now() < spin_until) {
    if (h->enqueues.load(std::memory_order_relaxed) != seen && runnable())
      return;
    sched_yield();
  }
  const uint32_t armed = s.bell.Arm();
  if (!runnable()) s.bell.Sleep(armed, timeout);
  s.bell.Disarm();
}

void TaskTable::SetFaultHookForTesting(void (*hook)(const char*)) {
  g_fault_hook = hook;
}

void TaskTable::WakeAllWorkers() {
  for (TaskWorkerSlot& s : header()->workers) s.bell.Ring();
}

}  // namespace shoal::shm
