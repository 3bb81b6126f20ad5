#include "shm/device_arena.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/status_macros.h"

namespace shoal::shm {
namespace {

constexpr uint64_t kDeviceAlignment = 256;  // cudaMalloc's own alignment
constexpr uint64_t kChunkGranule = 2ull
                                   << 20;  // big objects' chunks round to this

}  // namespace

DeviceArena::DeviceArena(gpu::CudaIpc* cuda, int ordinal,
                         const gpu::GpuUuid& uuid,
                         const DeviceArenaOptions& options)
    : cuda_(cuda), ordinal_(ordinal), uuid_(uuid), options_(options) {}

DeviceArena::~DeviceArena() {
  for (const gpu::ExportedEvent& e : events_) {
    (void)cuda_->DestroyEvent(ordinal_, e.event);
  }
  for (Chunk& c : chunks_) {
    absl::Status s = cuda_->Free(ordinal_, c.alloc.base);
    if (!s.ok()) {
      SHOAL_LOG(WARNING, "store: freeing a device chunk on %s: %s",
                uuid_.ToString(), s.ToString());
    }
  }
}

uint64_t DeviceArena::Reserved(uint64_t bytes) {
  return std::max<uint64_t>(
      kDeviceAlignment,
      (bytes + kDeviceAlignment - 1) / kDeviceAlignment * kDeviceAlignment);
}

absl::StatusOr<DeviceArena::Block> DeviceArena::Allocate(uint64_t bytes) {
  const uint64_t need = Reserved(bytes);
  Block b;
  bool placed = false;
  for (uint32_t i = 0; i < chunks_.size() && !placed; ++i) {
    absl::StatusOr<uint64_t> off = chunks_[i].allocator->Allocate(need);
    if (off.ok()) {
      b = Block{i, *off, need, 0};
      placed = true;
    }
  }
  if (!placed) {
    const uint64_t size =
        need <= options_.chunk_bytes
            ? options_.chunk_bytes
            : (need + kChunkGranule - 1) / kChunkGranule * kChunkGranule;
    if (capacity_ + size > options_.limit_bytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat("device store on ", uuid_.ToString(), " full: ", bytes,
                       " bytes requested, ", capacity_ - used_, " free of ",
                       capacity_.load(), " held (limit ", options_.limit_bytes,
                       "); everything else is referenced or unsealed"));
    }
    absl::StatusOr<gpu::ExportedAllocation> a = cuda_->Allocate(ordinal_, size);
    if (!a.ok()) {
      if (absl::IsResourceExhausted(a.status())) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "device store on ", uuid_.ToString(), ": the GPU has no ", size,
            " bytes free for a new chunk (the store holds ", capacity_.load(),
            ", ", capacity_ - used_, " of them free)"));
      }
      return a.status();
    }
    Chunk c;
    c.alloc = *a;
    c.bytes = size;
    c.allocator = std::make_unique<ArenaAllocator>(0, size, kDeviceAlignment);
    chunks_.push_back(std::move(c));
    capacity_ += size;
    const uint32_t i = static_cast<uint32_t>(chunks_.size() - 1);
    SHOAL_ASSIGN_OR_RETURN(uint64_t off, chunks_[i].allocator->Allocate(need));
    b = Block{i, off, need, 0};
  }
  absl::StatusOr<uint32_t> event = TakeEvent();
  if (!event.ok()) {
    chunks_[b.chunk].allocator->Free(b.offset, b.bytes);
    return event.status();
  }
  b.event = *event;
  used_ += b.bytes;
  return b;
}

void DeviceArena::Free(const Block& b) {
  chunks_[b.chunk].allocator->Free(b.offset, b.bytes);
  used_ -= b.bytes;
  free_events_.push_back(b.event);
}

void DeviceArena::Describe(const Block& b, CudaLocation* loc) const {
  const Chunk& c = chunks_[b.chunk];
  std::memcpy(loc->mem_handle, c.alloc.handle.bytes.data(),
              sizeof(loc->mem_handle));
  std::memcpy(loc->event_handle, events_[b.event].handle.bytes.data(),
              sizeof(loc->event_handle));
  loc->base_offset = b.offset;
  loc->pool_bytes = c.bytes;
  std::memcpy(loc->device_uuid, uuid_.bytes.data(), sizeof(loc->device_uuid));
  loc->has_event = 1;
}

absl::StatusOr<uint32_t> DeviceArena::TakeEvent() {
  if (!free_events_.empty()) {
    const uint32_t e = free_events_.back();
    free_events_.pop_back();
    return e;
  }
  SHOAL_ASSIGN_OR_RETURN(gpu::ExportedEvent e, cuda_->CreateEvent(ordinal_));
  events_.push_back(e);
  return static_cast<uint32_t>(events_.size() - 1);
}

}  // namespace shoal::shm
