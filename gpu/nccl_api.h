// NCCL, loaded at run time (dlopen) by the code that runs a collective, not
// linked: libnccl.so.2 is needed only by processes that use NCCL, so `shoal`
// and the GPU tests start (and report clearly) on a machine whose NCCL is
// missing or elsewhere. The GPU machine's NCCL lives inside its PyTorch
// environment (site-packages/nvidia/nccl/lib), off the default library path.
//
// Only for translation units built with CUDA (it includes nccl.h).
#ifndef SHOAL_GPU_NCCL_API_H_
#define SHOAL_GPU_NCCL_API_H_

#include <nccl.h>

#include "absl/status/statusor.h"

namespace shoal::gpu {

// The NCCL entry points shoal calls, with nccl.h's signatures.
#define SHOAL_NCCL_FUNCTIONS(X) \
  X(GetVersion)                 \
  X(GetErrorString)             \
  X(GetLastError)               \
  X(GetUniqueId)                \
  X(CommInitRankConfig)         \
  X(CommFinalize)               \
  X(CommDestroy)                \
  X(CommAbort)                  \
  X(CommGetAsyncError)          \
  X(AllReduce)                  \
  X(Broadcast)                  \
  X(Reduce)                     \
  X(AllGather)                  \
  X(ReduceScatter)              \
  X(Send)                       \
  X(Recv)                       \
  X(GroupStart)                 \
  X(GroupEnd)

struct NcclApi {
#define SHOAL_NCCL_FIELD(name) decltype(&::nccl##name) name = nullptr;
  SHOAL_NCCL_FUNCTIONS(SHOAL_NCCL_FIELD)
#undef SHOAL_NCCL_FIELD
};

// The library name dlopen looks for: found through LD_LIBRARY_PATH, the
// binary's run path (the toolkit's lib64) and the system's cache.
inline constexpr char kNcclLibrary[] = "libnccl.so.2";

// NCCL's entry points, loaded once per process from kNcclLibrary (the first
// call's answer, success or failure, is kept). Never initialises CUDA.
// Errors: FailedPrecondition naming the library, dlerror()'s text and how to
// point at one (LD_LIBRARY_PATH, e.g. a PyTorch install's nvidia/nccl/lib).
absl::StatusOr<const NcclApi*> LoadNccl();

// Loads `library` (a name or a path) afresh, not cached; for tests and tools.
// The handle is kept open for the life of the process. Errors: as LoadNccl's.
absl::StatusOr<const NcclApi*> LoadNcclFrom(const char* library);

}  // namespace shoal::gpu

#endif  // SHOAL_GPU_NCCL_API_H_
