// Where a pointer's memory lives, for choosing a collective's backend and for
// refusing device memory on paths that read it with the CPU.
#ifndef SHOAL_GPU_DEVICE_POINTER_H_
#define SHOAL_GPU_DEVICE_POINTER_H_

#include <initializer_list>

#include "absl/status/status.h"

namespace shoal::gpu {

// The CUDA device whose memory `ptr` points into, or -1 for host memory.
// Never loads or initialises CUDA and never creates a context: always -1 in
// a build without CUDA, on a machine where DriverGpuCount() finds no GPU, and
// in a process that has not loaded the CUDA driver (a CPU-only rank, which
// can hold no device pointer); otherwise the loaded driver's
// cuPointerGetAttributes answers (it needs no current context). Costs about
// 20 ns in a process without the driver.
int DeviceOfPointer(const void* ptr);

// OK when every non-null pointer in `ptrs` is host memory (DeviceOfPointer <
// 0). Otherwise FailedPrecondition naming `what` and the device, without
// touching the memory: for paths (the shm collectives) whose CPU loads and
// stores on a device pointer would crash or read garbage.
absl::Status CheckHostMemory(const char* what,
                             std::initializer_list<const void*> ptrs);

// Replaces DeviceOfPointer's answer for tests (no GPU is needed to exercise a
// refusal); nullptr restores the real one. Not thread-safe against callers.
using DeviceOfPointerFn = int (*)(const void* ptr);
void SetDeviceOfPointerForTesting(DeviceOfPointerFn fn);

}  // namespace shoal::gpu

#endif  // SHOAL_GPU_DEVICE_POINTER_H_
