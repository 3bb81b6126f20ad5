#include <cuda_runtime_api.h>

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gpu/cuda_check.h"
#include "gpu/device_buffer.h"

namespace shoal::gpu {

absl::StatusOr<std::unique_ptr<DeviceBuffer>> DeviceBuffer::Allocate(
    uint64_t bytes, int device) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    return absl::FailedPreconditionError("no CUDA device is visible");
  }
  if (device < 0 || device >= count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CUDA device ", device, " out of range (", count, " visible)"));
  }
  SHOAL_CUDA_CHECK(cudaSetDevice(device));
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes == 0 ? 1 : bytes);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    return absl::ResourceExhaustedError(
        absl::StrCat("cudaMalloc of ", bytes, " bytes on device ", device,
                     ": out of device memory"));
  }
  SHOAL_CUDA_CHECK(err);
  // cudaMemset is asynchronous on the legacy default stream, which work on a
  // non-blocking stream (NCCL's, a benchmark's) does not wait for: finish it
  // here.
  SHOAL_CUDA_CHECK(cudaMemset(p, 0, bytes));
  SHOAL_CUDA_CHECK(cudaDeviceSynchronize());
  return std::unique_ptr<DeviceBuffer>(new DeviceBuffer(p, bytes, device));
}

DeviceBuffer::~DeviceBuffer() { cudaFree(data_); }

// Both copies are synchronous with every stream of the buffer's device, not
// only with the legacy default stream cudaMemcpy runs on: from pageable host
// memory cudaMemcpy may return before its DMA reaches the device, and
// non-blocking streams (NCCL's) neither wait for it nor are waited for.
absl::Status DeviceBuffer::CopyFromHost(const void* src, uint64_t bytes,
                                        uint64_t offset) {
  SHOAL_CUDA_CHECK(cudaSetDevice(device_));
  SHOAL_CUDA_CHECK(cudaMemcpy(static_cast<char*>(data_) + offset, src, bytes,
                              cudaMemcpyHostToDevice));
  SHOAL_CUDA_CHECK(cudaDeviceSynchronize());
  return absl::OkStatus();
}

absl::Status DeviceBuffer::CopyToHost(void* dst, uint64_t bytes,
                                      uint64_t offset) const {
  SHOAL_CUDA_CHECK(cudaSetDevice(device_));
  // Work queued on other streams (a collective's) finishes first.
  SHOAL_CUDA_CHECK(cudaDeviceSynchronize());
  SHOAL_CUDA_CHECK(cudaMemcpy(dst, static_cast<const char*>(data_) + offset,
                              bytes, cudaMemcpyDeviceToHost));
  return absl::OkStatus();
}

absl::Status SynchronizeDevice() {
  SHOAL_CUDA_CHECK(cudaDeviceSynchronize());
  return absl::OkStatus();
}

absl::StatusOr<double> TimeDeviceCopy(void* dst, const void* src,
                                      uint64_t bytes, int reps) {
  cudaStream_t stream;
  SHOAL_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t start, stop;
  SHOAL_CUDA_CHECK(cudaEventCreate(&start));
  SHOAL_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<double> seconds;
  absl::Status status;
  for (int i = 0; i < reps && status.ok(); ++i) {
    cudaError_t err = cudaEventRecord(start, stream);
    if (err == cudaSuccess) {
      err = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream);
    }
    if (err == cudaSuccess) err = cudaEventRecord(stop, stream);
    if (err == cudaSuccess) err = cudaEventSynchronize(stop);
    float ms = 0;
    if (err == cudaSuccess) err = cudaEventElapsedTime(&ms, start, stop);
    if (err != cudaSuccess) {
      status = CudaStatus(err, "timing a device copy", __FILE__, __LINE__);
    }
    seconds.push_back(ms * 1e-3);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaStreamDestroy(stream);
  if (!status.ok()) return status;
  std::sort(seconds.begin(), seconds.end());
  return seconds[(seconds.size() - 1) / 2];
}

}  // namespace shoal::gpu
