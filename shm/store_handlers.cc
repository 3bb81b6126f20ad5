// The store service's verbs. Each handler runs on the service thread, takes the
// segment lock for its table work, and returns the reply (or nothing when the
// reply comes later, as for a Get that waits).

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/process_info.h"
#include "base/status_macros.h"
#include "shm/store_service_impl.h"

namespace shoal::shm {
namespace {

ipc::Message Error(const absl::Status& s) { return ipc::ErrorReply{s}; }

// Who is at the other end of an ipc:// connection, from the kernel (as
// ZeroMQ read it when it accepted the connection). Only this machine's
// processes of the store's own user are served.
absl::StatusOr<ipc::RequestPeer> CheckPeer(const ipc::RequestPeer& peer) {
  if (!peer.has_credentials) {
    return absl::PermissionDeniedError(
        "the store serves only processes on its machine (ipc://), whose "
        "credentials the kernel tells it; this connection has none");
  }
  if (peer.uid != geteuid()) {
    return absl::PermissionDeniedError(
        absl::StrCat("the store serves only its own user (uid ", geteuid(),
                     "); this client runs as uid ", peer.uid));
  }
  return peer;
}

std::string Hex(const ObjectId& id) { return id.ToHex(); }

}  // namespace

// ---- connect / disconnect
// -----------------------------------------------------

StoreService::Impl::Reply StoreService::Impl::OnConnect(
    const std::string& routing_id, const ipc::RequestPeer& connection,
    const ipc::StoreConnectRequest& request) {
  if (auto it = slot_of_.find(routing_id); it != slot_of_.end()) {
    return Error(
        absl::AlreadyExistsError("this connection is already registered"));
  }
  absl::StatusOr<ipc::RequestPeer> peer = CheckPeer(connection);
  if (!peer.ok()) return Error(peer.status());
  // The message's pid only names the client in logs when it disagrees.
  ipc::StoreConnectRequest m = request;
  if (m.pid != peer->pid) {
    SHOAL_LOG(DEBUG, "store: client %s says pid %d, the kernel says %d", m.name,
              m.pid, peer->pid);
    m.pid = peer->pid;
  }
  absl::StatusOr<int> pidfd = OpenPidFd(m.pid);
  if (!pidfd.ok()) {
    return Error(absl::InvalidArgumentError(absl::StrCat(
        "cannot watch client pid ", m.pid, ": ", pidfd.status().message())));
  }
  auto lock = Lock();
  if (!lock.ok()) {
    close(*pidfd);
    return Error(lock.status());
  }
  const SegmentHeader* h = table_->header();
  for (uint32_t s = 0; s < h->max_clients; ++s) {
    ClientSlotHeader* sh = table_->slot(s);
    if (sh->in_use != 0 || clients_.count(s) != 0) continue;
    ResetSlot(s);
    sh->pid = m.pid;
    sh->session = next_session_++;
    snprintf(sh->name, sizeof(sh->name), "%s", m.name.c_str());
    sh->in_use = 1;
    clients_[s] = Client{routing_id, m.pid, *pidfd, sh->session, m.name};
    slot_of_[routing_id] = s;
    SHOAL_LOG(DEBUG, "store: client %s (pid %d) connected as slot %d", m.name,
              m.pid, s);
    return ipc::StoreConnectReply{s, segment_->name(), segment_->size(),
                                  sh->session};
  }
  close(*pidfd);
  return Error(absl::ResourceExhaustedError(absl::StrCat(
      "the store already serves ", h->max_clients, " clients (its limit)")));
}

StoreService::Impl::Reply StoreService::Impl::OnDisconnect(uint32_t slot) {
  ReleaseClient(slot, "it disconnected");
  return ipc::OkReply{};
}

void StoreService::Impl::ReleaseClient(uint32_t slot, absl::string_view why) {
  auto it = clients_.find(slot);
  if (it == clients_.end()) return;
  Client client = std::move(it->second);
  clients_.erase(it);
  slot_of_.erase(client.routing_id);
  if (client.pidfd >= 0) close(client.pidfd);
  for (auto p = pending_.begin(); p != pending_.end();) {
    p = p->second.slot == slot ? pending_.erase(p) : std::next(p);
  }
  auto lock = Lock();
  if (!lock.ok()) {
    // The slot stays marked in use; the next sweep retries.
    SHOAL_LOG(ERROR, "store: cannot release client %s: %s", client.name,
              lock.status().ToString());
    clients_[slot] = Client{"", client.pid, -1, client.session, client.name};
    return;
  }
  size_t refs = 0, aborted = 0;
  table_->ForEachRef(slot, [&](uint32_t e, uint32_t count, bool mapped) {
    ObjectEntry* x = table_->entry(e);
    x->refcount -= std::min(count, x->refcount);
    if (mapped && x->mappers > 0) --x->mappers;
    refs += count;
    const auto state = static_cast<ObjectState>(x->state);
    if (state == ObjectState::kCreated && x->creator_plus1 == slot + 1) {
      FreeEntry(e);
      ++aborted;
    } else if (IsSealed(x->state) && x->refcount == 0 &&
               (x->flags & kFlagDeletePending)) {
      FreeEntry(e);
    }
  });
  const ClientSlotHeader* sh = table_->slot(slot);
  departed_gets_ += __atomic_load_n(&sh->gets, __ATOMIC_RELAXED);
  departed_get_bytes_ += __atomic_load_n(&sh->get_bytes, __ATOMIC_RELAXED);
  ResetSlot(slot);
  SHOAL_LOG(DEBUG,
            "store: released client %s (pid %d) because %s: %d references, %d "
            "unsealed objects aborted",
            client.name, client.pid, why, refs, aborted);
}

// ---- create / seal / abort
// -------------------------------------------------------

void StoreService::Impl::OnSealed(const ipc::SealedNotice& m) {
  auto lock = Lock();
  if (!lock.ok()) return;  // the sweep wakes the waiters later
  auto e = table_->Find(m.id);
  if (e && IsSealed(table_->entry(*e)->state)) WakeWaiters(m.id, *e);
}

StoreService::Impl::Reply StoreService::Impl::OnAbort(
    uint32_t slot, const ipc::AbortRequest& m) {
  auto lock = Lock();
  if (!lock.ok()) return Error(lock.status());
  absl::StatusOr<uint32_t> e = FindEntry(m.id);
  if (!e.ok()) return Error(e.status());
  ObjectEntry* x = table_->entry(*e);
  if (IsSealed(x->state)) {
    return Error(absl::FailedPreconditionError(absl::StrCat(
        "object ", Hex(m.id), " is sealed; delete it instead of aborting")));
  }
  if (x->creator_plus1 != slot + 1) {
    return Error(absl::PermissionDeniedError(
        absl::StrCat("only the creator may abort object ", Hex(m.id))));
  }
  (void)table_->DropRef(slot, *e, nullptr);
  FreeEntry(*e);
  return ipc::OkReply{};
}

// ---- get / release / delete / contains
// ----------------------------------------

absl::Status StoreService::Impl::Reference(uint32_t slot, uint32_t e,
                                           ipc::ObjectInfo* info) {
  auto spilled = [&] {
    return table_->entry(e)->state ==
           static_cast<uint32_t>(ObjectState::kSpilled);
  };
  if (spilled()) {
    absl::Status s = StartRestore(e);
    return s.ok() || IsSpillWait(s) ? RestoreWait() : s;
  }
  // A reference to an object being written out keeps it in the arena.
  SHOAL_RETURN_IF_ERROR(AddRef(slot, e, ObjectTable::RefKind::kMapped));
  if (spilled()) {
    // Its write finished while the reference table grew (AllocateNow).
    (void)table_->DropRef(slot, e, nullptr);
    return Reference(slot, e, info);
  }
  const ObjectEntry* x = table_->entry(e);
  info->status = absl::OkStatus();
  info->offset = x->offset;
  info->nbytes = x->nbytes;
  info->entry = e;
  info->generation = x->generation;
  info->meta = table_->GetMeta(e);
  return absl::OkStatus();
}

StoreService::Impl::Reply StoreService::Impl::OnGet(
    const std::string& routing_id, uint64_t request_id, uint32_t slot,
    const ipc::GetRequest& m) {
  auto lock = Lock();
  if (!lock.ok()) return Error(lock.status());
  PendingGet pending;
  pending.routing_id = routing_id;
  pending.request_id = request_id;
  pending.slot = slot;
  pending.results.resize(m.ids.size());
  std::vector<ObjectId> waiting;
  for (size_t i = 0; i < m.ids.size(); ++i) {
    ipc::ObjectInfo& info = pending.results[i];
    info.id = m.ids[i];
    auto e = table_->Find(m.ids[i]);
    const ObjectEntry* x = e ? table_->entry(*e) : nullptr;
    if (x != nullptr && (x->flags & kFlagDeletePending)) {
      info.status = absl::NotFoundError(
          absl::StrCat("object ", Hex(m.ids[i]), " is being deleted"));
    } else if (x != nullptr && IsSealed(x->state)) {
      absl::Status s = Reference(slot, *e, &info);
      if (IsRestoreWait(s)) {
        info.status = RestorePending(m.ids[i]);
        waiting.push_back(m.ids[i]);
        ++pending.restores;
      } else if (!s.ok()) {
        info.status = s;
      }
    } else if (m.timeout_ms == 0) {
      info.status = absl::NotFoundError(
          absl::StrCat("object ", Hex(m.ids[i]),
                       x ? " is not sealed yet" : " is not in the store"));
    } else {
      info.status = absl::DeadlineExceededError(
          absl::StrCat("object ", Hex(m.ids[i]), " was not sealed within ",
                       m.timeout_ms, " ms"));
      waiting.push_back(m.ids[i]);
    }
  }
  if (waiting.empty()) return ipc::GetReply{std::move(pending.results)};
  pending.missing = waiting.size();
  if (m.timeout_ms > 0)
    pending.deadline = absl::Now() + absl::Milliseconds(m.timeout_ms);
  const uint64_t key = next_pending_++;
  pending_.emplace(key, std::move(pending));
  for (const ObjectId& id : waiting) waiting_[id].push_back(key);
  return std::nullopt;
}

void StoreService::Impl::WakeWaiters(const ObjectId& id, uint32_t e) {
  auto it = waiting_.find(id);
  if (it == waiting_.end()) return;
  std::vector<uint64_t> keys = std::move(it->second);
  waiting_.erase(it);
  std::vector<uint64_t> still;  // waiting for it to be read back
  for (uint64_t key : keys) {
    auto p = pending_.find(key);
    if (p == pending_.end()) continue;
    PendingGet& pg = p->second;
    bool waits = false;
    for (ipc::ObjectInfo& info : pg.results) {
      const bool restore = IsRestorePending(info.status);
      if (info.id != id || info.status.ok() ||
          (!restore &&
           info.status.code() != absl::StatusCode::kDeadlineExceeded)) {
        continue;
      }
      absl::Status s = Reference(pg.slot, e, &info);
      if (IsRestoreWait(s)) {
        if (!restore) ++pg.restores;
        info.status = RestorePending(id);
        waits = true;
        continue;
      }
      if (!s.ok()) info.status = s;
      if (restore) --pg.restores;
      --pg.missing;
    }
    if (waits) still.push_back(key);
    if (pg.missing == 0) {
      Send(pg.routing_id, pg.request_id, ipc::GetReply{std::move(pg.results)});
      pending_.erase(p);
    }
  }
  if (!still.empty()) {
    std::vector<uint64_t>& w = waiting_[id];
    w.insert(w.end(), still.begin(), still.end());
  }
}

void StoreService::Impl::ExpireWaiters(absl::Time now) {
  for (auto p = pending_.begin(); p != pending_.end();) {
    // Objects being read back are answered whatever the deadline.
    if (p->second.deadline && *p->second.deadline <= now &&
        p->second.restores == 0) {
      Send(p->second.routing_id, p->second.request_id,
           ipc::GetReply{std::move(p->second.results)});
      p = pending_.erase(p);
    } else {
      ++p;
    }
  }
  // Drop index entries whose requests are gone.
  for (auto w = waiting_.begin(); w != waiting_.end();) {
    auto& keys = w->second;
    keys.erase(
        std::remove_if(keys.begin(), keys.end(),
                       [&](uint64_t k) { return pending_.count(k) == 0; }),
        keys.end());
    if (keys.empty()) {
      waiting_.erase(w++);
    } else {
      ++w;
    }
  }
}

StoreService::Impl::Reply StoreService::Impl::OnRelease(
    uint32_t slot, const ipc::ReleaseRequest& m) {
  auto lock = Lock();
  if (!lock.ok()) return Error(lock.status());
  absl::StatusOr<uint32_t> e = FindEntry(m.id);
  if (!e.ok()) return Error(e.status());
  absl::StatusOr<uint32_t> left = table_->DropRef(slot, *e, nullptr);
  if (!left.ok()) return Error(left.status());
  const ObjectEntry* x = table_->entry(*e);
  if (*left == 0 && (x->flags & kFlagDeletePending)) FreeEntry(*e);
  return ipc::OkReply{};
}

StoreService::Impl::Reply StoreService::Impl::OnDelete(
    const ipc::DeleteRequest& m) {
  auto lock = Lock();
  if (!lock.ok()) return Error(lock.status());
  absl::StatusOr<uint32_t> e = FindEntry(m.id);
  if (!e.ok()) return Error(e.status());
  ObjectEntry* x = table_->entry(*e);
  if (!IsSealed(x->state)) {
    return Error(absl::FailedPreconditionError(
        absl::StrCat("object ", Hex(m.id),
                     " is not sealed; its creator aborts it instead")));
  }
  x->flags |= kFlagDeletePending;
  if (x->refcount == 0) FreeEntry(*e);
  return ipc::OkReply{};
}

StoreService::Impl::Reply StoreService::Impl::OnContains(
    const ipc::ContainsRequest& m) {
  auto lock = Lock();
  if (!lock.ok()) return Error(lock.status());
  auto e = table_->Find(m.id);
  const ObjectEntry* x = e ? table_->entry(*e) : nullptr;
  return ipc::ContainsReply{x != nullptr && IsSealed(x->state) &&
                            !(x->flags & kFlagDeletePending)};
}

StoreService::Impl::Reply StoreService::Impl::OnStats() {
  absl::StatusOr<ipc::StoreStats> st = Stats();
  if (!st.ok()) return Error(st.status());
  return *std::move(st);
}

absl::Status StoreService::Impl::CountObjects(ipc::StoreStats* st) const {
  const SegmentHeader* h = table_->header();
  st->set_max_objects(h->max_objects);
  // The table is scanned a block of entries at a time, each under the lock
  // on its own, so that a large table does not hold every client's gets and
  // releases for the whole scan. The counts are then each block's at its
  // time: exact whenever the store is still.
  constexpr uint32_t kScanBlock = 4096;
  uint64_t objects = 0, sealed = 0, referenced = 0;
  for (uint32_t first = 0; first < h->max_objects; first += kScanBlock) {
    SHOAL_ASSIGN_OR_RETURN(LockGuard lock, Lock());
    const uint32_t end = std::min(h->max_objects, first + kScanBlock);
    for (uint32_t e = first; e < end; ++e) {
      const ObjectEntry* x = table_->entry(e);
      if (static_cast<ObjectState>(x->state) == ObjectState::kFree) continue;
      ++objects;
      if (IsSealed(x->state)) ++sealed;
      if (x->refcount > 0) ++referenced;
    }
  }
  st->set_objects(objects);
  st->set_sealed_objects(sealed);
  st->set_referenced_objects(referenced);
  return absl::OkStatus();
}

absl::Status StoreService::Impl::CountClients(ipc::StoreStats* st) const {
  const SegmentHeader* h = table_->header();
  SHOAL_ASSIGN_OR_RETURN(LockGuard lock, Lock());
  st->set_capacity_bytes(allocator_->capacity());
  st->set_used_bytes(allocator_->used());
  st->set_lock_repairs(h->lock.repairs);
  // The clients' slots and the departed ones' gets change together, with
  // the lock held (ReleaseClient).
  uint64_t clients = 0;
  uint64_t gets = departed_gets_.load(std::memory_order_relaxed);
  uint64_t get_bytes = departed_get_bytes_.load(std::memory_order_relaxed);
  for (uint32_t slot = 0; slot < h->max_clients; ++slot) {
    const ClientSlotHeader* sh = table_->slot(slot);
    if (sh->in_use == 0) continue;
    ++clients;
    gets += __atomic_load_n(&sh->gets, __ATOMIC_RELAXED);
    get_bytes += __atomic_load_n(&sh->get_bytes, __ATOMIC_RELAXED);
  }
  st->set_clients(clients);
  st->set_gets(gets);
  st->set_get_bytes(get_bytes);
  return absl::OkStatus();
}

absl::StatusOr<ipc::StoreStats> StoreService::Impl::Stats() const {
  ipc::StoreStats st;
  SHOAL_RETURN_IF_ERROR(CountObjects(&st));
  SHOAL_RETURN_IF_ERROR(CountClients(&st));
  st.set_evictions(evictions_.load(std::memory_order_relaxed));
  st.set_evicted_bytes(evicted_bytes_.load(std::memory_order_relaxed));
  st.set_prefaulted_bytes(prefaulter_->prefaulted_bytes());
  st.set_creates(creates_.load(std::memory_order_relaxed));
  st.set_created_bytes(created_bytes_.load(std::memory_order_relaxed));
  st.set_spills(spills_.load(std::memory_order_relaxed));
  st.set_spilled_bytes(spilled_bytes_.load(std::memory_order_relaxed));
  st.set_restores(restores_.load(std::memory_order_relaxed));
  st.set_restored_bytes(restored_bytes_.load(std::memory_order_relaxed));
  MutexLock arenas(&arenas_mu_);
  for (const auto& [uuid, arena] : arenas_) {
    ipc::StoreDeviceStats* d = st.add_devices();
    d->set_ordinal(static_cast<uint32_t>(arena->ordinal()));
    d->set_capacity_bytes(arena->capacity());
    d->set_used_bytes(arena->used());
  }
  return st;
}

StoreService::Impl::Reply StoreService::Impl::OnAccount(
    const ipc::StoreAccountRequest& m) {
  if (m.set_limit()) {
    absl::Status s = accounts_.SetLimit(m.account(), m.limit_bytes());
    if (!s.ok()) return Error(s);
  }
  absl::StatusOr<StoreAccounts::Usage> usage = accounts_.Get(m.account());
  ipc::StoreAccountReply r;
  r.set_account(m.account());
  if (usage.ok()) {
    r.set_limit_bytes(usage->limit_bytes);
    r.set_used_bytes(usage->used_bytes);
    r.set_objects(usage->objects);
  } else if (!m.set_limit() || !absl::IsNotFound(usage.status())) {
    // (A limit of 0 removed the account: nothing is left to describe.)
    return Error(usage.status());
  }
  return r;
}

absl::Status StoreService::Impl::CheckAccount(uint32_t account,
                                              uint64_t bytes) {
  absl::Status s = accounts_.CheckCharge(account, bytes);
  if (s.ok() || !StoreAccounts::IsLimitError(s)) return s;
  if (ReleaseExitedClients() == 0) return s;
  return accounts_.CheckCharge(account, bytes);
}

size_t StoreService::Impl::ReleaseExitedClients() {
  std::vector<pollfd> fds;
  std::vector<uint32_t> slots;
  for (const auto& [slot, c] : clients_) {
    if (c.pidfd < 0) continue;
    fds.push_back({c.pidfd, POLLIN, 0});
    slots.push_back(slot);
  }
  if (fds.empty() || poll(fds.data(), fds.size(), 0) <= 0) return 0;
  size_t released = 0;
  for (size_t i = 0; i < fds.size(); ++i) {
    if (fds[i].revents & POLLIN) {
      ReleaseClient(slots[i], "its process exited");
      ++released;
    }
  }
  return released;
}

void StoreService::Impl::OnReclaimHint(const ipc::ReclaimHint& m) {
  auto lock = Lock();
  if (!lock.ok()) return;
  auto e = table_->Find(m.id);
  if (!e) return;
  const ObjectEntry* x = table_->entry(*e);
  if (x->refcount == 0 && (x->flags & kFlagDeletePending)) FreeEntry(*e);
}

// ---- table operations (segment lock held)
// -------------------------------------

absl::StatusOr<uint32_t> StoreService::Impl::FindEntry(const ObjectId& id) {
  std::optional<uint32_t> e = table_->Find(id);
  if (!e) return absl::NotFoundError(absl::StrCat("no object ", Hex(id)));
  return *e;
}

absl::StatusOr<uint32_t> StoreService::Impl::TakeFreeEntry() {
  if (free_entries_.empty()) Evict(0);
  if (free_entries_.empty()) EvictOneDevice(nullptr);
  if (free_entries_.empty()) DropSpilled(0, /*need_entry=*/true);
  if (free_entries_.empty()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the store's object table is full (", table_->header()->max_objects,
        " objects, all referenced or unsealed; --max-objects)"));
  }
  const uint32_t e = free_entries_.back();
  free_entries_.pop_back();
  return e;
}

