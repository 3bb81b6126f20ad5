// Waiting for room: a Create or a read-back that finds the arena full waits,
// parked as a RoomWaiter, while objects are written out to the spill folder
// on the spill thread; the service goes on serving everyone else, and
// retries the waiters in order once writes are done.

#include <algorithm>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "shm/store_service_impl.h"

namespace shoal::shm {
namespace {

ipc::Message Error(const absl::Status& s) { return ipc::ErrorReply{s}; }
std::string Hex(const ObjectId& id) { return id.ToHex(); }

constexpr absl::string_view kWaitPayload = "shoal.shm/wait";

absl::Status Marked(absl::Status s, absl::string_view what) {
  s.SetPayload(kWaitPayload, absl::Cord(what));
  return s;
}

bool IsMarked(const absl::Status& s, absl::string_view what) {
  auto p = s.GetPayload(kWaitPayload);
  return p.has_value() && *p == what;
}

}  // namespace

absl::Status StoreService::Impl::SpillWait() {
  return Marked(absl::UnavailableError("waiting for spills in flight"),
                "spill");
}
bool StoreService::Impl::IsSpillWait(const absl::Status& s) {
  return IsMarked(s, "spill");
}
absl::Status StoreService::Impl::RestoreWait() {
  return Marked(absl::UnavailableError("being read back"), "restore");
}
bool StoreService::Impl::IsRestoreWait(const absl::Status& s) {
  return IsMarked(s, "restore");
}
absl::Status StoreService::Impl::RestorePending(const ObjectId& id) {
  return Marked(absl::UnavailableError(absl::StrCat(
                    "object ", Hex(id), " is being read back from disk")),
                "pending");
}
bool StoreService::Impl::IsRestorePending(const absl::Status& s) {
  return IsMarked(s, "pending");
}

StoreService::Impl::Reply StoreService::Impl::OnCreate(
    const std::string& routing_id, uint64_t request_id, uint32_t slot,
    const ipc::CreateRequest& m, bool front) {
  if (m.id.IsNil())
    return Error(absl::InvalidArgumentError("the nil object id"));
  if (static_cast<int64_t>(m.nbytes) != m.meta.NumBytes()) {
    return Error(absl::InvalidArgumentError(
        absl::StrCat("nbytes ", m.nbytes, " does not match ", m.meta.ToString(),
                     " (", m.meta.NumBytes(), " bytes)")));
  }
  if (!m.meta.device.is_cpu()) return CreateDeviceObject(slot, m);
  if (m.nbytes > allocator_->capacity()) {
    return Error(absl::ResourceExhaustedError(absl::StrCat(
        "requested ", m.nbytes, " bytes but the store's arena holds only ",
        allocator_->capacity())));
  }
  // The account is checked before anything is allocated or evicted: a
  // create it refuses changes nothing.
  const uint64_t reserved = allocator_->RoundUp(m.nbytes);
  if (m.account != 0) {
    absl::Status s = CheckAccount(m.account, reserved);
    if (!s.ok()) return Error(s);
  }
  auto lock = Lock();
  if (!lock.ok()) return Error(lock.status());
  if (auto e = table_->Find(m.id)) {
    const bool deleting = table_->entry(*e)->flags & kFlagDeletePending;
    return Error(absl::AlreadyExistsError(
        absl::StrCat("object ", Hex(m.id),
                     deleting ? " exists (being deleted)" : " exists")));
  }
  absl::StatusOr<uint64_t> offset = AllocateWithEviction(m.nbytes);
  if (IsSpillWait(offset.status())) {
    RoomWaiter w;
    w.create = true;
    w.routing_id = routing_id;
    w.request_id = request_id;
    w.slot = slot;
    w.session = clients_.count(slot) ? clients_.at(slot).session : 0;
    w.request = m;
    if (front) {
      room_waiters_.push_front(std::move(w));
    } else {
      room_waiters_.push_back(std::move(w));
    }
    return std::nullopt;  // answered when the spills it waits for are done
  }
  if (!offset.ok()) return Error(offset.status());
  absl::StatusOr<uint32_t> e = TakeFreeEntry();
  if (!e.ok()) {
    allocator_->Free(*offset, m.nbytes);
    return Error(e.status());
  }
  table_->Insert(m.id, *e);
  ObjectEntry* x = table_->entry(*e);
  x->offset = *offset;
  x->nbytes = m.nbytes;
  x->alloc_bytes = allocator_->RoundUp(m.nbytes);
  x->creator_plus1 = slot + 1;
  table_->SetMeta(*e, m.meta);
  absl::Status s = AddRef(slot, *e, ObjectTable::RefKind::kMapped);
  if (!s.ok()) {
    FreeEntry(*e);
    return Error(s);
  }
  accounts_.Charge(m.account, *e, x->alloc_bytes);
  prefaulter_->Advance(allocator_->frontier());
  ++creates_;
  created_bytes_ += m.nbytes;
  return ipc::CreateReply{*offset, *e, x->generation};
}

absl::StatusOr<uint64_t> StoreService::Impl::AllocateNow(uint64_t bytes) {
  absl::StatusOr<uint64_t> offset = AllocateWithEviction(bytes);
  while (IsSpillWait(offset.status())) {
    spill_io_->WaitForAll();
    FinishMoves();
    offset = AllocateWithEviction(bytes);
  }
  return offset;
}

void StoreService::Impl::OnMovesDone() {
  moves_finished_ = false;
  {
    auto lock = Lock();
    if (!lock.ok()) return;  // the next sweep tries again
    FinishMoves();
    std::vector<std::pair<ObjectId, uint32_t>> restored =
        std::exchange(restored_, {});
    for (const auto& [id, e] : restored) {
      if (table_->Find(id) == e) WakeWaiters(id, e);
    }
    for (const auto& [id, why] : std::exchange(restore_failed_, {})) {
      FailRestoreWaiters(id, why);
    }
  }
  RetryRoomWaiters();
}

void StoreService::Impl::RetryRoomWaiters() {
  while (!room_waiters_.empty()) {
    RoomWaiter w = std::move(room_waiters_.front());
    room_waiters_.pop_front();
    if (w.create) {
      auto c = clients_.find(w.slot);
      if (c == clients_.end() || c->second.session != w.session) continue;
      Reply r = OnCreate(w.routing_id, w.request_id, w.slot, w.request,
                         /*front=*/true);
      if (!r) return;  // waits again, first in line
      Send(w.routing_id, w.request_id, *std::move(r));
      continue;
    }
    auto lock = Lock();
    if (!lock.ok()) {
      room_waiters_.push_front(std::move(w));
      return;
    }
    const ObjectEntry* x = table_->entry(w.entry);
    if (x->generation != w.generation || x->id != w.id ||
        x->state != static_cast<uint32_t>(ObjectState::kSpilled)) {
      restoring_.erase(w.entry);
      FailRestoreWaiters(w.id, absl::NotFoundError(absl::StrCat(
                                   "object ", Hex(w.id),
                                   " was deleted while it waited to be "
                                   "read back")));
      continue;
    }
    absl::Status s = StartRestore(w.entry, /*retry=*/true, /*front=*/true);
    if (IsSpillWait(s)) return;
    if (!s.ok()) FailRestoreWaiters(w.id, s);
  }
}

void StoreService::Impl::FailRestoreWaiters(const ObjectId& id,
                                            const absl::Status& why) {
  auto it = waiting_.find(id);
  if (it == waiting_.end()) return;
  std::vector<uint64_t> keys = std::move(it->second);
  waiting_.erase(it);
  for (uint64_t key : keys) {
    auto p = pending_.find(key);
    if (p == pending_.end()) continue;
    PendingGet& pg = p->second;
    for (ipc::ObjectInfo& info : pg.results) {
      if (info.id != id || !IsRestorePending(info.status)) continue;
      info.status = why;
      --pg.restores;
      --pg.missing;
    }
    if (pg.missing == 0) {
      Send(pg.routing_id, pg.request_id, ipc::GetReply{std::move(pg.results)});
      pending_.erase(p);
    }
  }
}

}  // namespace shoal::shm
