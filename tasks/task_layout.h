// The task segment's layout: the node's task queue in shared memory.
//
//   [TaskSegmentHeader: lock, free lists, resource-class FIFOs, worker and
//    client slots with their doorbells]
//   [TaskEntry × max_tasks]
//   [payload chunks × max_chunks]  (arguments and results too big to be inline)
//
// The coordinator creates it; workers and local clients map it and move tasks
// through it directly, so a task's path on one node is client → worker →
// client with no process in between (docs/tasks.md explains why). Every change
// happens under `TaskSegmentHeader::lock` through its undo journal, like the
// store's table, so a process dying mid-operation is rolled back.
#ifndef SHOAL_TASKS_TASK_LAYOUT_H_
#define SHOAL_TASKS_TASK_LAYOUT_H_

#include <atomic>
#include <cstdint>

#include "ipc/task_name.h"
#include "shm/futex.h"
#include "shm/layout.h"

namespace shoal::tasks {

inline constexpr uint64_t kTaskSegmentMagic =
    0x4b5341544c414f48ULL;  // "HOALTASK"
// 5: TaskEntry::account (was reserved). 6: fair queueing (TaskEntry::tag,
// TaskSegmentHeader::fair). 7: the free stacks' lengths
// (TaskSegmentHeader::free_entry_count, free_chunk_count); a journal of
// shm::kMaxUndoRecords = 40. 8: fair queueing by the workers' time
// (FairFlow::end, cost_ns; FairQueueing::min_cost_ns).
inline constexpr uint32_t kTaskLayoutVersion = 8;
// Ordinary classes (distinct cpus/gpus requests) and actor classes (one per
// live actor) together.
inline constexpr uint32_t kMaxResourceClasses = 80;
inline constexpr uint32_t kMaxTaskWorkers = 64;
inline constexpr uint32_t kMaxTaskClients = 64;
// A task's name (ipc/task_name.h) and its NUL.
inline constexpr uint32_t kFunctionNameBytes = ipc::kMaxTaskNameBytes + 1;
inline constexpr uint32_t kInlinePayloadBytes = 160;

enum class TaskState : uint32_t {
  kFree = 0,
  kQueued = 1,   // in its resource class's FIFO
  kRunning = 2,  // claimed by a worker
  kDone = 3,     // result written; waits for its owner to take it
};

// TaskEntry::flags
inline constexpr uint32_t kTaskCancelRequested = 1u << 0;
inline constexpr uint32_t kTaskReleaseWhenDone = 1u
                                                 << 1;  // owner gone/released
inline constexpr uint32_t kTaskTimedOut = 1u << 2;  // cancelled by its deadline

// Tasks needing these resources share one FIFO. An actor's class holds the
// calls to that actor: only the worker slot serving it claims from it, and
// ordinary workers never do.
// Fair queueing across submitters by the workers' time they take
// (start-time fair queueing, Goyal et al., with each task's cost the mean
// run time of its flow's recent tasks, and sparse flows first). A flow is a
// store account where the task has one (the frontend gives one per remote
// principal), else the submitting client slot. Virtual time counts
// nanoseconds of a backlogged flow's work; a task starts at max(virtual
// time, the end of its flow's queued work), and its flow's work then ends
// its cost later. A class's FIFO is kept ordered by tag, and a claim takes
// the lowest tag, so every backlogged flow gets the same share of the
// workers' time, whatever its tasks' length: a flow of 5 ms tasks has one
// task claimed for every hundred of a flow of 50 us ones. A tag counts half
// virtual nanoseconds: a task starting at v is 2v + 1, except the task of a
// sparse flow (no queued work ending after the virtual time), which gets 2v
// and so goes ahead of the backlogged flows' tasks starting then, as
// fq_codel serves new flows first. A flow that uses less than its share (a
// client that submits one short task at a time) is sparse at each submit:
// it waits for a worker, not behind others' backlogs. The virtual time is
// the tag of the task claimed last (its start: half of it). A flow whose
// work ends at or before the virtual time is the same as a flow never seen,
// so its slot can be reused. A flow's cost is at least min_cost_ns, which a
// task shorter than it, and a flow's first task, is charged. These fields
// only order work: a write lost to a rollback changes no task's fate, so
// they are written without the journal.
inline constexpr uint32_t kFairFlowSlots = 128;
struct FairFlow {
  uint64_t key;      // 0: free; see TaskTable::FlowKey
  uint64_t end;      // virtual ns at which the flow's queued work ends
  uint64_t cost_ns;  // moving mean of its tasks' run times; 0: none yet
};
struct FairQueueing {
  uint64_t vtime;        // the tag of the task claimed last
  uint64_t max_tag;      // the highest tag given (for a flow with no slot)
  uint64_t min_cost_ns;  // TaskTableOptions::fair_min_cost
  FairFlow flows[kFairFlowSlots];
};

struct ResourceClass {
  uint32_t cpus;
  uint32_t gpus;
  uint32_t head;  // entry index + 1, 0 = empty
  uint32_t tail;
  uint32_t depth;
  uint32_t actor;        // 0: an ordinary class; else the actor's id
  uint32_t actor_ended;  // 1 once the actor ended: submits are refused
};

struct alignas(64) TaskWorkerSlot {
  uint32_t in_use;
  int32_t pid;
  uint32_t cpus;
  uint32_t gpus;
  // Entry index + 1 of the task it runs, 0 when idle. A task claimed while
  // another waits (ClaimNested) runs on top of it: TaskEntry::below links
  // the stack down, and Complete pops it.
  uint32_t current;
  uint32_t actor;  // 0: claims ordinary tasks; else only this actor's
  // bell.rings as the worker saw it when it last armed to sleep: Submit
  // rings it only if nobody has since (see TaskTable::Submit).
  std::atomic<uint32_t> armed;
  uint64_t done;
  uint64_t failed;
  shm::Doorbell bell;  // rung when work may be available
  // The CPU + 1 the worker ran on when it last claimed a task (0: unknown):
  // a hint for a local client deciding whether to busy-wait for the result
  // (not on its own CPU) or yield. Was padding; not journaled.
  std::atomic<uint32_t> cpu;
};
static_assert(sizeof(TaskWorkerSlot) == 64);

struct alignas(64) TaskClientSlot {
  uint32_t in_use;
  int32_t pid;
  uint32_t store_slot;  // its store client slot + 1 (0: none), for outputs
  // 1 while the client sleeps in a poll loop on an eventfd instead of the
  // bell (TaskTable::ArmClientWakeFd): the process that completes one of
  // its tasks writes that eventfd. Was a reserved zero before; not journaled.
  std::atomic<uint32_t> wake_fd_armed;
  uint64_t submitted;
  uint64_t completed;
  shm::Doorbell bell;  // rung when one of its tasks finished
};

// A Submit of more than one task in progress. The journal holds 32 words, so
// each task of a batch is its own journaled step; this record, set in a step
// of its own before the first task and cleared after the last, makes the
// batch all-or-nothing: whoever takes the lock next and finds it set (its
// Submit died in between) takes the batch's committed tasks back out
// (TaskTable::Op::RollBackBatch). Guarded by the table's lock.
struct SubmitBatchRecord {
  uint32_t active;
  uint32_t num_classes;       // before the batch
  uint64_t first_seq;         // next_seq before it: its tasks have seq >= this
  uint64_t submitted;         // TaskSegmentHeader::submitted before it
  uint64_t client_submitted;  // its client's TaskClientSlot::submitted before
  uint32_t client;
  uint32_t reserved;
};

struct TaskSegmentHeader {
  shm::SegmentPrefix prefix;

