#include "shm/store_client.h"

#include <unistd.h>
#include <zmq.h>

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "observe/timeline.h"
#include "shm/store_accounts.h"
#include "shm/store_client_impl.h"

namespace shoal::shm {

bool IsAccountLimitError(const absl::Status& s) {
  return StoreAccounts::IsLimitError(s);
}

absl::Status StoreClient::Impl::Connect() {
  if (options_.endpoint.empty()) {
    const char* env = std::getenv("SHOAL_STORE_ENDPOINT");
    if (env == nullptr || *env == '\0') {
      return absl::InvalidArgumentError(
          "no store endpoint: pass one or set SHOAL_STORE_ENDPOINT");
    }
    options_.endpoint = env;
  }
  if (options_.name.empty()) options_.name = absl::StrCat("pid ", getpid());
  {
    MutexLock lock(&mu_);
    ipc::RpcChannelOptions channel;
    channel.peer = "the store";
    SHOAL_ASSIGN_OR_RETURN(
        channel_, ipc::RpcChannel::Connect(options_.endpoint, channel));
  }
  SHOAL_ASSIGN_OR_RETURN(ipc::StoreConnectReply r,
                         Call<ipc::StoreConnectReply>(
                             ipc::StoreConnectRequest{getpid(), options_.name},
                             options_.rpc_timeout));
  SHOAL_ASSIGN_OR_RETURN(
      segment_, Segment::Open(r.segment_name, kSegmentMagic, kLayoutVersion));
  table_ = std::make_unique<ObjectTable>(segment_->base());
  slot_ = r.client_slot;
  const SegmentHeader* h = table_->header();
  if (slot_ >= h->max_clients) {
    return absl::InternalError("store assigned an out-of-range client slot");
  }
  // Map the header, the index and this client's slot up front: the service
  // allocated their pages, so this is one cheap call here instead of a page
  // fault inside later Gets. (The object table, up to ~100 MiB for a large
  // store, is left to fault in 64 KiB at a time on first use.)
  segment_->Populate(0, kPageSize);
  segment_->Populate(h->index_offset, h->clients_offset - h->index_offset);
  segment_->Populate(h->clients_offset + slot_ * h->client_slot_bytes,
                     h->client_slot_bytes);
  return absl::OkStatus();
}

void StoreClient::Impl::Disconnect() {
  if (table_ == nullptr) return;
  // Best effort and bounded: if the service is gone there is nothing to free.
  (void)Call<ipc::OkReply>(ipc::StoreDisconnectRequest{}, absl::Seconds(2));
}

void StoreClient::Impl::Notify(ipc::Message message) {
  MutexLock lock(&mu_);
  channel_.Notify(std::move(message));
}

absl::StatusOr<LockGuard> StoreClient::Impl::Lock() {
  const SegmentHeader* h = table_->header();
  if (h->prefix.closed.load(std::memory_order_acquire) != 0) {
    return absl::UnavailableError("the store has shut down");
  }
  return LockGuard::Acquire(segment_->base(), &table_->header()->lock,
                            options_.lock_timeout);
}

absl::StatusOr<ObjectBuffer> StoreClient::Impl::GetLocal(const ObjectId& id,
                                                         uint32_t* entry,
                                                         bool* ask_service) {
  SHOAL_ASSIGN_OR_RETURN(LockGuard lock, Lock());
  std::optional<uint32_t> e = table_->Find(id);
  if (!e)
    return absl::NotFoundError(
        absl::StrCat("object ", id.ToHex(), " is not in the store"));
  const ObjectEntry* x = table_->entry(*e);
  if (x->flags & kFlagDeletePending) {
    return absl::NotFoundError(
        absl::StrCat("object ", id.ToHex(), " is being deleted"));
  }
  if (x->state == static_cast<uint32_t>(ObjectState::kSpilled)) {
    *ask_service = true;  // the service reads it back
    return absl::NotFoundError(
        absl::StrCat("object ", id.ToHex(), " is spilled"));
  }
  if (static_cast<ObjectState>(x->state) != ObjectState::kSealed) {
    return absl::NotFoundError(
        absl::StrCat("object ", id.ToHex(), " is not sealed yet"));
  }
  {
    JournaledWriter journal(segment_->base(), &table_->header()->lock.journal);
    absl::Status s =
        table_->AddRef(slot_, *e, ObjectTable::RefKind::kMapped, &journal);
    if (ObjectTable::IsRefRoomError(s)) {
      *ask_service = true;  // the service grows the table and takes it
      return absl::NotFoundError(s.message());
    }
    SHOAL_RETURN_IF_ERROR(s);
  }
  *entry = *e;
  ObjectBuffer view;
  view.id = id;
  view.data = segment_->base() + x->offset;
  view.nbytes = x->nbytes;
  view.meta = table_->GetMeta(*e);
  return view;
}

void StoreClient::Impl::CountGets(
    absl::Span<const absl::StatusOr<ObjectBuffer>> got) {
  uint64_t n = 0, bytes = 0;
  for (const absl::StatusOr<ObjectBuffer>& b : got) {
    if (!b.ok()) continue;
    ++n;
    bytes += b->nbytes;
  }
  if (n == 0) return;
  ClientSlotHeader* sh = table_->slot(slot_);
  __atomic_fetch_add(&sh->gets, n, __ATOMIC_RELAXED);
  __atomic_fetch_add(&sh->get_bytes, bytes, __ATOMIC_RELAXED);
}

absl::StatusOr<ObjectBuffer> StoreClient::Impl::ViewOf(
    const ipc::ObjectInfo& info) {
  if (!info.status.ok()) return info.status;
  ObjectBuffer view;
  view.id = info.id;
  view.nbytes = info.nbytes;
  view.meta = info.meta;
  if (!info.meta.device.is_cpu()) return view;  // FinishDeviceView places it
  if (info.offset > segment_->size() ||
      info.nbytes > segment_->size() - info.offset) {
    return absl::InternalError("store returned an object outside its segment");
  }
  view.data = segment_->base() + info.offset;
  return view;
}

std::vector<absl::StatusOr<ObjectBuffer>> StoreClient::Impl::GetMany(
    absl::Span<const ObjectId> ids, absl::Duration timeout, void* cuda_stream) {
  if (device_pending()) device().Collect(/*wait=*/false);
  std::vector<absl::StatusOr<ObjectBuffer>> out;
  out.reserve(ids.size());
  // Fast path: everything sealed already is taken locally. What is spilled
  // the service reads back, whatever the timeout; it also takes what finds
  // this client's reference table full, growing the table.
  std::vector<ObjectId> remote;
  for (const ObjectId& id : ids) {
    uint32_t e = 0;
    bool ask_service = false;
    out.push_back(GetLocal(id, &e, &ask_service));
    if (out.back().ok() && !out.back()->meta.device.is_cpu()) {
      absl::Status s = FinishDeviceView(e, cuda_stream, &*out.back());
      if (!s.ok()) out.back() = s;
    }
    if (!out.back().ok() && absl::IsNotFound(out.back().status()) &&
        (ask_service || timeout != absl::ZeroDuration())) {
      remote.push_back(id);
    }
  }
  if (remote.empty()) return out;
  const int64_t timeout_ms =
      timeout == absl::InfiniteDuration() ? -1
      : timeout == absl::ZeroDuration()
          ? 0
          : std::max<int64_t>(1, absl::ToInt64Milliseconds(timeout));
  const absl::Duration rpc_timeout = timeout == absl::InfiniteDuration()
                                         ? absl::InfiniteDuration()
                                         : timeout + options_.rpc_timeout;
  absl::StatusOr<ipc::GetReply> reply =
      Call<ipc::GetReply>(ipc::GetRequest{remote, timeout_ms}, rpc_timeout);
  size_t next = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (next >= remote.size() || ids[i] != remote[next] || out[i].ok() ||
        !absl::IsNotFound(out[i].status())) {
      continue;
    }
    if (!reply.ok()) {
      out[i] = reply.status();
    } else if (next >= reply->objects.size()) {
      out[i] = absl::InternalError(
          absl::StrCat("the store's get reply holds ", reply->objects.size(),
                       " objects for ", remote.size(), " asked for"));
    } else {
      out[i] = ViewOf(reply->objects[next]);
      if (out[i].ok() && !out[i]->meta.device.is_cpu()) {
        absl::Status s =
            FinishDeviceView(reply->objects[next].entry, cuda_stream, &*out[i]);
        if (!s.ok()) out[i] = s;
      }
    }
    ++next;
  }
  return out;
}

