// CudaIpc in a build without CUDA: every call refused, so that asking for a
// device object says why it cannot be had.
#include "gpu/cuda_ipc.h"
#include "gpu/gpu_info.h"

namespace shoal::gpu {
namespace {

class NoCudaIpc : public CudaIpc {
 public:
  absl::StatusOr<int> DeviceCount() override { return No(); }
  absl::StatusOr<GpuUuid> DeviceUuid(int) override { return No(); }
  absl::StatusOr<ExportedAllocation> Allocate(int, uint64_t) override {
    return No();
  }
  absl::Status Free(int, void*) override { return No(); }
  absl::StatusOr<ExportedEvent> CreateEvent(int) override { return No(); }
  absl::Status DestroyEvent(int, void*) override { return No(); }
  absl::StatusOr<void*> OpenMemHandle(int, const IpcMemHandle&) override {
    return No();
  }
  absl::Status CloseMemHandle(int, void*) override { return No(); }
  absl::StatusOr<void*> OpenEventHandle(int, const IpcEventHandle&) override {
    return No();
  }
  absl::Status CloseEvent(int, void*) override { return No(); }
  absl::Status RecordEvent(int, void*, void*) override { return No(); }
  absl::Status StreamWaitEvent(int, void*, void*) override { return No(); }
  absl::StatusOr<void*> MarkStream(int, void*) override { return No(); }
  absl::StatusOr<bool> EventDone(int, void*) override { return No(); }
  absl::Status WaitEvent(int, void*) override { return No(); }
  absl::Status CopyToDevice(int, void*, const void*, uint64_t, void*) override {
    return No();
  }
  absl::Status CopyToHost(int, void*, const void*, uint64_t, void*) override {
    return No();
  }

 private:
  static absl::Status No() { return BuiltWithoutCuda("device objects"); }
};

}  // namespace

std::unique_ptr<CudaIpc> MakeCudaIpc() { return std::make_unique<NoCudaIpc>(); }

}  // namespace shoal::gpu
