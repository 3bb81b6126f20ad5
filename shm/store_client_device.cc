// StoreClient's device objects: creating one (the service allocates, this
// process maps), sealing (recording its event), getting (mapping, waiting on
// the event), and releasing (deferred until this process's work on it ends,
// on every stream that used it).
#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "shm/store_client_impl.h"

namespace shoal::shm {
namespace {

// Adds `stream` to `streams` (once).
void AddStream(std::vector<void*>& streams, void* stream) {
  if (std::find(streams.begin(), streams.end(), stream) == streams.end()) {
    streams.push_back(stream);
  }
}

// Runs `release` once the work queued so far on every stream of `streams`
// (none: the legacy default stream) has finished: one deferred release per
// stream, the last of which to run calls it.
void DeferUntilEveryStream(DeviceClient& dev, const CudaLocation& loc,
                           const std::vector<void*>& streams,
                           std::function<void()> release) {
  if (streams.size() <= 1) {
    dev.DeferRelease(loc, streams.empty() ? nullptr : streams.front(),
                     std::move(release));
    return;
  }
  auto left = std::make_shared<std::atomic<size_t>>(streams.size());
  auto last = std::make_shared<std::function<void()>>(std::move(release));
  for (void* stream : streams) {
    dev.DeferRelease(loc, stream, [left, last] {
      if (left->fetch_sub(1, std::memory_order_acq_rel) == 1) (*last)();
    });
  }
}

}  // namespace

DeviceClient& StoreClient::Impl::device() {
  if (!device_made_.load(std::memory_order_acquire)) {
    MutexLock lock(&device_mu_);
    if (device_ == nullptr) {
      device_ = std::make_unique<DeviceClient>(options_.cuda);
      device_made_.store(true, std::memory_order_release);
    }
  }
  return *device_;
}

bool StoreClient::Impl::HoldsDevice(const ObjectId& id) {
  if (!device_made_.load(std::memory_order_acquire)) return false;
  MutexLock lock(&device_mu_);
  return holds_.contains(id);
}

absl::Status StoreClient::Impl::FinishDeviceView(uint32_t entry, void* stream,
                                                 ObjectBuffer* view) {
  // Immutable while referenced: the service wrote it before the object was
  // visible, and frees the entry only when no reference is left.
  const CudaLocation loc = table_->entry(entry)->cuda;
  DeviceClient& dev = device();
  absl::StatusOr<DeviceClient::Mapped> m = dev.Use(loc);
  absl::Status s = m.status();
  if (s.ok()) {
    s = dev.WaitWritten(loc, stream);
    if (!s.ok()) dev.Unuse(loc);
  }
  if (!s.ok()) {
    (void)ReleaseNow(view->id);
    return s;
  }
  view->data = m->data;
  view->meta.device.index = m->ordinal;
  MutexLock lock(&device_mu_);
  DeviceHold& h = holds_[view->id];
  h.loc = loc;
  ++h.count;
  AddStream(h.streams, stream);
  return absl::OkStatus();
}

absl::StatusOr<MutableObjectBuffer> StoreClient::Impl::CreateDevice(
    const ObjectId& id, const TensorMeta& meta, uint32_t account) {
  if (device_pending()) device().Collect(/*wait=*/false);
  DeviceClient& dev = device();
  SHOAL_ASSIGN_OR_RETURN(gpu::GpuUuid uuid, dev.UuidOf(meta.device.index));
  const uint64_t nbytes = static_cast<uint64_t>(meta.NumBytes());
  ipc::CreateRequest request{id, meta, nbytes, ""};
  request.account = account;
  request.device_uuid.assign(reinterpret_cast<const char*>(uuid.bytes.data()),
                             uuid.bytes.size());
  SHOAL_ASSIGN_OR_RETURN(
      const ipc::CreateReply r,
      Call<ipc::CreateReply>(std::move(request), options_.rpc_timeout));
  if (r.entry >= table_->header()->max_objects) {
    return absl::InternalError(absl::StrCat("the store created device object ",
                                            id.ToHex(), " at entry ", r.entry,
                                            ", past its table's end"));
  }
  const CudaLocation loc = table_->entry(r.entry)->cuda;
  absl::StatusOr<DeviceClient::Mapped> m = dev.Use(loc);
  if (!m.ok()) {
    (void)Call<ipc::OkReply>(ipc::AbortRequest{id}, options_.rpc_timeout);
    return m.status();
  }
  {
    MutexLock lock(&device_mu_);
    DeviceHold& h = holds_[id];
    h.loc = loc;
    h.count = 1;
    h.streams.clear();
  }
  return MutableObjectBuffer{id, m->data, nbytes, meta};
}

absl::Status StoreClient::Impl::SealDevice(const ObjectId& id, void* stream) {
  CudaLocation loc;
  {
    MutexLock lock(&device_mu_);
    auto it = holds_.find(id);
    if (it == holds_.end()) return absl::OkStatus();
    loc = it->second.loc;
    AddStream(it->second.streams, stream);
  }
  return device().RecordWritten(loc, stream);
}

absl::Status StoreClient::Impl::ReleaseDevice(const ObjectId& id) {
  CudaLocation loc;
  std::vector<void*> streams;
  {
    MutexLock lock(&device_mu_);
    auto it = holds_.find(id);
    if (it == holds_.end()) return ReleaseNow(id);
    loc = it->second.loc;
    streams = it->second.streams;
    if (--it->second.count == 0) holds_.erase(it);
  }
  DeviceClient& dev = device();
  DeferUntilEveryStream(dev, loc, streams, [this, id, loc] {
    absl::Status s = ReleaseNow(id);
    if (!s.ok()) {
      SHOAL_LOG(WARNING, "store: deferred release of %s: %s", id.ToHex(),
                s.ToString());
    }
    device().Unuse(loc);
  });
  dev.Collect(/*wait=*/false);  // at once when the stream is idle
  return absl::OkStatus();
}

absl::Status StoreClient::Impl::AbortDevice(const ObjectId& id) {
  CudaLocation loc;
  std::vector<void*> streams;
  {
    MutexLock lock(&device_mu_);
    auto it = holds_.find(id);
    if (it == holds_.end()) {
      return Call<ipc::OkReply>(ipc::AbortRequest{id}, options_.rpc_timeout)
          .status();
    }
    loc = it->second.loc;
    streams = it->second.streams;
  }
  // The producer's writes may still be running: the block is freed at once
  // by the service, so wait for them first.
  DeviceClient& dev = device();
  DeferUntilEveryStream(dev, loc, streams, [] {});
  dev.Collect(/*wait=*/true);
  absl::Status s =
      Call<ipc::OkReply>(ipc::AbortRequest{id}, options_.rpc_timeout).status();
  if (s.ok()) {
    {
      MutexLock lock(&device_mu_);
      holds_.erase(id);
    }
    dev.Unuse(loc);
  }
  return s;
}

void StoreClient::Impl::TransferredDevice(const ObjectId& id) {
  CudaLocation loc;
  std::vector<void*> streams;
  {
    MutexLock lock(&device_mu_);
    auto it = holds_.find(id);
    if (it == holds_.end()) return;
    loc = it->second.loc;
    streams = it->second.streams;
    if (--it->second.count == 0) holds_.erase(it);
  }
  // The reference went to the other client already; only this process's
  // mapping waits for its work on the object.
  DeferUntilEveryStream(device(), loc, streams,
                        [this, loc] { device().Unuse(loc); });
  device().Collect(/*wait=*/false);
}

}  // namespace shoal::shm
