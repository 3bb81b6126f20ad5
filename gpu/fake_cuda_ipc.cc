#include "gpu/fake_cuda_ipc.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace shoal::gpu {
namespace {

constexpr uint64_t kMemMagic = 0x4d454d454b414621ULL;  // "!FAKEMEM"
constexpr uint64_t kEventMagic = 0x5645454b414621ULL;  // "!FAKEEV"

template <typename Handle>
Handle Encode(uint64_t magic, uint64_t id) {
  Handle h;
  std::memcpy(h.bytes.data(), &magic, 8);
  std::memcpy(h.bytes.data() + 8, &id, 8);
  return h;
}

template <typename Handle>
absl::StatusOr<uint64_t> Decode(uint64_t magic, const Handle& h) {
  uint64_t m = 0, id = 0;
  std::memcpy(&m, h.bytes.data(), 8);
  std::memcpy(&id, h.bytes.data() + 8, 8);
  if (m != magic) return absl::InvalidArgumentError("not a fake CUDA handle");
  return id;
}

}  // namespace

FakeCudaIpc::FakeCudaIpc(int devices, uint64_t device_bytes)
    : devices_(devices), device_bytes_(device_bytes) {}
FakeCudaIpc::~FakeCudaIpc() = default;

absl::StatusOr<int> FakeCudaIpc::DeviceCount() { return devices_; }

absl::StatusOr<GpuUuid> FakeCudaIpc::DeviceUuid(int ordinal) {
  if (ordinal < 0 || ordinal >= devices_) {
    return absl::InvalidArgumentError(
        absl::StrCat("fake device ", ordinal, " out of range"));
  }
  GpuUuid u;
  u.bytes[0] = static_cast<uint8_t>(ordinal + 1);
  return u;
}

absl::StatusOr<ExportedAllocation> FakeCudaIpc::Allocate(int ordinal,
                                                         uint64_t bytes) {
  MutexLock lock(&mu_);
  uint64_t used = 0;
  for (const auto& [id, a] : allocations_) {
    if (a.ordinal == ordinal) used += a.bytes;
  }
  if (used + bytes > device_bytes_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("fake device ", ordinal, " is out of memory"));
  }
  const uint64_t id = next_id_++;
  Allocation& a = allocations_[id];
  a.ordinal = ordinal;
  a.bytes = bytes;
  a.memory.reset(new uint8_t[bytes == 0 ? 1 : bytes]);
  return ExportedAllocation{a.memory.get(),
                            Encode<IpcMemHandle>(kMemMagic, id)};
}

