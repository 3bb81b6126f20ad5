// What this build and this machine know about GPUs.
//
// Nothing here is called by the coordinator on a path that would initialise
// CUDA in it (a forked child cannot re-initialise CUDA, and a context in the
// parent wastes memory on every GPU): BuildInfo() and the /proc reading never
// touch the driver; CudaDeviceCount() does, and is for workers and tests.
//
// In a build without CUDA (no toolkit found, or --config=nocuda) every CUDA
// call returns FailedPrecondition("shoal was built without CUDA ...").
#ifndef SHOAL_GPU_GPU_INFO_H_
#define SHOAL_GPU_GPU_INFO_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace shoal::gpu {

struct BuildInfo {
  bool cuda = false;         // compiled and linked against CUDA
  std::string cuda_runtime;  // "13.0" (the runtime linked), or ""
  std::string nccl;          // "2.28.3" (the NCCL loaded), or ""
  std::string nccl_error;    // why NCCL did not load, when `nccl` is ""
};

// Never initialises CUDA. In a CUDA build it loads NCCL (see nccl_api.h) to
// read its version; a missing NCCL leaves `nccl` empty, never fails.
BuildInfo GetBuildInfo();

// The status returned by every CUDA entry point in a build without CUDA.
absl::Status BuiltWithoutCuda(const char* what);

// Number of GPUs the CUDA runtime sees in this process (after
// CUDA_VISIBLE_DEVICES). 0 when there is no GPU or no driver (both
// cudaErrorNoDevice and cudaErrorInsufficientDriver mean "no GPU" here).
// Initialises CUDA in this process. Errors: FailedPrecondition without CUDA.
absl::StatusOr<int> CudaDeviceCount();

}  // namespace shoal::gpu

#endif  // SHOAL_GPU_GPU_INFO_H_