absl::StatusOr<uint64_t> StoreService::Impl::AllocateWithEviction(
    uint64_t bytes) {
  absl::StatusOr<uint64_t> offset = allocator_->Allocate(bytes);
  if (offset.ok()) return offset;
  ReclaimDeletePending();
  offset = allocator_->Allocate(bytes);
  if (offset.ok()) return offset;
  Evict(bytes);
  offset = allocator_->Allocate(bytes);
  if (offset.ok()) return offset;
  if (spill_ != nullptr) {
    FinishMoves();  // spills done since the loop last looked
    offset = allocator_->Allocate(bytes);
    if (offset.ok()) return offset;
    if (StartSpill(bytes) > 0 || spilling_bytes_ > 0) return SpillWait();
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      "store full: requested ", bytes, " bytes, ", allocator_->free_bytes(),
      " bytes free (largest free block ", allocator_->largest_free_block(),
      ") of ", allocator_->capacity(),
      spill_ == nullptr ? "; everything else is referenced or unsealed"
                        : "; everything else is mapped by a process or "
                          "unsealed",
      SpillSummary()));
}

size_t StoreService::Impl::Evict(uint64_t bytes) {
  struct Candidate {
    uint64_t stamp;
    uint32_t e;
  };
  std::vector<Candidate> candidates;
  for (uint32_t e = 0; e < table_->header()->max_objects; ++e) {
    const ObjectEntry* x = table_->entry(e);
    // Device objects hold no arena bytes: evicting them frees no room here.
    if (static_cast<ObjectState>(x->state) == ObjectState::kSealed &&
        x->refcount == 0 && !(x->flags & kFlagMoving) &&
        device_blocks_.count(e) == 0) {
      candidates.push_back({x->lru_stamp, e});
    }
  }
  std::sort(
      candidates.begin(), candidates.end(),
      [](const Candidate& a, const Candidate& b) { return a.stamp < b.stamp; });
  const uint64_t need = allocator_->RoundUp(bytes);
  size_t evicted = 0;
  for (const Candidate& c : candidates) {
    const bool fits =
        allocator_->largest_free_block() >= need && !free_entries_.empty();
    if (fits) break;
    ++evictions_;
    evicted_bytes_ += table_->entry(c.e)->nbytes;
    FreeEntry(c.e);
    ++evicted;
  }
  return evicted;
}

