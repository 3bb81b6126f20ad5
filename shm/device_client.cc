#include "shm/device_client.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/status_macros.h"

namespace shoal::shm {
namespace {

std::array<uint8_t, 64> KeyOf(const uint8_t (&handle)[64]) {
  std::array<uint8_t, 64> k;
  std::memcpy(k.data(), handle, 64);
  return k;
}

gpu::GpuUuid UuidOfLocation(const CudaLocation& loc) {
  gpu::GpuUuid u;
  std::memcpy(u.bytes.data(), loc.device_uuid, 16);
  return u;
}

}  // namespace

DeviceClient::DeviceClient(std::shared_ptr<gpu::CudaIpc> cuda)
    : cuda_(cuda != nullptr
                ? std::move(cuda)
                : std::shared_ptr<gpu::CudaIpc>(gpu::MakeCudaIpc())) {}

DeviceClient::~DeviceClient() {
  Collect(/*wait=*/true);
  MutexLock lock(&mu_);
  for (auto& [key, c] : chunks_) (void)cuda_->CloseMemHandle(c.ordinal, c.base);
  for (auto& [key, e] : events_) (void)cuda_->CloseEvent(0, e);
}

absl::Status DeviceClient::EnsureDevices() {
  if (devices_) return absl::OkStatus();
  SHOAL_ASSIGN_OR_RETURN(gpu::DeviceMap map, gpu::DeviceMap::Read(*cuda_));
  devices_ = std::move(map);
  return absl::OkStatus();
}

absl::StatusOr<int> DeviceClient::OrdinalLocked(const CudaLocation& loc) {
  SHOAL_RETURN_IF_ERROR(EnsureDevices());
  const gpu::GpuUuid uuid = UuidOfLocation(loc);
  std::optional<int> ordinal = devices_->OrdinalOf(uuid);
  if (!ordinal) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the object is on ", uuid.ToString(), ", which this process (",
        devices_->count(),
        " visible GPU(s)) does not see; give it that GPU in "
        "CUDA_VISIBLE_DEVICES, or copy the object through host memory"));
  }
  return *ordinal;
}

absl::StatusOr<int> DeviceClient::OrdinalOf(const gpu::GpuUuid& uuid) {
  MutexLock lock(&mu_);
  SHOAL_RETURN_IF_ERROR(EnsureDevices());
  std::optional<int> ordinal = devices_->OrdinalOf(uuid);
  if (!ordinal) {
    return absl::FailedPreconditionError(
        absl::StrCat(uuid.ToString(), " is not visible to this process"));
  }
  return *ordinal;
}

absl::StatusOr<gpu::GpuUuid> DeviceClient::UuidOf(int ordinal) {
  MutexLock lock(&mu_);
  SHOAL_RETURN_IF_ERROR(EnsureDevices());
  if (devices_->count() == 0) {
    return absl::FailedPreconditionError(
        "device objects need a GPU, and this process sees none "
        "(CUDA_VISIBLE_DEVICES, or no NVIDIA driver)");
  }
  if (ordinal < 0 || ordinal >= devices_->count()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda:", ordinal, " does not exist: this process sees ",
                     devices_->count(), " GPU(s)"));
  }
  return devices_->uuid(ordinal);
}

absl::StatusOr<DeviceClient::Mapped> DeviceClient::Use(
    const CudaLocation& loc) {
  MutexLock lock(&mu_);
  SHOAL_ASSIGN_OR_RETURN(int ordinal, OrdinalLocked(loc));
  const HandleKey key = KeyOf(loc.mem_handle);
  auto it = chunks_.find(key);
  if (it == chunks_.end()) {
    gpu::IpcMemHandle h;
    std::memcpy(h.bytes.data(), loc.mem_handle, 64);
    absl::StatusOr<void*> base = cuda_->OpenMemHandle(ordinal, h);
    if (!base.ok()) {
      return absl::Status(
          base.status().code(),
          absl::StrCat(
              "mapping a device object's memory: ", base.status().message(),
              " (a handle does not open in the store's own process)"));
    }
    it = chunks_.emplace(key, Chunk{*base, ordinal, 0}).first;
  }
  ++it->second.uses;
  return Mapped{static_cast<uint8_t*>(it->second.base) + loc.base_offset,
                ordinal};
}

