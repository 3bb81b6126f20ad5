// Parts of device_pointer.h that are the same with and without CUDA.
#include <atomic>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "gpu/device_pointer.h"

namespace shoal::gpu {

// Defined in device_pointer_cuda.cc or device_pointer_stub.cc.
int RealDeviceOfPointer(const void* ptr);

namespace {
std::atomic<DeviceOfPointerFn> fake{nullptr};
}  // namespace

int DeviceOfPointer(const void* ptr) {
  if (DeviceOfPointerFn f = fake.load(std::memory_order_acquire)) {
    return f(ptr);
  }
  return RealDeviceOfPointer(ptr);
}

void SetDeviceOfPointerForTesting(DeviceOfPointerFn fn) {
  fake.store(fn, std::memory_order_release);
}

absl::Status CheckHostMemory(const char* what,
                             std::initializer_list<const void*> ptrs) {
  for (const void* p : ptrs) {
    if (p == nullptr) continue;
    const int device = DeviceOfPointer(p);
    if (device >= 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          what, ": buffer ", absl::Hex(reinterpret_cast<uintptr_t>(p)),
          " is CUDA device memory (device ", device,
          "); this path reads and writes host memory only (use the NCCL "
          "backend, or the automatic one, for CUDA buffers)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace shoal::gpu