void StoreService::Impl::FreeEntry(uint32_t e) {
  ObjectEntry* x = table_->entry(e);
  restoring_.erase(e);
  if (x->flags & kFlagMoving) {
    // Its bytes are moving: the move's finisher frees its block and file.
    auto m = moving_.find(e);
    in_flight_[m->second] = kOrphan;
    moving_.erase(m);
  } else if (x->state == static_cast<uint32_t>(ObjectState::kSpilled)) {
    spill_->Remove(x->id, x->nbytes);
  } else if (auto d = device_blocks_.find(e); d != device_blocks_.end()) {
    d->second.arena->Free(d->second.block);
    device_blocks_.erase(d);
  } else {
    allocator_->Free(x->offset, x->alloc_bytes);
  }
  accounts_.Uncharge(e);
  table_->Remove(e);
  free_entries_.push_back(e);
}

void StoreService::Impl::ReclaimDeletePending() {
  for (uint32_t e = 0; e < table_->header()->max_objects; ++e) {
    const ObjectEntry* x = table_->entry(e);
    if (IsSealed(x->state) && x->refcount == 0 &&
        (x->flags & kFlagDeletePending)) {
      FreeEntry(e);
    }
  }
}

void StoreService::Impl::Sweep() {
  // Clients whose release failed earlier (a lock timeout) are retried.
  std::vector<uint32_t> gone;
  for (const auto& [slot, c] : clients_) {
    if (c.pidfd < 0) gone.push_back(slot);
  }
  for (uint32_t slot : gone) ReleaseClient(slot, "its process is gone");
  // Waiters on objects sealed without a notice reaching us (the creator died
  // right after sealing, or the lock was busy) are woken here.
  if (!waiting_.empty()) {
    auto lock = Lock();
    if (lock.ok()) {
      std::vector<std::pair<ObjectId, uint32_t>> sealed;
      for (const auto& [id, keys] : waiting_) {
        auto e = table_->Find(id);
        if (e && IsSealed(table_->entry(*e)->state)) {
          sealed.emplace_back(id, *e);
        }
      }
      for (const auto& [id, e] : sealed) WakeWaiters(id, e);
    }
  }
  const uint64_t hint =
      table_->header()->reclaim_hint.load(std::memory_order_acquire);
  if (hint != last_reclaim_hint_) {
    auto lock = Lock();
    if (lock.ok()) {
      last_reclaim_hint_ = hint;
      ReclaimDeletePending();
    }
  }
}

}  // namespace shoal::shm
