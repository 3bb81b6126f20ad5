// Parts of gpu_info.h that are the same with and without CUDA.
#include <string>

#include "absl/strings/str_cat.h"
#include "gpu/gpu_info.h"

namespace shoal::gpu {

absl::Status BuiltWithoutCuda(const char* what) {
  return absl::FailedPreconditionError(
      absl::StrCat(what,
                   ": shoal was built without CUDA (no toolkit at CUDA_HOME or "
                   "/usr/local/cuda, "
                   "or --config=nocuda); rebuild on a machine with the CUDA "
                   "toolkit and NCCL"));
}

namespace {

std::string CudaVersionName(int v) {
  return absl::StrCat(v / 1000, ".", (v % 1000) / 10);
}

}  // namespace

absl::StatusOr<int> DeviceCountFrom(CudaCountOutcome outcome, int count,
                                    int driver_version, int runtime_version,
                                    int driver_gpus) {
  switch (outcome) {
    case CudaCountOutcome::kSuccess:
      return count;
    case CudaCountOutcome::kNoDevice:
      return 0;
    case CudaCountOutcome::kInsufficientDriver:
      break;
  }
  if (driver_version > 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the NVIDIA driver supports CUDA up to ",
        CudaVersionName(driver_version), ", older than the CUDA ",
        CudaVersionName(runtime_version),
        " runtime shoal was built with (cudaErrorInsufficientDriver): update "
        "the driver (or build shoal against an older CUDA toolkit)"));
  }
  if (driver_gpus > 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the NVIDIA driver lists ", driver_gpus,
        " GPU(s) (/proc/driver/nvidia/gpus or /dev/nvidia<N>) but CUDA cannot "
        "load the driver library (libcuda.so.1; "
        "cudaErrorInsufficientDriver with no driver version): install the "
        "driver's user-space libraries, or put their folder on "
        "LD_LIBRARY_PATH"));
  }
  return 0;  // no driver at all: no GPU
}

}  // namespace shoal::gpu
