#include "shm/object_table.h"

#include <x86intrin.h>

#include <cstring>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace shoal::shm {
namespace {

// Marks AddRef's errors that a larger reference table cures.
constexpr absl::string_view kRefRoomPayload = "shoal.shm/ref-room";

// Spreads consecutive entry indices over a client's reference table.
uint32_t RefHome(uint32_t e, uint32_t mask) {
  return static_cast<uint32_t>(
             (static_cast<uint64_t>(e + 1) * 0x9E3779B97F4A7C15ULL) >> 32) &
         mask;
}

}  // namespace

absl::StatusOr<Layout> ComputeLayout(const LayoutParams& p) {
  if (p.max_objects == 0 || p.max_clients == 0 || p.refs_per_client == 0) {
    return absl::InvalidArgumentError("store limits must be positive");
  }
  if (p.max_clients > kMaxClientsLimit) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-clients may be at most ", kMaxClientsLimit));
  }
  Layout l;
  l.max_objects = p.max_objects;
  l.index_buckets = NextPowerOfTwo(2 * p.max_objects);
  l.max_clients = p.max_clients;
  l.refs_per_client = NextPowerOfTwo(p.refs_per_client);
  l.table_offset = kPageSize;
  l.index_offset =
      AlignUp(l.table_offset + uint64_t{l.max_objects} * sizeof(ObjectEntry),
              kPageSize);
  l.clients_offset = AlignUp(
      l.index_offset + uint64_t{l.index_buckets} * sizeof(uint32_t), kPageSize);
  l.client_slot_bytes =
      AlignUp(sizeof(ClientSlotHeader) +
                  uint64_t{l.refs_per_client} * sizeof(RefBucket),
              64);
  l.arena_offset = AlignUp(
      l.clients_offset + l.max_clients * l.client_slot_bytes, kPageSize);
  constexpr uint64_t kMinArena = uint64_t{1} << 20;
  if (p.segment_bytes < l.arena_offset + kMinArena) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a store of ", p.segment_bytes, " bytes is too small: its tables need ",
        l.arena_offset, " bytes plus at least ", kMinArena,
        " for data; pass a larger --store-bytes or lower --max-clients / "
        "--max-objects"));
  }
  l.arena_bytes = p.segment_bytes - l.arena_offset;
  return l;
}

void ObjectTable::Format(const Layout& l) {
  header_->max_objects = l.max_objects;
  header_->index_buckets = l.index_buckets;
  header_->max_clients = l.max_clients;
  header_->refs_per_client = l.refs_per_client;
  header_->table_offset = l.table_offset;
  header_->index_offset = l.index_offset;
  header_->clients_offset = l.clients_offset;
  header_->client_slot_bytes = l.client_slot_bytes;
  header_->arena_offset = l.arena_offset;
  header_->arena_bytes = l.arena_bytes;
  // Nothing else to write: a fresh tmpfs file reads as zeros, which is every
  // field's empty value, and leaving the table's pages untouched keeps
  // start-up from faulting in tens of MiB it may never use.
}

std::optional<uint32_t> ObjectTable::Find(const ObjectId& id) const {
  const uint32_t mask = header_->index_buckets - 1;
  uint32_t* idx = index();
  for (uint32_t i = static_cast<uint32_t>(id.Hash()) & mask;;
       i = (i + 1) & mask) {
    const uint32_t v = idx[i];
    if (v == 0) return std::nullopt;
    if (entry(v - 1)->id == id) return v - 1;
  }
}

void ObjectTable::Insert(const ObjectId& id, uint32_t e) {
  const uint32_t mask = header_->index_buckets - 1;
  uint32_t* idx = index();
  uint32_t i = static_cast<uint32_t>(id.Hash()) & mask;
  while (idx[i] != 0) i = (i + 1) & mask;
  ObjectEntry* x = entry(e);
  x->id = id;
  x->state = static_cast<uint32_t>(ObjectState::kCreated);
  x->generation++;
  x->refcount = 0;
  x->flags = 0;
  x->creator_plus1 = 0;
  x->mappers = 0;
  idx[i] = e + 1;
}

