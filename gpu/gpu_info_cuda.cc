// gpu_info.h with CUDA.
#include <cuda_runtime_api.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "gpu/cuda_check.h"
#include "gpu/device_visibility.h"
#include "gpu/gpu_info.h"
#include "gpu/nccl_api.h"

namespace shoal::gpu {

absl::Status CudaStatus(cudaError_t err, const char* call, const char* file,
                        int line) {
  const char* base = std::strrchr(file, '/');
  const absl::StatusCode code =
      err == cudaErrorMemoryAllocation ? absl::StatusCode::kResourceExhausted
      : err == cudaErrorInvalidValue || err == cudaErrorInvalidDevice
          ? absl::StatusCode::kInvalidArgument
      : err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver
          ? absl::StatusCode::kFailedPrecondition
          : absl::StatusCode::kInternal;
  return absl::Status(
      code, absl::StrCat(call, ": ", cudaGetErrorName(err), " (",
                         cudaGetErrorString(err), ") [", base ? base + 1 : file,
                         ":", line, "]"));
}

absl::Status NcclStatus(ncclResult_t res, const char* call, const char* file,
                        int line) {
  const char* base = std::strrchr(file, '/');
  const absl::StatusCode code =
      res == ncclInvalidArgument || res == ncclInvalidUsage
          ? absl::StatusCode::kInvalidArgument
      : res == ncclRemoteError || res == ncclSystemError
          ? absl::StatusCode::kUnavailable
      : res == ncclInProgress ? absl::StatusCode::kUnavailable
                              : absl::StatusCode::kInternal;
  // NCCL's own text when it is loaded (it is, wherever an NCCL call ran).
  absl::StatusOr<const NcclApi*> api = LoadNccl();
  const std::string text = api.ok() ? (*api)->GetErrorString(res)
                                    : absl::StrCat("ncclResult_t ", res);
  return absl::Status(
      code, absl::StrCat(call, ": ", text, " [", base ? base + 1 : file, ":",
                         line, "]"));
}

BuildInfo GetBuildInfo() {
  BuildInfo info;
  info.cuda = true;
  info.cuda_runtime =
      absl::StrCat(CUDART_VERSION / 1000, ".", (CUDART_VERSION % 1000) / 10);
  // Loads NCCL (dlopen) if it is not loaded yet; "" with the reason when it
  // cannot be.
  absl::StatusOr<const NcclApi*> api = LoadNccl();
  if (!api.ok()) {
    info.nccl_error = std::string(api.status().message());
    return info;
  }
  int v = 0;
  if ((*api)->GetVersion(&v) == ncclSuccess) {
    // NCCL ≥ 2.9 encodes major*10000 + minor*100 + patch.
    info.nccl = absl::StrCat(v / 10000, ".", (v / 100) % 100, ".", v % 100);
  }
  return info;
}

absl::StatusOr<int> CudaDeviceCount() {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  CudaCountOutcome outcome = CudaCountOutcome::kSuccess;
  if (err == cudaErrorNoDevice) {
    outcome = CudaCountOutcome::kNoDevice;
  } else if (err == cudaErrorInsufficientDriver) {
    outcome = CudaCountOutcome::kInsufficientDriver;
  } else {
    SHOAL_CUDA_CHECK(err);
  }
  if (err != cudaSuccess) cudaGetLastError();  // clear the error
  int driver = 0;
  if (outcome == CudaCountOutcome::kInsufficientDriver &&
      cudaDriverGetVersion(&driver) != cudaSuccess) {
    cudaGetLastError();
    driver = 0;
  }
  return DeviceCountFrom(
      outcome, n, driver, CUDART_VERSION,
      outcome == CudaCountOutcome::kInsufficientDriver ? DriverGpuCount() : 0);
}

}  // namespace shoal::gpu
