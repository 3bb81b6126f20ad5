// Parts of gpu_info.h that are the same with and without CUDA.
#include "absl/strings/str_cat.h"
#include "gpu/gpu_info.h"

namespace shoal::gpu {

absl::Status BuiltWithoutCuda(const char* what) {
  return absl::FailedPreconditionError(
      absl::StrCat(what,
                   ": shoal was built without CUDA (no toolkit at CUDA_HOME or "
                   "/usr/local/cuda, "
                   "or --config=nocuda); rebuild on a machine with the CUDA "
                   "toolkit and NCCL"));
}

}  // namespace shoal::gpu