void ObjectTable::Remove(uint32_t e) {
  const uint32_t mask = header_->index_buckets - 1;
  uint32_t* idx = index();
  ObjectEntry* x = entry(e);
  uint32_t i = static_cast<uint32_t>(x->id.Hash()) & mask;
  while (idx[i] != e + 1) i = (i + 1) & mask;
  // Backward-shift deletion keeps probe chains intact without tombstones.
  uint32_t hole = i;
  for (uint32_t j = (hole + 1) & mask; idx[j] != 0; j = (j + 1) & mask) {
    const uint32_t home =
        static_cast<uint32_t>(entry(idx[j] - 1)->id.Hash()) & mask;
    // Move j into the hole if its home is not in (hole, j] cyclically.
    const bool home_in_range =
        hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
    if (!home_in_range) {
      idx[hole] = idx[j];
      hole = j;
    }
  }
  idx[hole] = 0;
  x->state = static_cast<uint32_t>(ObjectState::kFree);
  x->id = ObjectId();
  x->refcount = 0;
  x->flags = 0;
  x->creator_plus1 = 0;
  x->mappers = 0;
  x->offset = x->nbytes = x->alloc_bytes = 0;
}

void ObjectTable::SetMeta(uint32_t e, const TensorMeta& meta) {
  ObjectEntry* x = entry(e);
  x->dtype = static_cast<uint8_t>(meta.dtype);
  x->rank = static_cast<uint8_t>(meta.shape.size());
  x->device_type = static_cast<uint8_t>(meta.device.type);
  x->device_index = meta.device.index;
  x->has_strides = meta.strides.empty() ? 0 : 1;
  for (size_t i = 0; i < meta.shape.size(); ++i) {
    x->shape[i] = meta.shape[i];
    x->strides[i] = meta.strides.empty() ? 0 : meta.strides[i];
  }
}

TensorMeta ObjectTable::GetMeta(uint32_t e) const {
  const ObjectEntry* x = entry(e);
  TensorMeta m;
  m.dtype = static_cast<DType>(x->dtype);
  m.device.type = static_cast<Device::Type>(x->device_type);
  m.device.index = x->device_index;
  m.shape.assign(x->shape, x->shape + x->rank);
  if (x->has_strides) m.strides.assign(x->strides, x->strides + x->rank);
  return m;
}

RefBucket* ObjectTable::FindRef(uint32_t s, uint32_t e) const {
  const uint32_t mask = RefBuckets(s) - 1;
  RefBucket* b = refs(s);
  uint32_t i = RefHome(e, mask);
  for (uint32_t probe = 0; probe < kMaxRefProbes && probe <= mask;
       ++probe, i = (i + 1) & mask) {
    if (b[i].entry_plus1 == e + 1) return &b[i];
    if (b[i].entry_plus1 == 0) return nullptr;
  }
  return nullptr;
}

uint32_t ObjectTable::HeldBy(uint32_t s, uint32_t e) const {
  const RefBucket* b = FindRef(s, e);
  return b == nullptr ? 0 : b->count & kRefCountMask;
}

bool ObjectTable::MappedBy(uint32_t s, uint32_t e) const {
  const RefBucket* b = FindRef(s, e);
  return b != nullptr && (b->count & kRefMapped) != 0;
}

void ObjectTable::Stamp(uint32_t e) {
  // The CPU's invariant time-stamp counter instead of a shared counter: no
  // cache line that every client writes, no memory touched to read it (not
  // even the vDSO's pages, which a cold get would fault through the TLB for),
  // and nothing to journal (a stamp left by an operation that was rolled back
  // only makes the object look recently used).
  entry(e)->lru_stamp = __rdtsc();
}

bool ObjectTable::IsRefRoomError(const absl::Status& s) {
  return absl::IsResourceExhausted(s) &&
         s.GetPayload(kRefRoomPayload).has_value();
}

absl::Status ObjectTable::RefRoomError(uint32_t s) const {
  const uint32_t buckets = RefBuckets(s);
  if (buckets >= MaxRefBuckets()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("this client already holds ", LiveRefs(s),
                     " distinct objects, as many as its reference table of ",
                     buckets, " buckets takes; release some first"));
  }
  absl::Status room = absl::ResourceExhaustedError(
      absl::StrCat("this client's reference table (", buckets,
                   " buckets) has no room for another object"));
  room.SetPayload(kRefRoomPayload, absl::Cord("grow"));
  return room;
}

