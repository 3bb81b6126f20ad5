// The store service's spilling: sealed objects that clients hold but no
// process maps leave the arena for files in the spill folder when an
// allocation does not fit, least recently used first, and come back at their
// next Get. The service decides and finishes each move on its thread with
// the segment lock held; the file I/O runs on the spill thread (SpillIo)
// without it. An object being written out stays readable in the arena; one
// being read back is kSpilled until it is done, so a client that finds it
// asks the service, which answers once it is back.

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/runtime_dir.h"
#include "base/status_macros.h"
#include "shm/store_service_impl.h"

namespace shoal::shm {
namespace {

// Bytes spilled at least per round beyond the allocation that asked (and at
// most a sixteenth of the arena): each round scans the table, so a stream of
// creates into a full store pays for the scan once per batch, not per object.
constexpr uint64_t kSpillBatch = uint64_t{64} << 20;

struct Candidate {
  uint64_t stamp;
  uint32_t e;
};

void SortByAge(std::vector<Candidate>* c) {
  std::sort(c->begin(), c->end(), [](const Candidate& a, const Candidate& b) {
    return a.stamp < b.stamp;
  });
}

}  // namespace

absl::Status StoreService::Impl::MakeSpillFolder() {
  if (options_.spill_bytes == 0) return absl::OkStatus();
  std::string parent = options_.spill_dir;
  if (parent.empty()) {
    SHOAL_ASSIGN_OR_RETURN(parent, JobDir(options_.job_id));
  }
  const uint64_t quota = options_.spill_bytes == StoreOptions::kSpillBytesAuto
                             ? SpillFolder::kQuotaAuto
                             : options_.spill_bytes;
  SHOAL_ASSIGN_OR_RETURN(spill_,
                         SpillFolder::Create(parent, options_.job_id, quota));
  SHOAL_ASSIGN_OR_RETURN(spill_io_, SpillIo::Start(spill_.get()));
  if (spill_->on_tmpfs()) {
    SHOAL_LOG(WARNING,
              "store: the spill folder %s is on a tmpfs: spilled objects "
              "still take memory there; pass --spill-dir on a disk",
              spill_->path());
  }
  SHOAL_LOG(DEBUG, "store: spills to %s, up to %d bytes", spill_->path(),
            spill_->quota_bytes());
  return absl::OkStatus();
}

std::string StoreService::Impl::SpillSummary() const {
  if (spill_ == nullptr) return "";
  std::string s =
      absl::StrCat("; the spill folder holds ", spill_->used_bytes(),
                   " bytes in ", spill_->files(), " objects of its ",
                   spill_->quota_bytes(), " (--spill-bytes)");
  if (!last_spill_error_.ok()) {
    absl::StrAppend(&s, "; spilling failed: ", last_spill_error_.message());
  }
  return s;
}

uint64_t StoreService::Impl::StartSpill(uint64_t bytes) {
  std::vector<Candidate> candidates;
  for (uint32_t e = 0; e < table_->header()->max_objects; ++e) {
    const ObjectEntry* x = table_->entry(e);
    if (x->state == static_cast<uint32_t>(ObjectState::kSealed) &&
        x->refcount > 0 && x->mappers == 0 &&
        !(x->flags & (kFlagDeletePending | kFlagMoving)) && x->nbytes > 0 &&
        device_blocks_.count(e) == 0) {
      candidates.push_back({x->lru_stamp, e});
    }
  }
  SortByAge(&candidates);
  const uint64_t target = allocator_->RoundUp(bytes) +
                          std::min(kSpillBatch, allocator_->capacity() / 16);
  uint64_t started = 0;
  last_spill_error_ = absl::OkStatus();
  for (const Candidate& c : candidates) {
    if (spilling_bytes_ >= target) break;
    ObjectEntry* x = table_->entry(c.e);
    if (!spill_->Fits(x->nbytes)) DropSpilled(x->nbytes, false);
    absl::Status s = spill_->Reserve(x->nbytes);
    if (!s.ok()) {
      last_spill_error_ = s;
      break;
    }
    x->flags |= kFlagMoving;
    SpillMove m;
    m.kind = SpillMove::Kind::kOut;
    m.entry = c.e;
    m.id = x->id;
    m.data = segment_->base() + x->offset;
    m.offset = x->offset;
    m.alloc_bytes = x->alloc_bytes;
    m.nbytes = x->nbytes;
    const uint64_t seq = spill_io_->Submit(std::move(m));
    in_flight_[seq] = c.e;
    moving_[c.e] = seq;
    spilling_bytes_ += x->alloc_bytes;
    started += x->alloc_bytes;
  }
  return started;
}

absl::Status StoreService::Impl::StartRestore(uint32_t e, bool retry,
                                              bool front) {
  ObjectEntry* x = table_->entry(e);
  if (x->flags & kFlagMoving) return absl::OkStatus();  // being read back
  // A read-back already waiting for room is retried from its RoomWaiter.
  if (!retry && restoring_.count(e) != 0) return SpillWait();
  restoring_.insert(e);
  // Others may be spilled for its room even when the quota is full: its own
  // file goes once it is back, so the quota holds again afterwards.
  spill_->Lend(x->nbytes);
  absl::StatusOr<uint64_t> offset = AllocateWithEviction(x->nbytes);
  spill_->Lend(0);
  if (IsSpillWait(offset.status())) {
    RoomWaiter w;
    w.entry = e;
    w.generation = x->generation;
    w.id = x->id;
    if (front) {
      room_waiters_.push_front(std::move(w));
    } else {
      room_waiters_.push_back(std::move(w));
    }
    return offset.status();
  }
  if (!offset.ok()) {
    restoring_.erase(e);
    return absl::ResourceExhaustedError(
        absl::StrCat("object ", x->id.ToHex(),
                     " is spilled and there is no room to read it back: ",
                     offset.status().message()));
  }
  x->flags |= kFlagMoving;
  SpillMove m;
  m.kind = SpillMove::Kind::kIn;
  m.entry = e;
  m.id = x->id;
  m.data = segment_->base() + *offset;
  m.offset = *offset;
  m.alloc_bytes = x->alloc_bytes;
  m.nbytes = x->nbytes;
  const uint64_t seq = spill_io_->Submit(std::move(m));
  in_flight_[seq] = e;
  moving_[e] = seq;
  return absl::OkStatus();
}

void StoreService::Impl::FinishMoves() {
  if (spill_io_ == nullptr) return;
  std::vector<SpillMove> done = spill_io_->TakeDone();
  if (!done.empty()) moves_finished_ = true;
  for (const SpillMove& m : done) {
    auto f = in_flight_.find(m.seq);
    const bool orphan = f == in_flight_.end() || f->second == kOrphan;
    if (f != in_flight_.end()) in_flight_.erase(f);
    if (m.kind == SpillMove::Kind::kOut) {
      spilling_bytes_ -= std::min(spilling_bytes_, m.alloc_bytes);
      FinishOut(m, orphan);
    } else {
      FinishIn(m, orphan);
    }
  }
}

void StoreService::Impl::FinishOut(const SpillMove& m, bool orphan) {
  if (orphan) {  // freed meanwhile: its block and its file are the move's
    allocator_->Free(m.offset, m.alloc_bytes);
    spill_->Remove(m.id, m.nbytes);
    return;
  }
  moving_.erase(m.entry);
  ObjectEntry* x = table_->entry(m.entry);
  x->flags &= ~kFlagMoving;
  if (!m.status.ok()) {
    spill_->Remove(m.id, m.nbytes);
    last_spill_error_ = m.status;
    SHOAL_LOG(WARNING, "store: spilling %s failed: %s", m.id.ToHex(),
              m.status.ToString());
    return;
  }
  if (x->mappers == 0 && x->refcount > 0 && !(x->flags & kFlagDeletePending)) {
    allocator_->Free(x->offset, x->alloc_bytes);
    x->offset = 0;
    x->state = static_cast<uint32_t>(ObjectState::kSpilled);
    ++spills_;
    spilled_bytes_ += x->nbytes;
    return;
  }
  // Mapped (or let go, or deleted) while it was written: it stays.
  spill_->Remove(m.id, m.nbytes);
  if (x->refcount == 0 && (x->flags & kFlagDeletePending)) FreeEntry(m.entry);
}

void StoreService::Impl::FinishIn(const SpillMove& m, bool orphan) {
  if (orphan) {  // deleted while it was read back: its Gets hear so
    allocator_->Free(m.offset, m.alloc_bytes);
    spill_->Remove(m.id, m.nbytes);
    restore_failed_.emplace_back(
        m.id, absl::NotFoundError(absl::StrCat("object ", m.id.ToHex(),
                                               " was deleted while it was read "
                                               "back from disk")));
    return;
  }
  moving_.erase(m.entry);
  restoring_.erase(m.entry);
  ObjectEntry* x = table_->entry(m.entry);
  x->flags &= ~kFlagMoving;
  if (!m.status.ok()) {
    allocator_->Free(m.offset, m.alloc_bytes);
    restore_failed_.emplace_back(
        m.id, absl::Status(m.status.code(),
                           absl::StrCat("object ", m.id.ToHex(),
                                        " is spilled and reading it back "
                                        "failed: ",
                                        m.status.message())));
    return;
  }
  spill_->Remove(m.id, m.nbytes);
  x->offset = m.offset;
  x->state = static_cast<uint32_t>(ObjectState::kSealed);
  ++restores_;
  restored_bytes_ += x->nbytes;
  prefaulter_->Advance(allocator_->frontier());
  restored_.emplace_back(m.id, m.entry);
}

size_t StoreService::Impl::DropSpilled(uint64_t bytes, bool need_entry) {
  if (spill_ == nullptr) return 0;
  std::vector<Candidate> candidates;
  for (uint32_t e = 0; e < table_->header()->max_objects; ++e) {
    const ObjectEntry* x = table_->entry(e);
    if (x->state == static_cast<uint32_t>(ObjectState::kSpilled) &&
        x->refcount == 0 && !(x->flags & kFlagMoving) &&
        restoring_.count(e) == 0) {
      candidates.push_back({x->lru_stamp, e});
    }
  }
  SortByAge(&candidates);
  size_t dropped = 0;
  for (const Candidate& c : candidates) {
    if (spill_->Fits(bytes) && (!need_entry || !free_entries_.empty())) break;
    ++evictions_;
    evicted_bytes_ += table_->entry(c.e)->nbytes;
    FreeEntry(c.e);
    ++dropped;
  }
  return dropped;
}

}  // namespace shoal::shm
