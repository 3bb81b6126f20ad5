#include "gpu/device_buffer.h"
#include "gpu/gpu_info.h"

namespace shoal::gpu {

absl::StatusOr<std::unique_ptr<DeviceBuffer>> DeviceBuffer::Allocate(uint64_t,
                                                                     int) {
  return BuiltWithoutCuda("device memory");
}

DeviceBuffer::~DeviceBuffer() = default;

absl::Status DeviceBuffer::CopyFromHost(const void*, uint64_t, uint64_t) {
  return BuiltWithoutCuda("device memory");
}

absl::Status DeviceBuffer::CopyToHost(void*, uint64_t, uint64_t) const {
  return BuiltWithoutCuda("device memory");
}

absl::Status SynchronizeDevice() { return BuiltWithoutCuda("device memory"); }

absl::StatusOr<double> TimeDeviceCopy(void*, const void*, uint64_t, int) {
  return BuiltWithoutCuda("device memory");
}

}  // namespace shoal::gpu
