// Internal to the task table: the journaled operation every verb runs inside,
// shared by task_table.cc (construction, coordinator verbs) and
// task_table_verbs.cc (client and worker verbs). Not part of the public API.
#ifndef SHOAL_TASKS_TASK_TABLE_OP_H_
#define SHOAL_TASKS_TASK_TABLE_OP_H_

#include <time.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "shm/robust_lock.h"
#include "tasks/task_table.h"

namespace shoal::tasks {
namespace task_table_internal {

constexpr uint32_t kMaxPayloadChunks = 8;  // ≤ ~512 KiB per task payload

inline uint32_t RelaxedLoad(const uint32_t* p) {
  return __atomic_load_n(p, __ATOMIC_RELAXED);
}

// Set by TaskTable::SetFaultHookForTesting; called at the named points so a
// test can kill the process in the middle of an operation.
extern void (*g_fault_hook)(const char*);
inline void FaultPoint(const char* point) {
  if (g_fault_hook != nullptr) g_fault_hook(point);
}

}  // namespace task_table_internal

// One operation on the table: holds the lock and journals every write, so a
// process dying inside it leaves the table as it was before it began.
class TaskTable::Op {
 public:
  static absl::StatusOr<Op> Begin(const TaskTable* t) {
    SHOAL_ASSIGN_OR_RETURN(
        shm::LockGuard guard,
        shm::LockGuard::Acquire(t->segment_->base(), &t->header()->lock,
                                t->lock_timeout_, "task table"));
    Op op(t, std::move(guard));
    // A Submit that died between the tasks of its batch: take them back out
    // before anyone sees the table.
    if (op.h()->batch.active != 0) op.RollBackBatch();
    return op;
  }

  // Ends the current journal transaction and starts the next (for long scans
  // that must not overflow the journal).
  void Checkpoint() {
    journal_.reset();
    journal_ = std::make_unique<shm::JournaledWriter>(t_->segment_->base(),
                                                      &h()->lock.journal);
  }

