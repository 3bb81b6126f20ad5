// The store service's device objects: Create on cuda:k allocates from the
// GPU's DeviceArena and records where the bytes are (CUDA IPC handles, offset,
// event, the GPU's UUID) in the object's table entry; everything after Create
// (Seal, Get, Release, Delete, eviction, a dead client's cleanup) is the same
// table bookkeeping as for CPU objects, with FreeEntry returning the block to
// its arena.
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "shm/store_service_impl.h"

namespace shoal::shm {
namespace {

ipc::Message Error(const absl::Status& s) { return ipc::ErrorReply{s}; }

}  // namespace

absl::StatusOr<DeviceArena*> StoreService::Impl::ArenaFor(
    const gpu::GpuUuid& uuid) {
  {
    MutexLock arenas(&arenas_mu_);
    if (auto it = arenas_.find(uuid); it != arenas_.end())
      return it->second.get();
  }
  if (cuda_ == nullptr) {
    cuda_ = options_.cuda != nullptr
                ? options_.cuda
                : std::shared_ptr<gpu::CudaIpc>(gpu::MakeCudaIpc());
  }
  if (!devices_) {
    absl::StatusOr<gpu::DeviceMap> map = gpu::DeviceMap::Read(*cuda_);
    if (!map.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the store cannot hold device objects: ", map.status().message()));
    }
    devices_ = *std::move(map);
  }
  std::optional<int> ordinal = devices_->OrdinalOf(uuid);
  if (!ordinal) {
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    return absl::FailedPreconditionError(absl::StrCat(
        "the store (pid ", getpid(), ") does not see ", uuid.ToString(),
        ": it sees ", devices_->count(), " GPU(s)",
        visible ? absl::StrCat(" (CUDA_VISIBLE_DEVICES=", visible, ")") : ""));
  }
  auto arena = std::make_unique<DeviceArena>(cuda_.get(), *ordinal, uuid,
                                             options_.device);
  DeviceArena* raw = arena.get();
  MutexLock arenas(&arenas_mu_);
  arenas_[uuid] = std::move(arena);
  SHOAL_LOG(INFO, "store: holding device objects on %s (device %d here)",
            uuid.ToString(), *ordinal);
  return raw;
}

absl::StatusOr<DeviceArena::Block> StoreService::Impl::AllocateDevice(
    DeviceArena& arena, uint64_t bytes) {
  absl::StatusOr<DeviceArena::Block> b = arena.Allocate(bytes);
  while (!b.ok() && absl::IsResourceExhausted(b.status())) {
    {
      auto lock = Lock();
      if (!lock.ok()) return lock.status();
      ReclaimDeletePending();
      if (!EvictOneDevice(&arena)) return b.status();
    }
    b = arena.Allocate(bytes);
  }
  return b;
}

bool StoreService::Impl::EvictOneDevice(const DeviceArena* arena) {
  uint32_t victim = 0;
  uint64_t oldest = ~uint64_t{0};
  bool found = false;
  for (const auto& [e, d] : device_blocks_) {
    const ObjectEntry* x = table_->entry(e);
    if ((arena != nullptr && d.arena != arena) ||
        static_cast<ObjectState>(x->state) != ObjectState::kSealed ||
        x->refcount != 0) {
      continue;
    }
    if (!found || x->lru_stamp < oldest) {
      victim = e;
      oldest = x->lru_stamp;
      found = true;
    }
  }
  if (!found) return false;
  ++evictions_;
  evicted_bytes_ += table_->entry(victim)->nbytes;
  FreeEntry(victim);
  return true;
}

StoreService::Impl::Reply StoreService::Impl::CreateDeviceObject(
    uint32_t slot, const ipc::CreateRequest& m) {
  if (m.meta.device.type != Device::Type::kCuda) {
    return Error(absl::InvalidArgumentError(
        absl::StrCat("unsupported device ", m.meta.device.ToString())));
  }
  if (m.device_uuid.size() != 16) {
    return Error(absl::InvalidArgumentError(
        "a CUDA object's create request needs the GPU's UUID"));
  }
  gpu::GpuUuid uuid;
  std::memcpy(uuid.bytes.data(), m.device_uuid.data(), 16);
  // As for host objects, the account is checked before anything is
  // allocated or evicted.
  if (m.account != 0) {
    absl::Status s = CheckAccount(m.account, DeviceArena::Reserved(m.nbytes));
    if (!s.ok()) return Error(s);
  }
  {
    // Only this thread inserts entries, so the id cannot appear between this
    // check and the insert below; the device allocation in between may take
    // a while (a new chunk) and must not hold the table lock.
    auto lock = Lock();
    if (!lock.ok()) return Error(lock.status());
    if (table_->Find(m.id)) {
      return Error(absl::AlreadyExistsError(
          absl::StrCat("object ", m.id.ToHex(), " exists")));
    }
  }
  absl::StatusOr<DeviceArena*> arena = ArenaFor(uuid);
  if (!arena.ok()) return Error(arena.status());
  absl::StatusOr<DeviceArena::Block> block = AllocateDevice(**arena, m.nbytes);
  if (!block.ok()) return Error(block.status());
  auto lock = Lock();
  if (!lock.ok()) {
    (*arena)->Free(*block);
    return Error(lock.status());
  }
  absl::StatusOr<uint32_t> e = TakeFreeEntry();
  if (!e.ok()) {
    (*arena)->Free(*block);
    return Error(e.status());
  }
  table_->Insert(m.id, *e);
  ObjectEntry* x = table_->entry(*e);
  x->offset = block->offset;
  x->nbytes = m.nbytes;
  x->alloc_bytes = block->bytes;
  x->creator_plus1 = slot + 1;
  table_->SetMeta(*e, m.meta);
  (*arena)->Describe(*block, &x->cuda);
  device_blocks_[*e] = DeviceBlock{*arena, *block};
  absl::Status s = AddRef(slot, *e, ObjectTable::RefKind::kMapped);
  if (!s.ok()) {
    FreeEntry(*e);
    return Error(s);
  }
  accounts_.Charge(m.account, *e, block->bytes);
  ++creates_;
  created_bytes_ += m.nbytes;
  return ipc::CreateReply{block->offset, *e, x->generation};
}

}  // namespace shoal::shm
