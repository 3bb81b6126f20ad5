// GradSync: averages the gradients across ranks in buckets, overlapped with
// the backward pass, as PyTorch's DistributedDataParallel does.
//
// The flat gradient buffer is cut into buckets by byte range: the first
// `first_bucket_bytes` (DDP: 1 MiB, so that communication starts early),
// then `bucket_bytes` each (DDP: 25 MiB). Since the buffer is laid out last
// layer first, backward completes it as a growing prefix; with overlap on,
// every bucket the prefix covers is posted at once (AllReduceAsync, average)
// and runs on the communicator's worker thread (CPU) or a communication
// stream (GPU) while backward continues. Finish posts what is left and waits
// for all of it. With overlap off, every bucket is posted after backward.
#ifndef SHOAL_EXAMPLES_DATA_PARALLEL_GRAD_SYNC_H_
#define SHOAL_EXAMPLES_DATA_PARALLEL_GRAD_SYNC_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "collectives/communicator.h"
#include "examples/data_parallel/backend.h"

namespace shoal::dp {

struct GradSyncOptions {
  // Size of every bucket but the first. Default 25 MiB (DDP's bucket_cap_mb).
  int64_t bucket_bytes = int64_t{25} << 20;
  // Size of the first bucket (the last layer's gradients). Default 1 MiB (as
  // DDP). Capped at bucket_bytes.
  int64_t first_bucket_bytes = int64_t{1} << 20;
  // Post buckets during backward. Default true; false posts them all after
  // backward (the example's default where overlap cannot pay:
  // ChooseOverlap).
  bool overlap = true;
};

// Whether to overlap the all-reduce with backward when the user did not say
// (--overlap / --no-overlap), and why, for the log. On a GPU, NCCL runs on a
// stream of its own beside the compute stream: on. On the CPU the
// shared-memory all-reduce is work for a core (copies and sums, run by the
// communicator's thread): it overlaps only if every rank has a core to spare
// for it, i.e. `cpus` (this process may run on) >= 2 x `local_ranks`. With
// one core per rank the thread instead takes turns with backward on the same
// core, and the all-reduce's sync points wait for scheduler turns, which
// costs samples/s (docs/BENCHMARKS.md, W5, has overlap on and off).
struct OverlapChoice {
  bool on = true;
  std::string why;
};
OverlapChoice ChooseOverlap(bool gpu, int cpus, int local_ranks);

// The CPUs this process may run on (its affinity mask).
int UsableCpus();

// [begin, end) element ranges covering `elems` elements.
std::vector<std::pair<int64_t, int64_t>> MakeBuckets(
    int64_t elems, const GradSyncOptions& options);

class GradSync {
 public:
  // `comm` may be null for a 1-rank job: then nothing is communicated.
  GradSync(collectives::Communicator* comm, Backend& backend,
           int64_t grad_elems, GradSyncOptions options);

  const std::vector<std::pair<int64_t, int64_t>>& buckets() const {
    return buckets_;
  }

  // Backward has written gradients [0, prefix_end): posts every bucket
  // inside it that is not posted yet (only with overlap).
  absl::Status GradientsReady(int64_t prefix_end);

  // Posts the remaining buckets and waits for every posted one; then the
  // buffer holds the average over ranks. Adds the time spent waiting to
  // *wait_seconds.
  absl::Status Finish(double* wait_seconds);

 private:
  absl::Status Post(size_t b);

  collectives::Communicator* comm_;
  Backend& backend_;
  GradSyncOptions options_;
  std::vector<std::pair<int64_t, int64_t>> buckets_;
  size_t next_ = 0;  // first bucket not posted in this step
  std::vector<collectives::Work> pending_;
};

}  // namespace shoal::dp

#endif  // SHOAL_EXAMPLES_DATA_PARALLEL_GRAD_SYNC_H_
