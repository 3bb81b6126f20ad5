#include "gpu/nccl_api.h"

#include <dlfcn.h>

#include <memory>

#include "absl/strings/str_cat.h"

namespace shoal::gpu {

absl::StatusOr<const NcclApi*> LoadNcclFrom(const char* library) {
  // RTLD_LOCAL: NCCL's symbols stay out of the global namespace (a PyTorch
  // in the same process may load its own copy).
  void* handle = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot load NCCL (", library, "): ", why != nullptr ? why : "?",
        "; NCCL is needed for collectives on CUDA buffers: put the folder "
        "holding libnccl.so.2 on LD_LIBRARY_PATH (the CUDA toolkit's lib64, "
        "or a PyTorch environment's site-packages/nvidia/nccl/lib)"));
  }
  auto api = std::make_unique<NcclApi>();
#define SHOAL_NCCL_LOAD(name)                                             \
  api->name =                                                             \
      reinterpret_cast<decltype(api->name)>(dlsym(handle, "nccl" #name)); \
  if (api->name == nullptr) {                                             \
    dlclose(handle);                                                      \
    return absl::FailedPreconditionError(absl::StrCat(                    \
        "cannot load NCCL (", library,                                    \
        "): it has no nccl" #name "; shoal needs NCCL 2.19 or newer"));   \
  }
  SHOAL_NCCL_FUNCTIONS(SHOAL_NCCL_LOAD)
#undef SHOAL_NCCL_LOAD
  return api.release();  // lives as long as the process, like the library
}

absl::StatusOr<const NcclApi*> LoadNccl() {
  static const absl::StatusOr<const NcclApi*>* loaded =
      new absl::StatusOr<const NcclApi*>(LoadNcclFrom(kNcclLibrary));
  return *loaded;
}

}  // namespace shoal::gpu
