// DeviceBuffer: an owned block of CUDA device memory, with the copies a host
// program needs around it (benchmarks, tests, the examples).
//
// In a build without CUDA, Allocate returns FailedPrecondition("... shoal was
// built without CUDA ...").
#ifndef SHOAL_GPU_DEVICE_BUFFER_H_
#define SHOAL_GPU_DEVICE_BUFFER_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace shoal::gpu {

class DeviceBuffer {
 public:
  // `bytes` of memory on CUDA device `device` (an ordinal among the visible
  // devices), zero-filled (finished before it returns, for every stream).
  // Makes `device` current on the calling thread.
  // Errors: FailedPrecondition (no CUDA build, no GPU), InvalidArgument (bad
  // device), ResourceExhausted (out of device memory).
  static absl::StatusOr<std::unique_ptr<DeviceBuffer>> Allocate(uint64_t bytes,
                                                                int device);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  uint64_t size() const { return size_; }
  int device() const { return device_; }

  // Copies of `bytes` at `offset`, synchronous with the host and with every
  // stream of the buffer's device (they wait for all its queued work, and work
  // queued afterwards on any stream sees the copied bytes). Make `device()`
  // current on the calling thread.
  // REQUIRES: offset + bytes <= size().
  absl::Status CopyFromHost(const void* src, uint64_t bytes,
                            uint64_t offset = 0);
  absl::Status CopyToHost(void* dst, uint64_t bytes, uint64_t offset = 0) const;

 private:
  DeviceBuffer(void* data, uint64_t size, int device)
      : data_(data), size_(size), device_(device) {}
  void* data_;
  uint64_t size_;
  int device_;
};

// Waits for all work on the current device (cudaDeviceSynchronize).
absl::Status SynchronizeDevice();

// Seconds per device-to-device copy of `bytes` from `src` to `dst` (device
// pointers on the current device, or peer-accessible), timed with CUDA events
// around each of `reps` copies on a private stream; the median. A read
// bandwidth figure for benchmarks.
absl::StatusOr<double> TimeDeviceCopy(void* dst, const void* src,
                                      uint64_t bytes, int reps);

}  // namespace shoal::gpu

#endif  // SHOAL_GPU_DEVICE_BUFFER_H_
