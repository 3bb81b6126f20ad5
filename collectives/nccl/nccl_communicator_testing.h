// Test seams of NcclCommunicator in a CUDA build: the CUDA runtime calls it
// makes and the NCCL entry points it uses, replaceable by fakes, so that its
// threading contract (nccl_communicator.h) is tested on machines without a
// GPU and under ThreadSanitizer
// (collectives/nccl/nccl_communicator_threads_test.cc). Tests only.
#ifndef SHOAL_COLLECTIVES_NCCL_NCCL_COMMUNICATOR_TESTING_H_
#define SHOAL_COLLECTIVES_NCCL_NCCL_COMMUNICATOR_TESTING_H_

#include <cuda_runtime_api.h>

#include "gpu/nccl_api.h"

namespace shoal::collectives {

// The CUDA runtime calls of NcclCommunicator, with the runtime's signatures.
struct NcclCudaCalls {
  decltype(&::cudaGetDeviceCount) GetDeviceCount = nullptr;
  decltype(&::cudaGetDevice) GetDevice = nullptr;
  decltype(&::cudaSetDevice) SetDevice = nullptr;
  decltype(&::cudaStreamCreateWithFlags) StreamCreateWithFlags = nullptr;
  decltype(&::cudaStreamDestroy) StreamDestroy = nullptr;
  decltype(&::cudaStreamQuery) StreamQuery = nullptr;
  decltype(&::cudaEventCreateWithFlags) EventCreateWithFlags = nullptr;
  decltype(&::cudaEventDestroy) EventDestroy = nullptr;
  decltype(&::cudaEventRecord) EventRecord = nullptr;
  decltype(&::cudaEventQuery) EventQuery = nullptr;
};

struct NcclTestingHooks {
  const gpu::NcclApi* nccl = nullptr;  // every field set
  NcclCudaCalls cuda;                  // every field set
};

// Makes every NcclCommunicator created from now on (and the ones alive)
// call `hooks` instead of the CUDA runtime and the loaded NCCL; nullptr
// restores the real ones. `hooks` must outlive its use. REQUIRES: no
// communicator is in use while the hooks change.
void SetNcclHooksForTesting(const NcclTestingHooks* hooks);

}  // namespace shoal::collectives

#endif  // SHOAL_COLLECTIVES_NCCL_NCCL_COMMUNICATOR_TESTING_H_