  uint32_t max_tasks;
  uint32_t max_chunks;
  uint32_t chunk_bytes;  // including its 8-byte header
  uint32_t reserved1;
  uint64_t entries_offset;
  uint64_t chunks_offset;

  alignas(64) shm::RobustLock lock;
  // Guarded by `lock`:
  uint32_t free_entries;  // stack of free entries, index + 1
  uint32_t free_chunks;   // stack of free chunks, index + 1
  // The stacks' lengths, kept with them (Stats and a batch's room check
  // read these instead of walking a stack of up to max_tasks links).
  uint32_t free_entry_count;
  uint32_t free_chunk_count;
  uint32_t num_classes;
  uint32_t queued;  // tasks in all FIFOs
  uint64_t next_seq;
  uint64_t submitted;
  uint64_t completed;
  SubmitBatchRecord batch;
  ResourceClass classes[kMaxResourceClasses];
  FairQueueing fair;

  // Bumped on every enqueue, read without the lock by workers spinning for
  // work, so they need not touch the lock's cache line while idle.
  alignas(64) std::atomic<uint64_t> enqueues;

  TaskWorkerSlot workers[kMaxTaskWorkers];
  TaskClientSlot clients[kMaxTaskClients];
};

struct TaskEntry {
  std::atomic<uint32_t> state;  // TaskState
  uint32_t generation;          // bumped at each reuse; part of the task id
  uint32_t owner;               // client slot + 1
  uint32_t worker;              // worker slot + 1 while running
  uint32_t klass;               // resource class index
  uint32_t next;                // FIFO / free-list link: entry index + 1
  uint32_t attempts;            // times a worker started it
  uint32_t max_retries;
  std::atomic<uint32_t> flags;
  int32_t result_code;  // absl::StatusCode, when done
  uint64_t seq;         // submission order
  uint64_t tag;         // fair-queueing order (FairQueueing), while queued
  int64_t timeout_ns;   // 0: none
  // CLOCK_MONOTONIC when the current attempt began; while queued, when it
  // was queued (the timeline's queued time).
  int64_t started_ns;
  uint32_t args_bytes;
  uint32_t args_chunk;  // first chunk + 1; 0 = inline
  uint32_t result_bytes;
  uint32_t result_chunk;
  // While running: the entry index + 1 of the task its worker ran before it
  // and returns to when it completes (ClaimNested: a waiting task runs a
  // queued one inline); 0: none.
  uint32_t below;
  // The store account its output objects are charged to (0: none), as
  // submitted. Written at Submit only when it differs from the entry's
  // last use, so a task without an account journals nothing more.
  uint32_t account;
  char function[kFunctionNameBytes];
  uint8_t inline_args[kInlinePayloadBytes];
  uint8_t inline_result[kInlinePayloadBytes];
};

struct ChunkHeader {
  uint32_t
      next;  // next chunk of the same payload (index + 1), or free-list link
  uint32_t bytes;
};

static_assert(sizeof(TaskSegmentHeader) < (64 << 10));
static_assert(std::atomic<uint32_t>::is_always_lock_free);

}  // namespace shoal::tasks

#endif  // SHOAL_TASKS_TASK_LAYOUT_H_