void DeviceClient::Unuse(const CudaLocation& loc) {
  MutexLock lock(&mu_);
  auto it = chunks_.find(KeyOf(loc.mem_handle));
  if (it == chunks_.end() || --it->second.uses > 0) return;
  absl::Status s = cuda_->CloseMemHandle(it->second.ordinal, it->second.base);
  if (!s.ok())
    SHOAL_LOG(WARNING, "store: closing a device mapping: %s", s.ToString());
  chunks_.erase(it);
}

absl::StatusOr<void*> DeviceClient::EventLocked(const CudaLocation& loc,
                                                int ordinal) {
  if (!loc.has_event) return nullptr;
  const HandleKey key = KeyOf(loc.event_handle);
  if (auto it = events_.find(key); it != events_.end()) return it->second;
  gpu::IpcEventHandle h;
  std::memcpy(h.bytes.data(), loc.event_handle, 64);
  SHOAL_ASSIGN_OR_RETURN(void* e, cuda_->OpenEventHandle(ordinal, h));
  events_[key] = e;
  return e;
}

absl::Status DeviceClient::RecordWritten(const CudaLocation& loc,
                                         void* stream) {
  MutexLock lock(&mu_);
  SHOAL_ASSIGN_OR_RETURN(int ordinal, OrdinalLocked(loc));
  SHOAL_ASSIGN_OR_RETURN(void* event, EventLocked(loc, ordinal));
  if (event == nullptr) return absl::OkStatus();
  return cuda_->RecordEvent(ordinal, event, stream);
}

absl::Status DeviceClient::WaitWritten(const CudaLocation& loc, void* stream) {
  MutexLock lock(&mu_);
  SHOAL_ASSIGN_OR_RETURN(int ordinal, OrdinalLocked(loc));
  SHOAL_ASSIGN_OR_RETURN(void* event, EventLocked(loc, ordinal));
  if (event == nullptr) return absl::OkStatus();
  return cuda_->StreamWaitEvent(ordinal, stream, event);
}

void DeviceClient::DeferRelease(const CudaLocation& loc, void* stream,
                                std::function<void()> release) {
  void* mark = nullptr;
  int ordinal = 0;
  {
    MutexLock lock(&mu_);
    absl::StatusOr<int> o = OrdinalLocked(loc);
    if (o.ok()) {
      ordinal = *o;
      absl::StatusOr<void*> m = cuda_->MarkStream(ordinal, stream);
      if (m.ok()) {
        mark = *m;
        pending_.push_back(Pending{ordinal, mark, std::move(release)});
        return;
      }
      SHOAL_LOG(WARNING, "store: marking a stream for a release: %s",
                m.status().ToString());
    }
  }
  // Nothing to wait on (or no way to know): release now.
  release();
}

bool DeviceClient::has_pending() const {
  MutexLock lock(&mu_);
  return !pending_.empty();
}

void DeviceClient::Collect(bool wait) {
  std::vector<std::function<void()>> ready;
  {
    MutexLock lock(&mu_);
    for (auto it = pending_.begin(); it != pending_.end();) {
      bool done = true;
      if (it->mark != nullptr) {
        if (wait) (void)cuda_->WaitEvent(it->ordinal, it->mark);
        absl::StatusOr<bool> d = cuda_->EventDone(it->ordinal, it->mark);
        done = !d.ok() || *d;  // an error: the context is gone, nothing runs
      }
      if (!done) {
        ++it;
        continue;
      }
      if (it->mark != nullptr) (void)cuda_->CloseEvent(it->ordinal, it->mark);
      ready.push_back(std::move(it->release));
      it = pending_.erase(it);
    }
  }
  for (auto& r : ready) r();
}

}  // namespace shoal::shm