absl::Status StoreClient::Impl::ReleaseNow(const ObjectId& id,
                                           bool mark_deleted) {
  bool reclaim = false;
  {
    SHOAL_ASSIGN_OR_RETURN(LockGuard lock, Lock());
    std::optional<uint32_t> e = table_->Find(id);
    if (!e) return absl::NotFoundError(absl::StrCat("no object ", id.ToHex()));
    if (mark_deleted) {
      ObjectEntry* x = table_->entry(*e);
      if (!IsSealed(x->state)) {
        return absl::FailedPreconditionError(
            absl::StrCat("object ", id.ToHex(), " is not sealed"));
      }
      x->flags |= kFlagDeletePending;
    }
    JournaledWriter journal(segment_->base(), &table_->header()->lock.journal);
    SHOAL_ASSIGN_OR_RETURN(uint32_t left, table_->DropRef(slot_, *e, &journal));
    journal.Commit();
    if (left == 0 && (table_->entry(*e)->flags & kFlagDeletePending)) {
      table_->header()->reclaim_hint.fetch_add(1, std::memory_order_release);
      reclaim = true;
    }
  }
  if (reclaim) Notify(ipc::ReclaimHint{id});
  return absl::OkStatus();
}

// ---- StoreClient
// ---------------------------------------------------------------

