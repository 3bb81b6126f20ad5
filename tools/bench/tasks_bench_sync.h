// The goal row of `shoal bench tasks` (the goal: remote sync p50 ≤ 1.3× the
// raw ZeroMQ round trip): shoal's pushed remote sync task and the raw CURVE
// DEALER/ROUTER echo round trips, in-process and to an echo process, timed
// interleaved (tasks_bench_interleave.h) while the node is up, so the three
// meet the same machine conditions.
#ifndef SHOAL_TOOLS_BENCH_TASKS_BENCH_SYNC_H_
#define SHOAL_TOOLS_BENCH_TASKS_BENCH_SYNC_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/subprocess.h"
#include "ipc/curve.h"
#include "tools/bench/tasks_bench_interleave.h"

namespace shoal::bench {

// This binary's `bench tasks --zmq-echo-server curve`, started and its line
// read: a CURVE echo in a process of its own.
struct EchoProcess {
  Subprocess process;  // SIGKILLed when destroyed, if still running
  std::string endpoint;
  std::string server_key;
  ipc::CurveKeyPair client_keys;
};
// Errors: the start's; DeadlineExceeded (no line in 30 s); Internal (a
// malformed line).
absl::StatusOr<EchoProcess> StartEchoProcess();
// SIGTERM, then reaps it (up to 10 s).
void StopEchoProcess(EchoProcess& echo);

struct InterleavedSync {
  // shoal pushed sync (SubmitAsync + Await of one no-op over the node's TCP
  // frontend), raw CURVE in-process echo, raw CURVE echo process.
  std::vector<InterleavedLatency> systems;
  double ratio_in_process = 0;    // shoal p50 / in-process echo p50
  double ratio_echo_process = 0;  // shoal p50 / echo process p50
  std::vector<double> block_ratios_in_process;
  std::vector<double> block_ratios_echo_process;
};

// A fresh remote client of node `job` and both echoes (64-byte messages),
// measured by MeasureInterleaved with `blocks` blocks of n_sync / blocks
// round trips each, after n_sync / 10 warm-up ones per system.
// REQUIRES: no ZAP handler bound on ipc::ProcessContext(); n_sync ≥ blocks.
// Errors: the client's, the echoes' (as ZmqEcho), a task that failed
// (Internal), MeasureInterleaved's.
absl::StatusOr<InterleavedSync> MeasureSyncInterleaved(const std::string& job,
                                                       int n_sync, int blocks);

}  // namespace shoal::bench

#endif  // SHOAL_TOOLS_BENCH_TASKS_BENCH_SYNC_H_