  // Undoes the writes since the last Checkpoint (a step that failed midway)
  // and starts the next step.
  void AbortStep() {
    shm::RollBackJournal(t_->segment_->base(), &h()->lock.journal);
    Checkpoint();
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

  // Live(id), for the client that submitted it only.
  absl::StatusOr<uint32_t> Owned(uint64_t id, uint32_t client) const {
    SHOAL_ASSIGN_OR_RETURN(const uint32_t i, Live(id));
    if (e(i)->owner != client + 1) {
      return absl::PermissionDeniedError(
          absl::StrCat("task ", id, " belongs to another client"));
    }
    return i;
  }

  absl::StatusOr<uint32_t> ClassFor(uint32_t cpus, uint32_t gpus) {
    for (uint32_t k = 0; k < h()->num_classes; ++k) {
      if (h()->classes[k].actor == 0 && h()->classes[k].cpus == cpus &&
          h()->classes[k].gpus == gpus)
        return k;
    }
    if (h()->num_classes >= kMaxResourceClasses) {
      return absl::ResourceExhaustedError(
          absl::StrCat("too many distinct resource requests and actors (",
                       kMaxResourceClasses, " at most)"));
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
    W32(&h()->free_entry_count, h()->free_entry_count - 1);
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
    W32(&h()->free_entry_count, h()->free_entry_count + 1);
  }

  // The chunks a payload of `bytes` takes (0: inline), or ResourceExhausted
  // when it is over the per-task limit.
  absl::StatusOr<uint32_t> ChunksFor(size_t bytes) const {
    if (bytes <= kInlinePayloadBytes) return 0;
    const uint32_t per_chunk = h()->chunk_bytes - sizeof(ChunkHeader);
    const uint64_t need = (bytes + per_chunk - 1) / per_chunk;
    if (need > task_table_internal::kMaxPayloadChunks) {
      return absl::ResourceExhaustedError(
          absl::StrCat("a task's encoded arguments or results take ", bytes,
                       " bytes, above the ",
                       task_table_internal::kMaxPayloadChunks * per_chunk,
                       "-byte limit; put large values in the store"));
    }
    return static_cast<uint32_t>(need);
  }

  // Stores `data` inline or in a chain of chunks. The chain is the top of the
  // free stack as it lies (already linked), so taking it journals two words
  // whatever its length; a chunk's `bytes` is meaningless while it is free,
  // so it is written directly.
  absl::Status WritePayload(absl::string_view data, uint32_t* bytes,
                            uint32_t* chunk_head, uint8_t* inline_buf) {
    SHOAL_ASSIGN_OR_RETURN(const uint32_t need, ChunksFor(data.size()));
    if (need == 0) {
      W32(bytes, static_cast<uint32_t>(data.size()));
      std::memcpy(inline_buf, data.data(), data.size());
      W32(chunk_head, 0);
      return absl::OkStatus();
    }
    const uint32_t per_chunk = h()->chunk_bytes - sizeof(ChunkHeader);
    if (h()->free_chunk_count < need) {
      return absl::ResourceExhaustedError(
          absl::StrCat("no free payload chunks (max_chunks = ", h()->max_chunks,
                       ": too many large tasks in flight)"));
    }
    const uint32_t head = h()->free_chunks;
    uint32_t last = head;
    size_t off = 0;
    for (uint32_t n = 0; n < need; ++n) {
      if (n > 0) last = c(last - 1)->next;
      ChunkHeader* ch = c(last - 1);
      const size_t len = std::min<size_t>(per_chunk, data.size() - off);
      std::memcpy(reinterpret_cast<uint8_t*>(ch) + sizeof(ChunkHeader),
                  data.data() + off, len);
      ch->bytes = static_cast<uint32_t>(len);
      off += len;
    }
    W32(&h()->free_chunks, c(last - 1)->next);
    W32(&h()->free_chunk_count, h()->free_chunk_count - need);
    W32(&c(last - 1)->next, 0);
    W32(bytes, static_cast<uint32_t>(data.size()));
    W32(chunk_head, head);
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

  // Puts a payload's chain back on the free stack whole (two journaled
  // words), so freeing a chain just taken restores the stack as it was.
  void FreeChain(uint32_t* head) {
    if (*head == 0) return;
    uint32_t last = *head;
    uint32_t length = 1;
    while (c(last - 1)->next != 0) {
      last = c(last - 1)->next;
      ++length;
    }
    W32(&c(last - 1)->next, h()->free_chunks);
    W32(&h()->free_chunks, *head);
    W32(&h()->free_chunk_count, h()->free_chunk_count + length);
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
    } else if (k.actor != 0 || k.tail == 0 || e(k.tail - 1)->tag <= x->tag ||
               !InsertByTag(i, k)) {
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

  // Links entry `i` into class `k`'s FIFO after the tasks whose tag is at or
  // below its own (ties keep submission order). REQUIRES: the tail's tag is
  // above `i`'s. False, having changed nothing, when that place is more than
  // kMaxTagWalk entries from the head: the caller appends it, which costs
  // only fairness (claims stay exactly-once whatever the order).
  bool InsertByTag(uint32_t i, ResourceClass& k) {
    static constexpr uint32_t kMaxTagWalk = 256;
    const uint64_t tag = e(i)->tag;
    uint32_t prev = 0, cur = k.head;
    for (uint32_t n = 0; cur != 0 && e(cur - 1)->tag <= tag; ++n) {
      if (n == kMaxTagWalk) return false;
      prev = cur;
      cur = e(cur - 1)->next;
    }
    if (cur == 0) return false;  // the tail's tag was not above it
    W32(&e(i)->next, cur);
    W32(prev == 0 ? &k.head : &e(prev - 1)->next, i + 1);
    return true;
  }

  // The slot of fair-queueing flow `key`, taking a free one (a flow whose
  // work ends by `now_v`) for a flow not seen; nullptr when every slot is
  // another backlogged flow's (or, with `take` false, when `key` has none).
  FairFlow* FindFlow(uint64_t key, uint64_t now_v, bool take) {
    FairQueueing& f = h()->fair;
    FairFlow* spare = nullptr;
    const uint32_t start =
        static_cast<uint32_t>((key * 0x9E3779B97F4A7C15ULL) >> 57);
    for (uint32_t n = 0; n < kFairFlowSlots; ++n) {
      FairFlow& s = f.flows[(start + n) % kFairFlowSlots];
      if (s.key == key) return &s;
      if (spare == nullptr && s.end <= now_v) spare = &s;
      // Keys are overwritten, never cleared: a key is never past a free slot.
      if (s.key == 0) break;
    }
    if (!take || spare == nullptr) return nullptr;
    spare->key = key;
    spare->end = 0;
    spare->cost_ns = 0;
    return spare;
  }

  // The fair-queueing tag of the next task of flow `key` in an ordinary
  // class (task_layout.h: FairQueueing). Written outside the journal.
  uint64_t NextFairTag(uint64_t key) {
    FairQueueing& f = h()->fair;
    const uint64_t now_v = f.vtime / 2;
    FairFlow* flow = FindFlow(key, now_v, /*take=*/true);
    uint64_t tag;
    if (flow == nullptr) {
      // With no slot free (more backlogged flows than slots), after
      // everything queued: first come, first served.
      tag = f.max_tag;
    } else {
      const uint64_t cost = std::max(flow->cost_ns, f.min_cost_ns);
      if (flow->end <= now_v) {
        // Sparse: none of the flow's work waits beyond the virtual time.
        tag = 2 * now_v;
        flow->end = now_v + cost;
      } else {
        tag = 2 * flow->end + 1;
        flow->end += cost;
      }
    }
    f.max_tag = std::max(f.max_tag, tag);
    return tag;
  }

  // Adds a task's run time to its flow's cost (a moving mean of its last
  // few tasks'). Written outside the journal.
  void ChargeFairFlow(uint64_t key, int64_t run_ns) {
    FairFlow* flow = FindFlow(key, h()->fair.vtime / 2, /*take=*/false);
    if (flow == nullptr) return;
    const int64_t run = std::max<int64_t>(0, run_ns);
    const int64_t mean = static_cast<int64_t>(flow->cost_ns);
    flow->cost_ns =
        static_cast<uint64_t>(mean == 0 ? run : mean + (run - mean) / 8);
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

  // Starts a batch of Submit (its own step): records what RollBackBatch
  // restores.
  void BeginBatch(uint32_t client) {
    SubmitBatchRecord& b = h()->batch;
    W32(&b.num_classes, h()->num_classes);
    W64(&b.first_seq, h()->next_seq);
    W64(&b.submitted, h()->submitted);
    W64(&b.client_submitted, h()->clients[client].submitted);
    W32(&b.client, client);
    W32(&b.active, 1);
    Checkpoint();
  }
  // Ends it (its own step): from here on the batch is permanent.
  void EndBatch() {
    W32(&h()->batch.active, 0);
    Checkpoint();
  }
  // Takes an unfinished batch's tasks back out, newest first, so the free
  // stacks, generations, counters and FIFOs are as before it began. Every
  // step leaves a consistent table and the record set until the last, so a
  // death inside is finished by the next locker. REQUIRES: batch.active.
  void RollBackBatch();

 private:
  Op(const TaskTable* t, shm::LockGuard guard)
      : t_(t),
        guard_(std::make_unique<shm::LockGuard>(std::move(guard))),
        journal_(std::make_unique<shm::JournaledWriter>(
            t->segment_->base(), &t->header()->lock.journal)) {}

 public:
  Op(Op&&) = default;
  ~Op() {
    journal_.reset();  // commit before unlocking
    guard_.reset();
  }

 private:
  const TaskTable* t_;
  std::unique_ptr<shm::LockGuard> guard_;
  std::unique_ptr<shm::JournaledWriter> journal_;
};

}  // namespace shoal::tasks

#endif  // SHOAL_TASKS_TASK_TABLE_OP_H_