StoreClient::StoreClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

StoreClient::~StoreClient() {
  // Pending device releases first: they need the table, and the work they
  // wait for may still read the objects.
  if (impl_->device_pending()) impl_->device().Collect(/*wait=*/true);
  impl_->Disconnect();
}

absl::StatusOr<std::unique_ptr<StoreClient>> StoreClient::Connect(
    const StoreClientOptions& options) {
  auto impl = std::make_unique<Impl>(options);
  SHOAL_RETURN_IF_ERROR(impl->Connect());
  return std::unique_ptr<StoreClient>(new StoreClient(std::move(impl)));
}

namespace {

// Store operations of at least this many bytes are spans on the process's
// timeline (when it records): the ones whose time is worth seeing, few
// enough not to crowd out the tasks' events in the ring.
constexpr uint64_t kTimelineMinBytes = uint64_t{1} << 20;

// When a store operation starts, for the timeline (0: not recording).
int64_t SpanStart() {
  return observe::TimelineOn() ? observe::TimelineNowNs() : 0;
}

// Records `what` on `id`, from `start_ns` to now, if it moved enough bytes.
void RecordStoreSpan(observe::EventKind kind, int64_t start_ns,
                     absl::string_view what, const ObjectId& id,
                     uint64_t bytes) {
  if (start_ns == 0 || bytes < kTimelineMinBytes) return;
  observe::RecordSpan(kind, start_ns, what, id.ToHex(), bytes);
}

}  // namespace

absl::StatusOr<MutableObjectBuffer> StoreClient::Create(
    const ObjectId& id, const TensorMeta& meta, const CreateOptions& options) {
  SHOAL_RETURN_IF_ERROR(meta.Validate());
  if (!meta.device.is_cpu())
    return impl_->CreateDevice(id, meta, options.account);
  const int64_t start_ns = SpanStart();
  const int64_t nbytes = meta.NumBytes();
  ipc::CreateRequest request{id, meta, static_cast<uint64_t>(nbytes)};
  request.account = options.account;
  SHOAL_ASSIGN_OR_RETURN(const ipc::CreateReply r,
                         impl_->Call<ipc::CreateReply>(
                             std::move(request), impl_->options_.rpc_timeout));
  Segment& seg = *impl_->segment_;
  if (r.offset > seg.size() ||
      static_cast<uint64_t>(nbytes) > seg.size() - r.offset) {
    return absl::InternalError("store allocated outside its segment");
  }
  if (static_cast<uint64_t>(nbytes) >=
      impl_->options_.populate_threshold_bytes) {
    seg.Populate(r.offset, static_cast<uint64_t>(nbytes));
  }
  RecordStoreSpan(observe::EventKind::kStorePut, start_ns, "create", id,
                  static_cast<uint64_t>(nbytes));
  return MutableObjectBuffer{id, seg.base() + r.offset,
                             static_cast<uint64_t>(nbytes), meta};
}

