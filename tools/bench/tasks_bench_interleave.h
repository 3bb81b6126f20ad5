// Interleaved latency measurement for `shoal bench tasks`: several systems'
// round trips timed in alternating blocks of one run, so that a spell of the
// machine (on this 2-vCPU guest, whether a system's threads share a vCPU
// changes from second to second) lands on every system alike instead of on
// whichever one a sequential run timed at that moment.
#ifndef SHOAL_TOOLS_BENCH_TASKS_BENCH_INTERLEAVE_H_
#define SHOAL_TOOLS_BENCH_TASKS_BENCH_INTERLEAVE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace shoal::bench {

struct InterleavedSystem {
  std::string name;
  std::function<absl::Status()> one;  // one round trip, start to finish
};

struct InterleavedLatency {
  std::string name;
  std::vector<double> samples;    // seconds, every timed round trip, in order
  std::vector<double> block_p50;  // seconds, the p50 of each block's samples
  double p50_us = 0;              // over all samples
  double p99_us = 0;
  // Context switches on the whole machine per timed round trip (/proc/stat
  // "ctxt", read around each block): how many hand-offs between threads a
  // round trip takes, which on one shared vCPU is what its latency is made
  // of. -1 when not counted.
  double switches_per_op = -1;
};

struct InterleaveOptions {
  int blocks = 10;              // K ≥ 1
  int per_block = 200;          // timed round trips per system per block, ≥ 1
  int warmup = 200;             // untimed round trips per system before block 0
  std::function<double()> now;  // seconds; NowSeconds when empty (tests)
  // The machine's context switches so far; MachineContextSwitches when
  // empty (tests). A negative value means unknown: not counted.
  std::function<int64_t()> switches;
};

// The machine's context switches since boot (/proc/stat "ctxt"), or -1 when
// it cannot be read.
int64_t MachineContextSwitches();

// Warms up each system (`warmup` round trips, in the given order), then runs
// `blocks` blocks; in each, every system runs `per_block` timed round trips
// in a row, the systems in the given order in even blocks and in reverse
// order in odd ones (so no system always follows the same one). Returns one
// entry per system, in the given order.
// Errors: InvalidArgument (no systems, blocks or per_block < 1, warmup < 0);
// the first error of a system's round trip (the measurement stops there).
absl::StatusOr<std::vector<InterleavedLatency>> MeasureInterleaved(
    const std::vector<InterleavedSystem>& systems,
    const InterleaveOptions& options);

// Per block, a's block p50 / b's block p50 (0 where b's is 0).
// REQUIRES: a and b come from one MeasureInterleaved call.
std::vector<double> BlockRatios(const InterleavedLatency& a,
                                const InterleavedLatency& b);

}  // namespace shoal::bench

#endif  // SHOAL_TOOLS_BENCH_TASKS_BENCH_INTERLEAVE_H_
