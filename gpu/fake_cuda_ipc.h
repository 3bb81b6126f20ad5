// FakeCudaIpc: a CudaIpc for tests of the store's device-object bookkeeping on
// machines without a GPU. "Device memory" is host memory, handles name fake
// allocations, and every process-crossing step happens inside one process
// (the test runs the store service and its clients on threads). It counts
// what was opened, closed, recorded and waited for, and lets a test hold
// streams "busy" to exercise deferred releases. Tests only.
#ifndef SHOAL_GPU_FAKE_CUDA_IPC_H_
#define SHOAL_GPU_FAKE_CUDA_IPC_H_

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "base/mutex.h"
#include "gpu/cuda_ipc.h"

namespace shoal::gpu {

class FakeCudaIpc : public CudaIpc {
 public:
  // `devices` GPUs with UUIDs {1,0,...}, {2,0,...}, ...; allocations beyond
  // `device_bytes` per device fail with ResourceExhausted.
  explicit FakeCudaIpc(int devices = 1, uint64_t device_bytes = 1ull << 40);
  ~FakeCudaIpc() override;

  // ---- CudaIpc ----
  absl::StatusOr<int> DeviceCount() override;
  absl::StatusOr<GpuUuid> DeviceUuid(int ordinal) override;
  absl::StatusOr<ExportedAllocation> Allocate(int ordinal, uint64_t bytes)
      ABSL_LOCKS_EXCLUDED(mu_) override;
  absl::Status Free(int ordinal, void* base) ABSL_LOCKS_EXCLUDED(mu_) override;
  absl::StatusOr<ExportedEvent> CreateEvent(int ordinal)
      ABSL_LOCKS_EXCLUDED(mu_) override;
  absl::Status DestroyEvent(int ordinal, void* event) override;
  absl::StatusOr<void*> OpenMemHandle(int ordinal, const IpcMemHandle& handle)
      ABSL_LOCKS_EXCLUDED(mu_) override;
  absl::Status CloseMemHandle(int ordinal, void* base)
      ABSL_LOCKS_EXCLUDED(mu_) override;
  absl::StatusOr<void*> OpenEventHandle(int ordinal,
                                        const IpcEventHandle& handle)
      ABSL_LOCKS_EXCLUDED(mu_) override;
  absl::Status CloseEvent(int ordinal, void* event)
      ABSL_LOCKS_EXCLUDED(mu_) override;
  absl::Status RecordEvent(int ordinal, void* event, void* stream)
      ABSL_LOCKS_EXCLUDED(mu_) override;
  absl::Status StreamWaitEvent(int ordinal, void* stream, void* event)
      ABSL_LOCKS_EXCLUDED(mu_) override;
  absl::StatusOr<void*> MarkStream(int ordinal, void* stream)
      ABSL_LOCKS_EXCLUDED(mu_) override;
  absl::StatusOr<bool> EventDone(int ordinal, void* event)
      ABSL_LOCKS_EXCLUDED(mu_) override;
  absl::Status WaitEvent(int ordinal, void* event)
      ABSL_LOCKS_EXCLUDED(mu_) override;
  absl::Status CopyToDevice(int ordinal, void* dst, const void* src,
                            uint64_t bytes, void* stream) override;
  absl::Status CopyToHost(int ordinal, void* dst, const void* src,
                          uint64_t bytes, void* stream) override;

  // ---- what a test looks at ----
  // While busy, stream marks made from now on stay unfinished (until the
  // streams are idle again, or WaitEvent waits on one).
  void SetStreamsBusy(bool busy) ABSL_LOCKS_EXCLUDED(mu_);
  // The same for one stream alone (nullptr: the legacy default stream).
  void SetStreamBusy(void* stream, bool busy) ABSL_LOCKS_EXCLUDED(mu_);
  // Live Allocate()s, and their total size.
  int allocations() const ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t allocated_bytes() const ABSL_LOCKS_EXCLUDED(mu_);
  // OpenMemHandle and CloseMemHandle calls; mappings opened and not closed.
  int mem_opens() const ABSL_LOCKS_EXCLUDED(mu_);
  int mem_closes() const ABSL_LOCKS_EXCLUDED(mu_);
  int open_mappings() const ABSL_LOCKS_EXCLUDED(mu_);
  // CreateEvent, RecordEvent and StreamWaitEvent calls.
  int events_created() const ABSL_LOCKS_EXCLUDED(mu_);
  int records() const ABSL_LOCKS_EXCLUDED(mu_);
  int stream_waits() const ABSL_LOCKS_EXCLUDED(mu_);
  // Unfinished stream marks alive.
  int pending_marks() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Allocation {
    int ordinal;
    uint64_t bytes;
    std::unique_ptr<uint8_t[]> memory;
  };
  struct Event {
    bool interprocess = false;
    bool done = true;
    void* stream = nullptr;  // a stream mark's stream
  };

  mutable Mutex mu_;
  const int devices_;
  const uint64_t device_bytes_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<uint64_t, Allocation> allocations_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, std::unique_ptr<Event>> events_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Event>> marks_ ABSL_GUARDED_BY(mu_);
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  std::set<void*> busy_streams_ ABSL_GUARDED_BY(mu_);
  int mem_opens_ ABSL_GUARDED_BY(mu_) = 0;
  int mem_closes_ ABSL_GUARDED_BY(mu_) = 0;
  int events_created_ ABSL_GUARDED_BY(mu_) = 0;
  int records_ ABSL_GUARDED_BY(mu_) = 0;
  int stream_waits_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace shoal::gpu

#endif  // SHOAL_GPU_FAKE_CUDA_IPC_H_