absl::Status StoreClient::Seal(const ObjectId& id, void* cuda_stream) {
  if (impl_->HoldsDevice(id)) {
    SHOAL_RETURN_IF_ERROR(impl_->SealDevice(id, cuda_stream));
  }
  // Sealing is a state change of an object only this client may touch, so it
  // happens here under the table lock; the service hears of it afterwards to
  // wake waiting Gets (and checks for missed notices in its sweep).
  {
    SHOAL_ASSIGN_OR_RETURN(LockGuard lock, impl_->Lock());
    ObjectTable& table = *impl_->table_;
    std::optional<uint32_t> e = table.Find(id);
    if (!e) return absl::NotFoundError(absl::StrCat("no object ", id.ToHex()));
    ObjectEntry* x = table.entry(*e);
    if (static_cast<ObjectState>(x->state) != ObjectState::kCreated) {
      return absl::FailedPreconditionError(
          absl::StrCat("object ", id.ToHex(), " is already sealed"));
    }
    if (x->creator_plus1 != impl_->slot_ + 1) {
      return absl::PermissionDeniedError(
          absl::StrCat("only the creator may seal object ", id.ToHex()));
    }
    JournaledWriter journal(impl_->segment_->base(),
                            &impl_->table_->header()->lock.journal);
    journal.Write32(&x->state, static_cast<uint32_t>(ObjectState::kSealed));
  }
  impl_->Notify(ipc::SealedNotice{id});
  return absl::OkStatus();
}

absl::Status StoreClient::Abort(const ObjectId& id) {
  if (impl_->HoldsDevice(id)) return impl_->AbortDevice(id);
  return impl_
      ->Call<ipc::OkReply>(ipc::AbortRequest{id}, impl_->options_.rpc_timeout)
      .status();
}

absl::Status StoreClient::Put(const ObjectId& id, const TensorMeta& meta,
                              const void* data, const CreateOptions& options) {
  const int64_t start_ns = SpanStart();
  SHOAL_ASSIGN_OR_RETURN(MutableObjectBuffer buf, Create(id, meta, options));
  absl::Status s;
  if (!meta.device.is_cpu()) {
    s = impl_->device().cuda().CopyToDevice(meta.device.index, buf.data, data,
                                            buf.nbytes, nullptr);
  } else if (buf.nbytes > 0) {
    std::memcpy(buf.data, data, buf.nbytes);
  }
  if (s.ok()) s = Seal(id);
  if (!s.ok()) (void)Abort(id);
  if (s.ok())
    RecordStoreSpan(observe::EventKind::kStorePut, start_ns, "put", id,
                    buf.nbytes);
  return s;
}

absl::StatusOr<ObjectBuffer> StoreClient::Get(const ObjectId& id,
                                              absl::Duration timeout) {
  return Get(id, timeout, nullptr);
}

absl::StatusOr<ObjectBuffer> StoreClient::Get(const ObjectId& id,
                                              absl::Duration timeout,
                                              void* cuda_stream) {
  const int64_t start_ns = SpanStart();
  std::vector<absl::StatusOr<ObjectBuffer>> all =
      impl_->GetMany(absl::MakeConstSpan(&id, 1), timeout, cuda_stream);
  impl_->CountGets(all);
  if (all[0].ok())
    RecordStoreSpan(observe::EventKind::kStoreGet, start_ns, "get", id,
                    all[0]->nbytes);
  return std::move(all[0]);
}

