// A build without CUDA: the GPU path reports that it is not there, and the
// example runs on the CPU.
#include "examples/data_parallel/backend.h"
#include "gpu/gpu_info.h"

namespace shoal::dp {

absl::StatusOr<std::unique_ptr<Backend>> MakeGpuBackend(
    const ModelSpec& spec, const Shard& shard, DataView data,
    absl::Span<const float> initial_params, int device) {
  return gpu::BuiltWithoutCuda("the data-parallel example's GPU path");
}

}  // namespace shoal::dp
