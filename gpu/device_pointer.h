// Where a pointer's memory lives, for choosing a collective's backend and for
// refusing device memory on paths that read it with the CPU.
#ifndef SHOAL_GPU_DEVICE_POINTER_H_
#define SHOAL_GPU_DEVICE_POINTER_H_

#include <initializer_list>

#include "absl/status/status.h"

namespace shoal::gpu {

// The CUDA device whose memory `ptr` points into, or -1 for host memory (and
// always -1 in a build without CUDA, or on a machine where DriverGpuCount()
// finds no GPU — then CUDA is never initialised). With GPUs present the first
// call initialises the CUDA runtime in this process.
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