std::vector<absl::StatusOr<ObjectBuffer>> StoreClient::Get(
    absl::Span<const ObjectId> ids, absl::Duration timeout) {
  const int64_t start_ns = SpanStart();
  std::vector<absl::StatusOr<ObjectBuffer>> all =
      impl_->GetMany(ids, timeout, nullptr);
  impl_->CountGets(all);
  for (size_t i = 0; i < all.size(); ++i) {
    if (all[i].ok())
      RecordStoreSpan(observe::EventKind::kStoreGet, start_ns, "get", ids[i],
                      all[i]->nbytes);
  }
  return all;
}

absl::Status StoreClient::Release(const ObjectId& id) {
  if (impl_->device_pending()) impl_->device().Collect(/*wait=*/false);
  if (impl_->HoldsDevice(id)) return impl_->ReleaseDevice(id);
  return impl_->ReleaseNow(id);
}

absl::Status StoreClient::CopyToHost(const ObjectId& id, void* dst,
                                     uint64_t nbytes, absl::Duration timeout) {
  SHOAL_ASSIGN_OR_RETURN(ObjectBuffer view, Get(id, timeout, nullptr));
  absl::Status s;
  if (nbytes != view.nbytes) {
    s = absl::InvalidArgumentError(absl::StrCat(
        "object ", id.ToHex(), " holds ", view.nbytes, " bytes, not ", nbytes));
  } else if (!view.meta.device.is_cpu()) {
    s = impl_->device().cuda().CopyToHost(view.meta.device.index, dst,
                                          view.data, nbytes, nullptr);
  } else {
    std::memcpy(dst, view.data, nbytes);
  }
  absl::Status r = Release(id);
  return s.ok() ? r : s;
}

absl::Status StoreClient::Transfer(const ObjectId& id,
                                   uint32_t to_client_slot) {
  // A receiver whose reference table is full has the service grow it
  // (other transfers may fill it again meanwhile: a few tries).
  constexpr int kTries = 8;
  for (int tries = 1;; ++tries) {
    uint32_t full_buckets = 0;
    absl::Status s = impl_->TransferOnce(id, to_client_slot, &full_buckets);
    if (full_buckets == 0 || tries == kTries) return s;
    ipc::StoreRefRoomRequest room;
    room.set_client_slot(to_client_slot);
    room.set_buckets(full_buckets);
    SHOAL_RETURN_IF_ERROR(
        impl_->Call<ipc::OkReply>(std::move(room), impl_->options_.rpc_timeout)
            .status());
  }
}

absl::Status StoreClient::Impl::TransferOnce(const ObjectId& id,
                                             uint32_t to_client_slot,
                                             uint32_t* full_buckets) {
  {
    SHOAL_ASSIGN_OR_RETURN(LockGuard lock, Lock());
    ObjectTable& table = *table_;
    if (to_client_slot >= table.header()->max_clients ||
        !table.slot(to_client_slot)->in_use) {
      return absl::FailedPreconditionError(absl::StrCat(
          "store client slot ", to_client_slot, " is not connected"));
    }
    std::optional<uint32_t> e = table.Find(id);
    if (!e) return absl::NotFoundError(absl::StrCat("no object ", id.ToHex()));
    if (table.HeldBy(slot_, *e) == 0) {
      return absl::FailedPreconditionError(
          "this client holds no reference to the object");
    }
    JournaledWriter journal(segment_->base(), &table.header()->lock.journal);
    // The receiver holds the object without mapping it (until its own Get):
    // a held object no process maps may be spilled.
    absl::Status s =
        table.AddRef(to_client_slot, *e, ObjectTable::RefKind::kHeld, &journal);
    if (ObjectTable::IsRefRoomError(s)) {
      *full_buckets = table.RefBuckets(to_client_slot);
      return s;
    }
    SHOAL_RETURN_IF_ERROR(s);
    SHOAL_ASSIGN_OR_RETURN(uint32_t left, table.DropRef(slot_, *e, &journal));
    (void)left;
    // The creator of a sealed object hands creatorship on with its
    // reference (a worker's new task output becomes the submitting
    // client's); anyone else's reference is only a reference.
    ObjectEntry* x = table.entry(*e);
    if (x->creator_plus1 == slot_ + 1 && IsSealed(x->state)) {
      journal.Write32(&x->creator_plus1, to_client_slot + 1);
    }
  }
  if (HoldsDevice(id)) TransferredDevice(id);
  return absl::OkStatus();
}

