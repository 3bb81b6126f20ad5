// The one macro every CUDA runtime and NCCL call goes through: a failure
// becomes an absl::Status carrying the call, the error's name and text, and
// file:line. Only included by translation units built with CUDA.
#ifndef SHOAL_GPU_CUDA_CHECK_H_
#define SHOAL_GPU_CUDA_CHECK_H_

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "absl/status/status.h"

namespace shoal::gpu {

absl::Status CudaStatus(cudaError_t err, const char* call, const char* file,
                        int line);
absl::Status NcclStatus(ncclResult_t res, const char* call, const char* file,
                        int line);

}  // namespace shoal::gpu

#define SHOAL_CUDA_CHECK(call)                                          \
  do {                                                                  \
    const cudaError_t shoal_cuda_err_ = (call);                         \
    if (shoal_cuda_err_ != cudaSuccess)                                 \
      return ::shoal::gpu::CudaStatus(shoal_cuda_err_, #call, __FILE__, \
                                      __LINE__);                        \
  } while (0)

#define SHOAL_NCCL_CHECK(call)                                          \
  do {                                                                  \
    const ncclResult_t shoal_nccl_res_ = (call);                        \
    if (shoal_nccl_res_ != ncclSuccess)                                 \
      return ::shoal::gpu::NcclStatus(shoal_nccl_res_, #call, __FILE__, \
                                      __LINE__);                        \
  } while (0)

#endif  // SHOAL_GPU_CUDA_CHECK_H_
