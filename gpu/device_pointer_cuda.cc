// DeviceOfPointer with CUDA, through the driver's cuPointerGetAttributes,
// and only in a process that has loaded the driver: a process without it
// (a CPU-only rank, a coordinator) has no CUDA context and so no device
// pointer, and asking the runtime (cudaPointerGetAttributes) would load the
// driver and create a context on a GPU machine. The driver is looked up
// among the loaded objects, never loaded here; cuPointerGetAttributes needs
// no current context and creates none.
#include <cuda.h>  // the driver API's types; libcuda is not linked
#include <dlfcn.h>
#include <link.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "gpu/device_pointer.h"
#include "gpu/device_visibility.h"

namespace shoal::gpu {
namespace {

using PointerGetAttributesFn = CUresult (*)(unsigned int, CUpointer_attribute*,
                                            void**, CUdeviceptr);

int CountOfLoads(dl_phdr_info* info, size_t, void* data) {
  *static_cast<unsigned long long*>(data) = info->dlpi_adds;
  return 1;  // the first object is enough: every one reports the count
}

int FindDriver(dl_phdr_info* info, size_t, void* data) {
  const char* name = info->dlpi_name;
  if (name == nullptr) return 0;
  const char* base = std::strrchr(name, '/');
  base = base != nullptr ? base + 1 : name;
  if (std::strncmp(base, "libcuda.so", 10) != 0) return 0;
  *static_cast<std::string*>(data) = name;
  return 1;
}

// The loaded driver's cuPointerGetAttributes, or null while this process has
// not loaded libcuda. Cheap when nothing was loaded since the last look (one
// dl_iterate_phdr step, ~20 ns); the driver, once found, stays.
PointerGetAttributesFn LoadedDriver() {
  static std::atomic<PointerGetAttributesFn> found{nullptr};
  static std::atomic<unsigned long long> loads_seen{~0ull};
  if (PointerGetAttributesFn f = found.load(std::memory_order_acquire)) {
    return f;
  }
  unsigned long long loads = 0;
  dl_iterate_phdr(&CountOfLoads, &loads);
  if (loads == loads_seen.load(std::memory_order_relaxed)) return nullptr;
  std::string path;
  dl_iterate_phdr(&FindDriver, &path);
  if (!path.empty()) {
    // Already loaded: RTLD_NOLOAD only takes a reference to it.
    if (void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD)) {
      auto f = reinterpret_cast<PointerGetAttributesFn>(
          dlsym(h, "cuPointerGetAttributes"));
      if (f != nullptr) {
        found.store(f, std::memory_order_release);
        return f;
      }
    }
  }
  loads_seen.store(loads, std::memory_order_relaxed);
  return nullptr;
}

}  // namespace

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
  PointerGetAttributesFn get = LoadedDriver();
  if (get == nullptr) return -1;  // no CUDA in this process: host memory
  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                 CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                 CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
  unsigned int type = 0;
  bool managed = false;
  int ordinal = -1;
  void* data[] = {&type, &managed, &ordinal};
  // Not a CUDA pointer: success with every attribute left at its default
  // (a host pointer the driver does not know). No driver initialised (the
  // library loaded, cuInit never called): an error, and no device memory.
  if (get(3, attrs, data, reinterpret_cast<CUdeviceptr>(ptr)) != CUDA_SUCCESS) {
    return -1;
  }
  const bool device =
      type == CU_MEMORYTYPE_DEVICE || type == CU_MEMORYTYPE_UNIFIED || managed;
  return device && ordinal >= 0 ? ordinal : -1;
}

}  // namespace shoal::gpu