absl::Status StoreClient::ReleaseAndDelete(const ObjectId& id) {
  if (impl_->device_pending()) impl_->device().Collect(/*wait=*/false);
  if (impl_->HoldsDevice(id)) {
    SHOAL_RETURN_IF_ERROR(impl_->ReleaseDevice(id));
    return Delete(id);
  }
  return impl_->ReleaseNow(id, /*mark_deleted=*/true);
}

absl::Status StoreClient::Delete(const ObjectId& id) {
  return impl_
      ->Call<ipc::OkReply>(ipc::DeleteRequest{id}, impl_->options_.rpc_timeout)
      .status();
}

absl::StatusOr<bool> StoreClient::Created(const ObjectId& id) {
  SHOAL_ASSIGN_OR_RETURN(LockGuard lock, impl_->Lock());
  std::optional<uint32_t> e = impl_->table_->Find(id);
  if (!e) return absl::NotFoundError(absl::StrCat("no object ", id.ToHex()));
  return impl_->table_->entry(*e)->creator_plus1 == impl_->slot_ + 1;
}

absl::StatusOr<bool> StoreClient::Contains(const ObjectId& id) {
  SHOAL_ASSIGN_OR_RETURN(LockGuard lock, impl_->Lock());
  std::optional<uint32_t> e = impl_->table_->Find(id);
  if (!e) return false;
  const ObjectEntry* x = impl_->table_->entry(*e);
  return IsSealed(x->state) && !(x->flags & kFlagDeletePending);
}

absl::StatusOr<StoreStats> StoreClient::Stats() {
  return impl_->Call<ipc::StoreStats>(ipc::StoreStatsRequest{},
                                      impl_->options_.rpc_timeout);
}

absl::Status StoreClient::SetAccountLimit(uint32_t account,
                                          uint64_t limit_bytes) {
  if (account == 0) {
    return absl::InvalidArgumentError(
        "store account 0 means none: it has no limit to set");
  }
  ipc::StoreAccountRequest request;
  request.set_account(account);
  request.set_set_limit(true);
  request.set_limit_bytes(limit_bytes);
  return impl_
      ->Call<ipc::StoreAccountReply>(std::move(request),
                                     impl_->options_.rpc_timeout)
      .status();
}

absl::StatusOr<uint64_t> StoreClient::AccountUsage(uint32_t account) {
  if (account == 0) {
    return absl::InvalidArgumentError(
        "store account 0 means none: nothing is charged to it");
  }
  ipc::StoreAccountRequest request;
  request.set_account(account);
  SHOAL_ASSIGN_OR_RETURN(const ipc::StoreAccountReply r,
                         impl_->Call<ipc::StoreAccountReply>(
                             std::move(request), impl_->options_.rpc_timeout));
  return r.used_bytes();
}

const uint8_t* StoreClient::segment_base() const {
  return impl_->segment_->base();
}
uint32_t StoreClient::client_slot() const { return impl_->slot_; }

absl::Status StoreClient::RemapLocally(const uint8_t* data, uint64_t bytes,
                                       bool copy_on_write) {
  const uint8_t* base = impl_->segment_->base();
  if (data < base || data >= base + impl_->segment_->size()) {
    return absl::InvalidArgumentError(
        "RemapLocally: the range is not in the store segment");
  }
  return impl_->segment_->Remap(static_cast<uint64_t>(data - base), bytes,
                                copy_on_write);
}

bool StoreClient::closed() const {
  return impl_->table_->header()->prefix.closed.load(
             std::memory_order_acquire) != 0;
}

}  // namespace shoal::shm
