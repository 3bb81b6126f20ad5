// Where a pointer's memory lives, for choosing a collective's backend.
#ifndef SHOAL_GPU_DEVICE_POINTER_H_
#define SHOAL_GPU_DEVICE_POINTER_H_

namespace shoal::gpu {

// The CUDA device whose memory `ptr` points into, or -1 for host memory (and
// always -1 in a build without CUDA, or on a machine whose driver lists no
// GPU — then CUDA is never initialised). With GPUs present the first call
// initialises the CUDA runtime in this process.
int DeviceOfPointer(const void* ptr);

}  // namespace shoal::gpu

#endif  // SHOAL_GPU_DEVICE_POINTER_H_
