#include <cuda_runtime_api.h>

#include <cstdlib>
#include <cstring>

#include "gpu/device_pointer.h"
#include "gpu/device_visibility.h"

namespace shoal::gpu {

// DeviceOfPointer without the test override (device_pointer_common.cc).
int RealDeviceOfPointer(const void* ptr) {
  // No GPU listed by the driver, or none visible: host memory, and CUDA is
  // never touched.
  static const bool gpus = [] {
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    if (visible != nullptr && *visible == '\0') return false;
    return DriverGpuCount() > 0;
  }();
  if (!gpus || ptr == nullptr) return -1;
  cudaPointerAttributes attr;
  if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
    cudaGetLastError();  // clear it: unregistered host memory is not an error
    return -1;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged
             ? attr.device
             : -1;
}

}  // namespace shoal::gpu
