// Runs by task function: how many a worker started, finished well or with an
// error, and ran again (a retry), with histograms of how long each waited in
// the queue and ran. Each worker keeps a TaskStats and sends its snapshot in
// its heartbeat; the coordinator sums them (TaskStatsSum) into NodeStatus,
// and the metrics endpoint exports the sums (docs/observability.md).
//
// The counts live in the worker's memory, not in shared memory: a process's
// runs since its last heartbeat (at most half a second) are lost with it.
#ifndef SHOAL_OBSERVE_TASK_STATS_H_
#define SHOAL_OBSERVE_TASK_STATS_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
#include "absl/strings/string_view.h"
#include "base/mutex.h"
#include "ipc/messages.h"

namespace shoal::observe {

// The histograms' upper bounds, in microseconds (Prometheus `le`): from a
// no-op task's hand-off to a long training step. A last bucket counts runs
// above the last bound.
inline constexpr std::array<int64_t, 14> kLatencyBoundsUs = {
    25,     100,    250,     1000,    2500,     10000,    25000,
    100000, 250000, 1000000, 2500000, 10000000, 25000000, 100000000};
inline constexpr size_t kLatencyBuckets = kLatencyBoundsUs.size() + 1;

// Distinct names counted, per worker and per node: a function beyond them is
// counted under kOtherTaskName, so that a client naming a new function per
// task cannot grow a worker, the coordinator or the scrape without bound.
inline constexpr size_t kMaxTaskNames = 256;
inline constexpr char kOtherTaskName[] = "(other)";
// The longest name kept; a longer one keeps its last bytes (the end of
// "py:package.module:function" says more).
inline constexpr size_t kMaxTaskNameBytes = 200;

// The name a run of `function` counts under: without an actor's suffix
// ("@actor=<id>"), at most kMaxTaskNameBytes.
absl::string_view TaskStatsName(absl::string_view function);

// The bucket of a duration (kLatencyBuckets - 1 above the last bound).
size_t LatencyBucket(int64_t ns);

// One finished run of a task, as a worker saw it.
struct TaskRun {
  absl::string_view function;  // TaskClaim::function
  uint32_t attempt = 1;        // 1 for a task's first run
  int64_t queued_ns = 0;       // CLOCK_MONOTONIC: queued, claimed, done
  int64_t claimed_ns = 0;
  int64_t end_ns = 0;
  bool ok = true;  // finished without an error
};

// One process's counts. Thread-safe: the worker's thread records, its
// heartbeat thread takes snapshots.
class TaskStats {
 public:
  void Record(const TaskRun& run) ABSL_LOCKS_EXCLUDED(mu_);
  // Every name's counts so far, sorted by name.
  std::vector<wire::TaskNameStats> Snapshot() const ABSL_LOCKS_EXCLUDED(mu_);
  // Runs recorded so far: a heartbeat sends a snapshot only when it moved.
  uint64_t runs() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Entry {
    uint64_t started = 0, succeeded = 0, failed = 0, retried = 0;
    std::array<uint64_t, kLatencyBuckets> run{}, wait{};
    double run_seconds = 0, wait_seconds = 0;
  };
  Entry& EntryFor(absl::string_view name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable Mutex mu_;
  uint64_t runs_ ABSL_GUARDED_BY(mu_) = 0;
  // A node map: `last_` points into it across inserts.
  absl::node_hash_map<std::string, Entry> by_name_ ABSL_GUARDED_BY(mu_);
  // The last name recorded and its entry: a worker often runs one function
  // many times in a row, and then skips the hash.
  std::string last_name_ ABSL_GUARDED_BY(mu_);
  Entry* last_ ABSL_GUARDED_BY(mu_) = nullptr;
};

// The node's sums: each worker process's latest snapshot, plus the last
// snapshots of its earlier processes (a restarted worker starts from 0).
class TaskStatsSum {
 public:
  // Worker `worker`'s process `pid` reports `stats` (its totals so far).
  // Entries malformed (a bucket count other than kLatencyBuckets) are
  // skipped; at most kMaxTaskNames are kept per process. An empty report
  // says nothing changed (a process's totals never go back to none).
  void Report(uint32_t worker, int32_t pid,
              const std::vector<wire::TaskNameStats>& stats);
  // The sums over every process, by name (at most kMaxTaskNames, then
  // kOtherTaskName), sorted by name.
  std::vector<wire::TaskNameStats> Sum() const;

 private:
  struct Process {
    int32_t pid = 0;
    std::vector<wire::TaskNameStats> stats;
  };
  absl::flat_hash_map<uint32_t, Process> latest_;
  // Processes that were replaced: their last counts, by name.
  absl::flat_hash_map<std::string, wire::TaskNameStats> retired_;
};

// Adds `from`'s counts into `into` (same name; bucket counts kLatencyBuckets).
void AddTaskNameStats(const wire::TaskNameStats& from,
                      wire::TaskNameStats* into);

}  // namespace shoal::observe

#endif  // SHOAL_OBSERVE_TASK_STATS_H_
