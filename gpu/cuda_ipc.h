// CudaIpc: the CUDA calls behind device objects in the store — device memory
// pools exported through IPC handles, interprocess events, and the copies
// around them — behind an interface, so that the store's bookkeeping (which
// allocation an object lives in, which handles a process has open, when a
// released block may be reused) is tested without a GPU against a fake
// (gpu/fake_cuda_ipc.h, tests only).
//
// Devices are named two ways: an ordinal, as this process sees it (after
// CUDA_VISIBLE_DEVICES), and a GpuUuid, the same in every process. Processes
// exchange UUIDs; each maps them to its own ordinals (DeviceMap).
//
// In a build without CUDA, MakeCudaIpc() returns an implementation whose every
// call returns FailedPrecondition("... shoal was built without CUDA ...").
#ifndef SHOAL_GPU_CUDA_IPC_H_
#define SHOAL_GPU_CUDA_IPC_H_

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace shoal::gpu {

// A GPU's UUID (cudaDeviceProp::uuid): the same in every process.
struct GpuUuid {
  std::array<uint8_t, 16> bytes{};
  friend bool operator==(const GpuUuid& a, const GpuUuid& b) {
    return a.bytes == b.bytes;
  }
  friend bool operator!=(const GpuUuid& a, const GpuUuid& b) {
    return !(a == b);
  }
  friend bool operator<(const GpuUuid& a, const GpuUuid& b) {
    return a.bytes < b.bytes;
  }
  // "GPU-8f6c3a2e-1b2c-4d5e-9f00-112233445566", as nvidia-smi prints it.
  std::string ToString() const;
};

// Opaque handles as CUDA defines them (cudaIpcMemHandle_t,
// cudaIpcEventHandle_t: 64 bytes each), copied by value into the store's
// table.
struct IpcMemHandle {
  std::array<uint8_t, 64> bytes{};
  friend bool operator==(const IpcMemHandle& a, const IpcMemHandle& b) {
    return a.bytes == b.bytes;
  }
};
struct IpcEventHandle {
  std::array<uint8_t, 64> bytes{};
  friend bool operator==(const IpcEventHandle& a, const IpcEventHandle& b) {
    return a.bytes == b.bytes;
  }
};

// A device allocation this process made and exported.
struct ExportedAllocation {
  void* base = nullptr;
  IpcMemHandle handle;
};

// An interprocess event this process made and exported.
struct ExportedEvent {
  void* event = nullptr;  // cudaEvent_t
  IpcEventHandle handle;
};

class CudaIpc {
 public:
  virtual ~CudaIpc() = default;

  // ---- devices ----
  // GPUs this process sees. 0 when there is no GPU or no driver; an error
  // (FailedPrecondition) in a build without CUDA.
  virtual absl::StatusOr<int> DeviceCount() = 0;
  // Errors: InvalidArgument (ordinal out of range), the CUDA error.
  virtual absl::StatusOr<GpuUuid> DeviceUuid(int ordinal) = 0;

  // ---- the exporting side (the store service) ----
  // `bytes` of device memory on `ordinal` and its IPC handle.
  // Errors: ResourceExhausted (out of device memory), the CUDA error.
  virtual absl::StatusOr<ExportedAllocation> Allocate(int ordinal,
                                                      uint64_t bytes) = 0;
  virtual absl::Status Free(int ordinal, void* base) = 0;
  // An event created with cudaEventInterprocess | cudaEventDisableTiming.
  virtual absl::StatusOr<ExportedEvent> CreateEvent(int ordinal) = 0;
  virtual absl::Status DestroyEvent(int ordinal, void* event) = 0;

  // ---- the importing side (clients) ----
  // Maps an allocation exported by another process (about 1 ms: callers
  // cache it). Errors: the CUDA error (e.g. opened in the exporting process).
  virtual absl::StatusOr<void*> OpenMemHandle(int ordinal,
                                              const IpcMemHandle& handle) = 0;
  virtual absl::Status CloseMemHandle(int ordinal, void* base) = 0;
  virtual absl::StatusOr<void*> OpenEventHandle(
      int ordinal, const IpcEventHandle& handle) = 0;
  virtual absl::Status CloseEvent(int ordinal, void* event) = 0;

  // ---- ordering (stream nullptr: the legacy default stream) ----
  virtual absl::Status RecordEvent(int ordinal, void* event, void* stream) = 0;
  virtual absl::Status StreamWaitEvent(int ordinal, void* stream,
                                       void* event) = 0;
  // A process-local event marking the work queued on `stream` so far, for
  // deferred releases. Poll it with EventDone; destroy it with CloseEvent.
  virtual absl::StatusOr<void*> MarkStream(int ordinal, void* stream) = 0;
  // Whether the work before `event` finished. Errors: the CUDA error.
  virtual absl::StatusOr<bool> EventDone(int ordinal, void* event) = 0;
  virtual absl::Status WaitEvent(int ordinal, void* event) = 0;

  // ---- copies between host memory and device memory ----
  // Through pinned staging buffers, pipelined, on `stream`; returns once the
  // copy finished (the host side may be reused).
  virtual absl::Status CopyToDevice(int ordinal, void* dst, const void* src,
                                    uint64_t bytes, void* stream) = 0;
  virtual absl::Status CopyToHost(int ordinal, void* dst, const void* src,
                                  uint64_t bytes, void* stream) = 0;
};

// The real implementation (CUDA build) or the "built without CUDA" one.
std::unique_ptr<CudaIpc> MakeCudaIpc();

// This process's view of the GPUs: ordinal ↔ UUID, read once.
class DeviceMap {
 public:
  // Reads every device's UUID through `cuda` (not owned; must outlive this).
  static absl::StatusOr<DeviceMap> Read(CudaIpc& cuda);

  int count() const { return static_cast<int>(uuids_.size()); }
  // REQUIRES: 0 <= ordinal < count().
  const GpuUuid& uuid(int ordinal) const { return uuids_[ordinal]; }
  // The ordinal of `uuid` in this process, if it sees that GPU.
  std::optional<int> OrdinalOf(const GpuUuid& uuid) const;
  // The physical device behind an ordinal, as CUDA_VISIBLE_DEVICES (set by
  // the coordinator or launcher) names it: "3", "GPU-…", "MIG-…"; the ordinal
  // itself when the variable is unset. REQUIRES: 0 <= ordinal < count().
  const std::string& physical(int ordinal) const { return physical_[ordinal]; }

 private:
  std::vector<GpuUuid> uuids_;
  std::vector<std::string> physical_;
};

}  // namespace shoal::gpu

#endif  // SHOAL_GPU_CUDA_IPC_H_
