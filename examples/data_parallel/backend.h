// What the training loop needs from a device: forward and backward of this
// rank's batch into a flat gradient buffer (reporting each layer as its
// gradients are done, so that buckets can be all-reduced while backward goes
// on), and the optimizer step. Two implementations: CpuBackend (host memory,
// cpu_kernels) and GpuBackend (device memory, cuBLAS + a few CUDA kernels).
#ifndef SHOAL_EXAMPLES_DATA_PARALLEL_BACKEND_H_
#define SHOAL_EXAMPLES_DATA_PARALLEL_BACKEND_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "examples/data_parallel/model.h"

namespace shoal::dp {

// The data set as the store holds it: n rows of d_in + d_out floats (x, then
// y), read in place through the store's zero-copy view.
struct DataView {
  const float* rows = nullptr;
  int64_t n = 0;
};

// Which rows a rank trains on. The global batch of step t is the run of
// world × batch rows starting at row (t mod batches_per_epoch) × world ×
// batch; rank r takes the r-th `batch` of them. A 1-rank run with batch
// world × batch therefore sees exactly the same samples at every step.
struct Shard {
  int rank = 0;
  int world = 1;
  int batch = 64;  // rows per rank and step
  int64_t batches_per_epoch = 1;

  // The first row rank `rank` uses at step `step`.
  int64_t FirstRow(int64_t step) const {
    return ((step % batches_per_epoch) * world + rank) * int64_t{batch};
  }
};

class Backend {
 public:
  virtual ~Backend() = default;

  // "cpu (x86-64-v4 (AVX-512))", "cuda:0 (NVIDIA H200)".
  virtual std::string Describe() const = 0;
  virtual bool on_device() const = 0;

  // The flat buffers, in host or device memory (layout: ParamLayout).
  virtual float* params() = 0;
  virtual float* grads() = 0;

  // Forward and backward of this rank's batch of `step`: writes every
  // parameter's gradient and this rank's mean loss (at loss_index). Calls
  // grads_ready(l) for l = layers-1 … 0 as soon as layer l's gradients are
  // written (on a GPU: enqueued); an error from it stops the pass.
  virtual absl::Status ForwardBackward(
      int64_t step, const std::function<absl::Status(int)>& grads_ready) = 0;

  // The CUDA stream a collective on the gradients written so far must run
  // on (one that waits for them without blocking the compute stream), or
  // nullptr on the CPU.
  virtual absl::StatusOr<void*> StreamAfterGrads() = 0;

  // params -= lr · velocity, with velocity = momentum · velocity + grads.
  virtual absl::Status Update(float lr, float momentum) = 0;

  // The value at loss_index (after the all-reduce: the global mean loss).
  virtual absl::StatusOr<float> Loss() = 0;

  // Copies the parameters out (for checksums and tests).
  // REQUIRES: out.size() == layout.params().
  virtual absl::Status CopyParamsToHost(absl::Span<float> out) = 0;
};

// The host implementation. Reads the batch straight out of `data`, which
// must stay mapped while the backend lives.
absl::StatusOr<std::unique_ptr<Backend>> MakeCpuBackend(
    const ModelSpec& spec, const Shard& shard, DataView data,
    absl::Span<const float> initial_params);

// The CUDA implementation on device `device` (an ordinal among the visible
// ones). Copies this rank's rows of `data` to the GPU once, at creation.
// Errors: FailedPrecondition in a build without CUDA; CUDA/cuBLAS errors.
absl::StatusOr<std::unique_ptr<Backend>> MakeGpuBackend(
    const ModelSpec& spec, const Shard& shard, DataView data,
    absl::Span<const float> initial_params, int device);

}  // namespace shoal::dp

#endif  // SHOAL_EXAMPLES_DATA_PARALLEL_BACKEND_H_