bool ObjectTable::MoveRefs(uint32_t s, uint64_t offset, uint32_t buckets) {
  RefBucket* to = reinterpret_cast<RefBucket*>(base_ + offset);
  std::memset(to, 0, uint64_t{buckets} * sizeof(RefBucket));
  const uint32_t mask = buckets - 1;
  const RefBucket* from = refs(s);
  const uint32_t n = RefBuckets(s);
  for (uint32_t i = 0; i < n; ++i) {
    if (from[i].entry_plus1 == 0 || (from[i].count & kRefCountMask) == 0)
      continue;
    uint32_t j = RefHome(from[i].entry_plus1 - 1, mask);
    uint32_t probe = 0;
    while (to[j].entry_plus1 != 0 && probe < kMaxRefProbes) {
      j = (j + 1) & mask;
      ++probe;
    }
    if (probe == kMaxRefProbes) return false;
    to[j] = from[i];
  }
  ClientSlotHeader* sh = slot(s);
  sh->refs_offset = offset;
  sh->refs_buckets = buckets;
  header_->live_refs[s] |= kLiveRefsMoved;
  return true;
}

absl::Status ObjectTable::AddRef(uint32_t s, uint32_t e, RefKind kind,
                                 JournaledWriter* journal) {
  uint32_t* live = &header_->live_refs[s];
  RefBucket* b = FindRef(s, e);
  if (b == nullptr || (b->count & kRefCountMask) == 0) {
    if (LiveRefs(s) >= RefBuckets(s) / 2) return RefRoomError(s);
  }
  if (b == nullptr) {
    // Reuse the first never-used or released bucket within the probe window.
    const uint32_t mask = RefBuckets(s) - 1;
    RefBucket* table = refs(s);
    uint32_t i = RefHome(e, mask);
    for (uint32_t probe = 0; probe < kMaxRefProbes && probe <= mask;
         ++probe, i = (i + 1) & mask) {
      if (table[i].entry_plus1 == 0 || (table[i].count & kRefCountMask) == 0) {
        b = &table[i];
        break;
      }
    }
    if (b == nullptr) return RefRoomError(s);
    Store32(journal, &b->entry_plus1, e + 1);
  }
  // A released bucket keeps no mapped bit (DropRef clears it with the last
  // reference), so the count below starts from 0 or from live references.
  if ((b->count & kRefCountMask) == 0) Store32(journal, live, *live + 1);
  ObjectEntry* x = entry(e);
  uint32_t count = b->count + 1;
  if (kind == RefKind::kMapped && (b->count & kRefMapped) == 0) {
    count |= kRefMapped;
    Store32(journal, &x->mappers, x->mappers + 1);
  }
  Store32(journal, &b->count, count);
  Store32(journal, &x->refcount, x->refcount + 1);
  Stamp(e);
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> ObjectTable::DropRef(uint32_t s, uint32_t e,
                                              JournaledWriter* journal) {
  RefBucket* b = FindRef(s, e);
  if (b == nullptr || (b->count & kRefCountMask) == 0) {
    return absl::FailedPreconditionError(
        "this client holds no reference to the object");
  }
  uint32_t* live = &header_->live_refs[s];
  ObjectEntry* x = entry(e);
  if ((b->count & kRefCountMask) == 1) {
    // The last one: the bucket is free again, mapped bit and all.
    if (b->count & kRefMapped) Store32(journal, &x->mappers, x->mappers - 1);
    Store32(journal, &b->count, 0);
    Store32(journal, live, *live - 1);
  } else {
    Store32(journal, &b->count, b->count - 1);
  }
  Store32(journal, &x->refcount, x->refcount - 1);
  Stamp(e);
  return x->refcount;
}

void ObjectTable::ClearSlot(uint32_t s) {
  ClientSlotHeader* sh = slot(s);
  header_->live_refs[s] = 0;  // the slot's own table again
  sh->refs_offset = 0;
  sh->refs_buckets = 0;
  std::memset(refs(s), 0,
              uint64_t{header_->refs_per_client} * sizeof(RefBucket));
  sh->pid = 0;
  sh->session = 0;
  sh->name[0] = '\0';
  sh->gets = 0;
  sh->get_bytes = 0;
  sh->in_use = 0;
}

}  // namespace shoal::shm
