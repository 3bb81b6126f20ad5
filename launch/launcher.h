// `shoal launch`: runs an SPMD job — N processes per node, on one node or many
// — the way torchrun or mpirun does. Each node's launcher hosts that node's
// store; the node-rank-0 launcher also hosts the job's key-value store, where
// launchers meet (rendezvous) and agree on stopping and restarting the group.
//
// Failure: the first process to exit non-zero or by a signal stops the group
// on every node (SIGTERM to each process group, a grace period, SIGKILL). With
// restarts left the group starts again (SHOAL_RESTART_COUNT + 1); otherwise
// every launcher exits with that process's exit code (128 + signal for a
// signal) after printing the root cause: rank, node, how it ended, and the
// last lines of its stderr.
#ifndef SHOAL_LAUNCH_LAUNCHER_H_
#define SHOAL_LAUNCH_LAUNCHER_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace shoal::launch {

struct LaunchOptions {
  std::vector<std::string> command;
  // "N", "gpu" (one process per visible GPU, each seeing only its own) or
  // "auto" (one per GPU if there are GPUs, else one per CPU). Default "1".
  std::string nproc_per_node = "1";
  int nnodes = 1;
  int node_rank = 0;
  // HOST:PORT of the node-rank-0 launcher's key-value store (multi-node).
  std::string coordinator;
  // Single node, any free port. Default when nnodes == 1 and no coordinator.
  bool standalone = false;
  // The GPUs to use (CUDA_VISIBLE_DEVICES syntax). Default: all visible.
  std::optional<std::string> gpus;
  int max_restarts = 0;
  bool tee = false;
  std::string log_dir;
  // How long node 0 waits for the other nodes to join. Default 300 s.
  absl::Duration start_timeout = absl::Seconds(300);
  // Between SIGTERM and SIGKILL when stopping the group. Default 5 s.
  absl::Duration stop_grace = absl::Seconds(5);
  // Multi-node: another node (or node 0's key-value service) silent this
  // long is lost, and this node's ranks are stopped (node_keepalive.h).
  // Counters are renewed every keepalive_timeout / 10 (at most every 1 s).
  // Default 10 s.
  absl::Duration keepalive_timeout = absl::Seconds(10);
  // Each node's store. Default 0: the store's default size.
  uint64_t store_bytes = 0;
  std::string job_id;
  // Where to write the job's timeline (Chrome trace-event JSON, all its
  // rings on this node hold) when it ends. Empty: nowhere.
  std::string timeline_out;
  // Serve Prometheus metrics at /metrics on this port while the job runs
  // (0: any free one; -1: none), on `metrics_address`
  // (observe/launch_metrics.h).
  int metrics_port = -1;
  std::string metrics_address = "127.0.0.1";
};

// Fills nnodes, node_rank and coordinator from Slurm's environment when
// SLURM_JOB_ID is set and the caller did not give them (the flags win).
// Errors: a malformed Slurm environment.
absl::Status ApplySlurmDefaults(LaunchOptions* options, bool nnodes_given,
                                bool node_rank_given, bool coordinator_given);

// Runs the job to its end. Returns the launcher's exit code (0 when every
// process of every node exited 0), or an error that kept it from starting.
absl::StatusOr<int> Launch(LaunchOptions options);

}  // namespace shoal::launch

#endif  // SHOAL_LAUNCH_LAUNCHER_H_
