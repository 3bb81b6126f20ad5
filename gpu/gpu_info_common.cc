// Parts of gpu_info.h that are the same with and without CUDA.
#include <dirent.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "gpu/gpu_info.h"

namespace shoal::gpu {

absl::Status BuiltWithoutCuda(const char* what) {
  return absl::FailedPreconditionError(absl::StrCat(
      what, ": shoal was built without CUDA (no toolkit at CUDA_HOME or /usr/local/cuda, "
            "or --config=nocuda); rebuild on a machine with the CUDA toolkit and NCCL"));
}

int DriverGpuCount() {
  DIR* dir = opendir("/proc/driver/nvidia/gpus");
  if (dir == nullptr) return 0;
  int n = 0;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(dir);
  return n;
}

}  // namespace shoal::gpu
