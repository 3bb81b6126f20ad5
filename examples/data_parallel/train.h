// The data-parallel training loop: per step, forward and backward on this
// rank's shard with gradients averaged in buckets during backward, the same
// SGD update on every rank, and every few steps a check through the
// key-value store that all ranks still hold bit-identical parameters.
#ifndef SHOAL_EXAMPLES_DATA_PARALLEL_TRAIN_H_
#define SHOAL_EXAMPLES_DATA_PARALLEL_TRAIN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives/communicator.h"
#include "examples/data_parallel/backend.h"
#include "examples/data_parallel/grad_sync.h"
#include "examples/data_parallel/model.h"
#include "launch/job.h"

namespace shoal::dp {

struct TrainOptions {
  // Optimizer steps. Default 600.
  int64_t steps = 600;
  // SGD learning rate and momentum. Defaults 0.05 and 0.9.
  float lr = 0.05f;
  float momentum = 0.9f;
  // Compare parameter checksums across ranks every this many steps (and
  // after the last). Default 50; 0 checks only after the last step.
  int64_t check_every = 50;
  // Print a progress line every this many steps (rank 0). Default 50.
  int64_t log_every = 50;
  // Steps left out of the throughput figures (first-touch page faults,
  // NCCL set-up). Default 10.
  int64_t warmup = 10;
  // Prefix of this run's key-value keys. Default "dp".
  std::string kv_prefix = "dp";
  // Testing only: at this step (1-based, as printed) rank 1 uses a slightly
  // different learning rate, so the next check must catch the divergence.
  // Default -1: never.
  int64_t diverge_at = -1;
  GradSyncOptions sync;
};

struct StepRecord {
  int64_t step = 0;
  float loss = 0;      // global mean loss of the step's batch
  double seconds = 0;  // wall time of the step on rank 0
};

struct TrainResult {
  std::vector<StepRecord> steps;
  int buckets = 0;
  // Over the steps after the warm-up:
  double samples_per_second = 0;  // global samples
  double step_ms = 0;             // mean wall time per step
  double wait_ms = 0;             // of which waiting for the all-reduce
  int checks = 0;                 // checksum comparisons passed
  uint64_t final_checksum = 0;
};

// Trains. `comm` is null for a 1-rank job. Progress goes to stdout on rank
// 0. Errors: DataLoss when ranks' parameters differ (naming the step and the
// checksums), the collectives' and the backend's errors.
absl::StatusOr<TrainResult> Train(launch::Job& job,
                                  collectives::Communicator* comm,
                                  Backend& backend, const ModelSpec& spec,
                                  const Shard& shard,
                                  const TrainOptions& options);

}  // namespace shoal::dp

#endif  // SHOAL_EXAMPLES_DATA_PARALLEL_TRAIN_H_
