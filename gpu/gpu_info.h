// What this build and this machine know about GPUs.
//
// Who owns a CUDA context (docs/architecture.md has the table):
//   - the coordinator's and the launcher's own code: none. They count GPUs
//     from CUDA_VISIBLE_DEVICES, --gpus or the driver's /proc and /dev entries
//     (device_visibility.h), never through the driver, because a context
//     there costs device memory on every GPU and its children are exec'd
//     with their own;
//   - the store service running inside the coordinator or the launcher (or
//     `shoal store`): one per GPU, created at the first device object's
//     Create on that GPU (it owns the device memory) and kept while the store
//     runs; a CPU-only job never creates one. Keeping even that out of the
//     launcher would take a store in its own process;
//   - workers and launched ranks: their own, on their CUDA_VISIBLE_DEVICES.
// Here, GetBuildInfo() never touches the driver; CudaDeviceCount() does, and
// is for workers, tests and `shoal info --devices`.
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
// CUDA_VISIBLE_DEVICES). 0 when there is no GPU, or no NVIDIA driver at all
// where the driver's /proc and /dev entries (DriverGpuCount) list no GPU
// either. Loads the driver (cuInit) but creates no context.
// Errors: FailedPrecondition without CUDA; FailedPrecondition for a driver
// older than the CUDA runtime shoal was built with (naming both CUDA
// versions: not "no GPU"), or for GPUs the driver lists whose driver library
// (libcuda.so.1) CUDA cannot load; the CUDA error otherwise.
absl::StatusOr<int> CudaDeviceCount();

// How cudaGetDeviceCount ended, for DeviceCountFrom.
enum class CudaCountOutcome { kSuccess, kNoDevice, kInsufficientDriver };

// CudaDeviceCount's answer from what CUDA said: `count` on success; for
// cudaErrorNoDevice 0; for cudaErrorInsufficientDriver 0 when there is no
// driver at all (`driver_version` 0, cudaDriverGetVersion's answer then)
// and `driver_gpus` (DriverGpuCount()) is 0. Versions are CUDA's encoding,
// 1000 * major + 10 * minor (13000 is 13.0).
// Errors: FailedPrecondition naming the driver's and the runtime's CUDA
// versions for a driver older than the runtime; FailedPrecondition naming
// libcuda.so.1 when `driver_gpus` > 0 but no driver library loaded.
absl::StatusOr<int> DeviceCountFrom(CudaCountOutcome outcome, int count,
                                    int driver_version, int runtime_version,
                                    int driver_gpus);

}  // namespace shoal::gpu

#endif  // SHOAL_GPU_GPU_INFO_H_
