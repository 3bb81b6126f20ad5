// The store service's spilling: sealed objects that clients hold but no
// process maps leave the arena for files in the spill folder when an
// allocation does not fit, least recently used first, and come back at their
// next Get. Everything here runs on the service thread with the segment lock
// held, so no client sees an object half moved: a client that finds an entry
// kSpilled asks the service, whose requests run one at a time.

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

uint64_t StoreService::Impl::Spill(uint64_t bytes) {
  std::vector<Candidate> candidates;
  for (uint32_t e = 0; e < table_->header()->max_objects; ++e) {
    const ObjectEntry* x = table_->entry(e);
    if (x->state == static_cast<uint32_t>(ObjectState::kSealed) &&
        x->refcount > 0 && x->mappers == 0 &&
        !(x->flags & kFlagDeletePending) && x->nbytes > 0 &&
        device_blocks_.count(e) == 0) {
      candidates.push_back({x->lru_stamp, e});
    }
  }
  SortByAge(&candidates);
  const uint64_t need = allocator_->RoundUp(bytes);
  const uint64_t batch = std::min(kSpillBatch, allocator_->capacity() / 16);
  uint64_t spilled = 0;
  last_spill_error_ = absl::OkStatus();
  for (const Candidate& c : candidates) {
    if (allocator_->largest_free_block() >= need && spilled >= batch) break;
    const ObjectEntry* x = table_->entry(c.e);
    if (!spill_->Fits(x->nbytes)) DropSpilled(x->nbytes, false);
    const uint64_t freed = x->alloc_bytes;
    absl::Status s = SpillOne(c.e);
    if (!s.ok()) {
      last_spill_error_ = s;
      break;
    }
    spilled += freed;
  }
  return spilled;
}

absl::Status StoreService::Impl::SpillOne(uint32_t e) {
  ObjectEntry* x = table_->entry(e);
  SHOAL_RETURN_IF_ERROR(
      spill_->Write(x->id, segment_->base() + x->offset, x->nbytes));
  allocator_->Free(x->offset, x->alloc_bytes);
  x->offset = 0;
  x->state = static_cast<uint32_t>(ObjectState::kSpilled);
  ++spills_;
  spilled_bytes_ += x->nbytes;
  return absl::OkStatus();
}

absl::Status StoreService::Impl::Restore(uint32_t e) {
  ObjectEntry* x = table_->entry(e);
  // Others may be spilled for its room even when the quota is full: its own
  // file goes once it is back, so the quota holds again afterwards.
  restoring_ = e;
  spill_->Lend(x->nbytes);
  absl::StatusOr<uint64_t> offset = AllocateWithEviction(x->nbytes);
  spill_->Lend(0);
  restoring_ = ~uint32_t{0};
  if (!offset.ok()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("object ", x->id.ToHex(),
                     " is spilled and there is no room to read it back: ",
                     offset.status().message()));
  }
  absl::Status s = spill_->Read(x->id, segment_->base() + *offset, x->nbytes);
  if (!s.ok()) {
    allocator_->Free(*offset, x->alloc_bytes);
    return absl::Status(s.code(), absl::StrCat("object ", x->id.ToHex(),
                                               " is spilled and reading it "
                                               "back failed: ",
                                               s.message()));
  }
  spill_->Remove(x->id, x->nbytes);
  x->offset = *offset;
  x->state = static_cast<uint32_t>(ObjectState::kSealed);
  ++restores_;
  restored_bytes_ += x->nbytes;
  prefaulter_->Advance(allocator_->frontier());
  return absl::OkStatus();
}

size_t StoreService::Impl::DropSpilled(uint64_t bytes, bool need_entry) {
  if (spill_ == nullptr) return 0;
  std::vector<Candidate> candidates;
  for (uint32_t e = 0; e < table_->header()->max_objects; ++e) {
    const ObjectEntry* x = table_->entry(e);
    if (x->state == static_cast<uint32_t>(ObjectState::kSpilled) &&
        x->refcount == 0 && e != restoring_) {
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
