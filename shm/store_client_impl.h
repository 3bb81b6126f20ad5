// Internal to shm/: StoreClient's state, split across store_client.cc (the
// table and service paths) and store_client_device.cc (device objects).
#ifndef SHOAL_SHM_STORE_CLIENT_IMPL_H_
#define SHOAL_SHM_STORE_CLIENT_IMPL_H_

#include <atomic>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "base/mutex.h"
#include "ipc/protocol.h"
#include "ipc/rpc_channel.h"
#include "shm/device_client.h"
#include "shm/layout.h"
#include "shm/object_table.h"
#include "shm/robust_lock.h"
#include "shm/segment.h"
#include "shm/store_client.h"

namespace shoal::shm {

class StoreClient::Impl {
 public:
  Impl(StoreClientOptions options) : options_(std::move(options)) {}

  absl::Status Connect() ABSL_LOCKS_EXCLUDED(mu_);
  void Disconnect() ABSL_LOCKS_EXCLUDED(mu_);

  // Sends `request` and waits for its reply, a `Reply` (RpcChannel::Call).
  template <typename Reply>
  absl::StatusOr<Reply> Call(ipc::Message request, absl::Duration timeout)
      ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    return channel_.Call<Reply>(std::move(request), timeout);
  }
  // Sends without waiting for a reply.
  void Notify(ipc::Message message) ABSL_LOCKS_EXCLUDED(mu_);

  absl::StatusOr<LockGuard> Lock();
  // Takes a reference on a sealed object locally. NotFound if it is absent,
  // unsealed, being deleted or spilled, or this client's reference table is
  // full (for the last two `*ask_service` is set: only the service reads an
  // object back or grows the table). Sets `*entry` to its table index.
  absl::StatusOr<ObjectBuffer> GetLocal(const ObjectId& id, uint32_t* entry,
                                        bool* ask_service);
  // StoreClient::Transfer's one try. When the receiver's reference table
  // has no room, sets `*full_buckets` to its size (for the service to grow
  // it) and returns the room error.
  absl::Status TransferOnce(const ObjectId& id, uint32_t to_client_slot,
                            uint32_t* full_buckets);
  absl::StatusOr<ObjectBuffer> ViewOf(const ipc::ObjectInfo& info);
  // Local fast path, then one request to the service for the rest, waiting
  // up to `timeout`; device objects are mapped with `cuda_stream`.
  std::vector<absl::StatusOr<ObjectBuffer>> GetMany(
      absl::Span<const ObjectId> ids, absl::Duration timeout, void* cuda_stream)
      ABSL_LOCKS_EXCLUDED(mu_, device_mu_);
  // Adds the objects of `got` that were read to this client's get counts
  // (its slot's ClientSlotHeader::gets and get_bytes).
  void CountGets(absl::Span<const absl::StatusOr<ObjectBuffer>> got);
  // Drops one reference now (the table update, and the service's reclaim
  // hint when it was the last of a deleted object); with mark_deleted, marks
  // the (sealed) object deleted first, as the service's Delete does.
  absl::Status ReleaseNow(const ObjectId& id, bool mark_deleted = false)
      ABSL_LOCKS_EXCLUDED(mu_);

  // ---- device objects (store_client_device.cc) ----
  struct DeviceHold {
    CudaLocation loc;
    int count = 0;  // references this client holds
    // Every stream a Get or the Seal of these references used (none: the
    // legacy default stream); a release waits for the work on all of them.
    std::vector<void*> streams;
  };
  DeviceClient& device() ABSL_LOCKS_EXCLUDED(device_mu_);
  // Whether device releases wait to be collected (cheap; no lock).
  bool device_pending() const {
    return device_made_.load(std::memory_order_acquire) &&
           device_->has_pending();
  }
  // Whether `id` is a device object this client holds.
  bool HoldsDevice(const ObjectId& id) ABSL_LOCKS_EXCLUDED(device_mu_);
  // After a reference to device object `entry` was taken: maps it, makes
  // `stream` wait for its writes, fixes `view` up (device pointer, this
  // process's ordinal). On failure the reference is dropped again.
  absl::Status FinishDeviceView(uint32_t entry, void* stream,
                                ObjectBuffer* view)
      ABSL_LOCKS_EXCLUDED(mu_, device_mu_);
  absl::StatusOr<MutableObjectBuffer> CreateDevice(const ObjectId& id,
                                                   const TensorMeta& meta,
                                                   uint32_t account)
      ABSL_LOCKS_EXCLUDED(device_mu_);
  absl::Status SealDevice(const ObjectId& id, void* stream)
      ABSL_LOCKS_EXCLUDED(device_mu_);
  // Releases one device reference, deferred until the work on every stream
  // that used it is done.
  absl::Status ReleaseDevice(const ObjectId& id)
      ABSL_LOCKS_EXCLUDED(device_mu_);
  absl::Status AbortDevice(const ObjectId& id) ABSL_LOCKS_EXCLUDED(device_mu_);
  // After Transfer handed a device reference away: unmaps once safe.
  void TransferredDevice(const ObjectId& id) ABSL_LOCKS_EXCLUDED(device_mu_);

  StoreClientOptions options_;
  std::unique_ptr<Segment> segment_;
  std::unique_ptr<ObjectTable> table_;
  uint32_t slot_ = 0;

 private:
  Mutex mu_;
  ipc::RpcChannel channel_ ABSL_GUARDED_BY(mu_);

  Mutex device_mu_;
  // Made once, on first use, then never replaced: read without the lock once
  // device_made_ is set.
  std::unique_ptr<DeviceClient> device_;
  std::atomic<bool> device_made_{false};
  absl::flat_hash_map<ObjectId, DeviceHold> holds_ ABSL_GUARDED_BY(device_mu_);
};

}  // namespace shoal::shm

#endif  // SHOAL_SHM_STORE_CLIENT_IMPL_H_
