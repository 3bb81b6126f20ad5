// DeviceClient: what a StoreClient keeps, in its process, for device objects.
//
// - Mappings: an object's bytes live in a chunk of the store's device memory;
//   the chunk is opened (cudaIpcOpenMemHandle, about 1 ms) when this process
//   first takes a reference into it and closed when its last reference into
//   it is gone, so a get while the chunk is mapped costs no open.
// - Events: the producer records the object's interprocess event after its
//   writes (at Seal); a consumer's stream waits on it (at Get). Opened event
//   handles are cached for the client's life (the store reuses its events).
// - Deferred releases: a reference to a device object is dropped only once
//   the work this process queued on the object's stream has finished, so the
//   store never hands its block to a new object while a kernel here still
//   reads it. Pending releases are collected at every later store call, and
//   waited for when the client closes.
//
// Thread-safe.
#ifndef SHOAL_SHM_DEVICE_CLIENT_H_
#define SHOAL_SHM_DEVICE_CLIENT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "base/mutex.h"
#include "gpu/cuda_ipc.h"
#include "shm/layout.h"

namespace shoal::shm {

class DeviceClient {
 public:
  // `cuda` null: the real CUDA calls.
  explicit DeviceClient(std::shared_ptr<gpu::CudaIpc> cuda);
  // Waits for pending releases, closes every mapping and event.
  ~DeviceClient();

  struct Mapped {
    uint8_t* data = nullptr;  // the object's first byte, a device pointer
    int ordinal = 0;          // its GPU, as this process numbers it
  };
  // Maps the chunk `loc` is in (if this process has not) and takes one use of
  // it. Errors: FailedPrecondition (this process does not see the GPU), the
  // CUDA error of opening the handle.
  absl::StatusOr<Mapped> Use(const CudaLocation& loc) ABSL_LOCKS_EXCLUDED(mu_);
  // Drops one use; the chunk is closed when none is left.
  void Unuse(const CudaLocation& loc) ABSL_LOCKS_EXCLUDED(mu_);

  // Records the object's event on `stream` (nullptr: the legacy default
  // stream): the object is complete once the work queued there so far is.
  absl::Status RecordWritten(const CudaLocation& loc, void* stream)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Makes `stream` wait until the producer's recorded writes are done.
  absl::Status WaitWritten(const CudaLocation& loc, void* stream)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Runs `release` once the work queued on `stream` (on `loc`'s GPU) so far
  // has finished — at once if that cannot be known (then it waits first).
  void DeferRelease(const CudaLocation& loc, void* stream,
                    std::function<void()> release) ABSL_LOCKS_EXCLUDED(mu_);
  // Runs the releases whose work finished; with `wait`, all of them.
  void Collect(bool wait) ABSL_LOCKS_EXCLUDED(mu_);
  bool has_pending() const ABSL_LOCKS_EXCLUDED(mu_);

  // This process's ordinal of a GPU, and the UUID of an ordinal.
  absl::StatusOr<int> OrdinalOf(const gpu::GpuUuid& uuid)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<gpu::GpuUuid> UuidOf(int ordinal) ABSL_LOCKS_EXCLUDED(mu_);
  gpu::CudaIpc& cuda() { return *cuda_; }

 private:
  struct Chunk {
    void* base = nullptr;
    int ordinal = 0;
    int uses = 0;
  };
  struct Pending {
    int ordinal = 0;
    void* mark = nullptr;  // a stream mark; null: already safe
    std::function<void()> release;
  };
  using HandleKey = std::array<uint8_t, 64>;

  absl::Status EnsureDevices() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<int> OrdinalLocked(const CudaLocation& loc)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<void*> EventLocked(const CudaLocation& loc, int ordinal)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::shared_ptr<gpu::CudaIpc> cuda_;
  mutable Mutex mu_;
  std::optional<gpu::DeviceMap> devices_ ABSL_GUARDED_BY(mu_);
  std::map<HandleKey, Chunk> chunks_ ABSL_GUARDED_BY(mu_);
  std::map<HandleKey, void*> events_ ABSL_GUARDED_BY(mu_);
  std::vector<Pending> pending_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shoal::shm

#endif  // SHOAL_SHM_DEVICE_CLIENT_H_
