// The store service's side of client reference tables: a client's table
// starts in its slot (SegmentHeader::refs_per_client buckets) and moves into
// the arena, twice as large each time, when the client holds more distinct
// objects than it takes, up to room for every object of the store. A store
// thus reserves little per client and still lets one client hold every task
// result it is handed.

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "shm/store_service_impl.h"

namespace shoal::shm {

absl::Status StoreService::Impl::AddRef(uint32_t slot, uint32_t e,
                                        ObjectTable::RefKind kind) {
  absl::Status s = table_->AddRef(slot, e, kind, nullptr);
  if (!ObjectTable::IsRefRoomError(s)) return s;
  SHOAL_RETURN_IF_ERROR(GrowRefs(slot, table_->RefBuckets(slot)));
  return table_->AddRef(slot, e, kind, nullptr);
}

absl::Status StoreService::Impl::GrowRefs(uint32_t slot, uint32_t seen) {
  const uint32_t now = table_->RefBuckets(slot);
  if (now > seen) return absl::OkStatus();  // grown since the caller looked
  const uint32_t most = table_->MaxRefBuckets();
  for (uint32_t buckets = 2 * now; buckets <= most && buckets > now;
       buckets *= 2) {
    const uint64_t bytes = uint64_t{buckets} * sizeof(RefBucket);
    absl::StatusOr<uint64_t> offset = AllocateNow(bytes);
    if (!offset.ok()) {
      return absl::ResourceExhaustedError(
          absl::StrCat("a client's reference table (", now,
                       " buckets) cannot grow: ", offset.status().message()));
    }
    if (!table_->MoveRefs(slot, *offset, buckets)) {
      allocator_->Free(*offset, bytes);
      continue;  // a reference fell beyond the probe window: larger still
    }
    if (auto old = ref_tables_.find(slot); old != ref_tables_.end()) {
      allocator_->Free(old->second.first, old->second.second);
    }
    ref_tables_[slot] = {*offset, bytes};
    prefaulter_->Advance(allocator_->frontier());
    SHOAL_LOG(DEBUG, "store: client slot %d's reference table grew to %d", slot,
              buckets);
    return absl::OkStatus();
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("this client already holds ", table_->LiveRefs(slot),
                   " distinct objects; its reference table of ", now,
                   " buckets is as large as it gets (--max-objects)"));
}

void StoreService::Impl::ResetSlot(uint32_t slot) {
  table_->ClearSlot(slot);
  if (auto t = ref_tables_.find(slot); t != ref_tables_.end()) {
    allocator_->Free(t->second.first, t->second.second);
    ref_tables_.erase(t);
  }
}

StoreService::Impl::Reply StoreService::Impl::OnRefRoom(
    const ipc::StoreRefRoomRequest& m) {
  if (clients_.count(m.client_slot()) == 0) {
    return ipc::Message(
        ipc::ErrorReply{absl::FailedPreconditionError(absl::StrCat(
            "store client slot ", m.client_slot(), " is not connected"))});
  }
  auto lock = Lock();
  if (!lock.ok()) return ipc::Message(ipc::ErrorReply{lock.status()});
  absl::Status s = GrowRefs(m.client_slot(), m.buckets());
  if (!s.ok()) return ipc::Message(ipc::ErrorReply{s});
  return ipc::OkReply{};
}

}  // namespace shoal::shm