absl::Status FakeCudaIpc::Free(int, void* base) {
  MutexLock lock(&mu_);
  for (auto it = allocations_.begin(); it != allocations_.end(); ++it) {
    if (it->second.memory.get() == base) {
      allocations_.erase(it);
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError("fake Free of an unknown pointer");
}

absl::StatusOr<ExportedEvent> FakeCudaIpc::CreateEvent(int) {
  MutexLock lock(&mu_);
  const uint64_t id = next_id_++;
  auto e = std::make_unique<Event>();
  e->interprocess = true;
  Event* raw = e.get();
  events_[id] = std::move(e);
  ++events_created_;
  return ExportedEvent{raw, Encode<IpcEventHandle>(kEventMagic, id)};
}

absl::Status FakeCudaIpc::DestroyEvent(int, void*) { return absl::OkStatus(); }

absl::StatusOr<void*> FakeCudaIpc::OpenMemHandle(int,
                                                 const IpcMemHandle& handle) {
  MutexLock lock(&mu_);
  absl::StatusOr<uint64_t> id = Decode(kMemMagic, handle);
  if (!id.ok()) return id.status();
  auto it = allocations_.find(*id);
  if (it == allocations_.end()) {
    return absl::InvalidArgumentError("fake handle of a freed allocation");
  }
  ++mem_opens_;
  return static_cast<void*>(it->second.memory.get());
}

absl::Status FakeCudaIpc::CloseMemHandle(int, void*) {
  MutexLock lock(&mu_);
  ++mem_closes_;
  return absl::OkStatus();
}

absl::StatusOr<void*> FakeCudaIpc::OpenEventHandle(
    int, const IpcEventHandle& handle) {
  MutexLock lock(&mu_);
  absl::StatusOr<uint64_t> id = Decode(kEventMagic, handle);
  if (!id.ok()) return id.status();
  auto it = events_.find(*id);
  if (it == events_.end()) return absl::InvalidArgumentError("unknown event");
  return static_cast<void*>(it->second.get());
}

absl::Status FakeCudaIpc::CloseEvent(int, void* event) {
  MutexLock lock(&mu_);
  for (auto it = marks_.begin(); it != marks_.end(); ++it) {
    if (it->get() == event) {
      marks_.erase(it);
      break;
    }
  }
  return absl::OkStatus();
}

absl::Status FakeCudaIpc::RecordEvent(int, void*, void*) {
  MutexLock lock(&mu_);
  ++records_;
  return absl::OkStatus();
}

absl::Status FakeCudaIpc::StreamWaitEvent(int, void*, void*) {
  MutexLock lock(&mu_);
  ++stream_waits_;
  return absl::OkStatus();
}

absl::StatusOr<void*> FakeCudaIpc::MarkStream(int, void* stream) {
  MutexLock lock(&mu_);
  auto e = std::make_unique<Event>();
  e->done = !busy_ && !busy_streams_.contains(stream);
  e->stream = stream;
  marks_.push_back(std::move(e));
  return static_cast<void*>(marks_.back().get());
}

absl::StatusOr<bool> FakeCudaIpc::EventDone(int, void* event) {
  MutexLock lock(&mu_);
  return static_cast<Event*>(event)->done;
}

absl::Status FakeCudaIpc::WaitEvent(int, void* event) {
  MutexLock lock(&mu_);
  static_cast<Event*>(event)->done = true;
  return absl::OkStatus();
}

absl::Status FakeCudaIpc::CopyToDevice(int, void* dst, const void* src,
                                       uint64_t bytes, void*) {
  std::memcpy(dst, src, bytes);
  return absl::OkStatus();
}

absl::Status FakeCudaIpc::CopyToHost(int, void* dst, const void* src,
                                     uint64_t bytes, void*) {
  std::memcpy(dst, src, bytes);
  return absl::OkStatus();
}

void FakeCudaIpc::SetStreamsBusy(bool busy) {
  MutexLock lock(&mu_);
  busy_ = busy;
  if (!busy) {
    for (auto& m : marks_) {
      if (!busy_streams_.contains(m->stream)) m->done = true;
    }
  }
}

void FakeCudaIpc::SetStreamBusy(void* stream, bool busy) {
  MutexLock lock(&mu_);
  if (busy) {
    busy_streams_.insert(stream);
    return;
  }
  busy_streams_.erase(stream);
  if (busy_) return;
  for (auto& m : marks_) {
    if (m->stream == stream) m->done = true;
  }
}

int FakeCudaIpc::allocations() const {
  MutexLock lock(&mu_);
  return static_cast<int>(allocations_.size());
}
uint64_t FakeCudaIpc::allocated_bytes() const {
  MutexLock lock(&mu_);
  uint64_t n = 0;
  for (const auto& [id, a] : allocations_) n += a.bytes;
  return n;
}
int FakeCudaIpc::mem_opens() const {
  MutexLock lock(&mu_);
  return mem_opens_;
}
int FakeCudaIpc::mem_closes() const {
  MutexLock lock(&mu_);
  return mem_closes_;
}
int FakeCudaIpc::open_mappings() const {
  MutexLock lock(&mu_);
  return mem_opens_ - mem_closes_;
}
int FakeCudaIpc::events_created() const {
  MutexLock lock(&mu_);
  return events_created_;
}
int FakeCudaIpc::records() const {
  MutexLock lock(&mu_);
  return records_;
}
int FakeCudaIpc::stream_waits() const {
  MutexLock lock(&mu_);
  return stream_waits_;
}
int FakeCudaIpc::pending_marks() const {
  MutexLock lock(&mu_);
  int n = 0;
  for (const auto& m : marks_) n += !m->done;
  return n;
}

}  // namespace shoal::gpu
