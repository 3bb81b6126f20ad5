// gpu_info.h in a build without CUDA: clear errors, never silence.
#include "gpu/gpu_info.h"

namespace shoal::gpu {

BuildInfo GetBuildInfo() { return BuildInfo{}; }

absl::StatusOr<int> CudaDeviceCount() {
  return BuiltWithoutCuda("CudaDeviceCount");
}

}  // namespace shoal::gpu
