// The object store's messages on the wire: connect, create, seal, get,
// release and the rest of the store service's vocabulary.
#include "absl/strings/str_cat.h"
#include "ipc/protocol_internal.h"
#include "ipc/wire_convert.h"

namespace shoal::ipc {
namespace protocol_internal {

// ---- encode -----------------------------------------------------------------

absl::Status EncodeBody(const StoreConnectRequest& m, wire::Envelope* w) {
  w->mutable_store_connect()->set_pid(m.pid);
  w->mutable_store_connect()->set_name(m.name);
  return absl::OkStatus();
}

absl::Status EncodeBody(const StoreConnectReply& m, wire::Envelope* w) {
  auto* r = w->mutable_store_connect_reply();
  r->set_client_slot(m.client_slot);
  r->set_segment_name(m.segment_name);
  r->set_segment_bytes(m.segment_bytes);
  r->set_session(m.session);
  return absl::OkStatus();
}

absl::Status EncodeBody(const StoreDisconnectRequest&, wire::Envelope* w) {
  w->mutable_store_disconnect();
  return absl::OkStatus();
}

absl::Status EncodeBody(const CreateRequest& m, wire::Envelope* w) {
  absl::Status s = m.meta.Validate();
  if (!s.ok()) return s;
  auto* r = w->mutable_create();
  r->set_id(IdBytes(m.id));
  ToWire(m.meta, r->mutable_meta());
  r->set_nbytes(m.nbytes);
  r->set_device_uuid(m.device_uuid);
  r->set_account(m.account);
  return absl::OkStatus();
}

absl::Status EncodeBody(const CreateReply& m, wire::Envelope* w) {
  auto* r = w->mutable_create_reply();
  r->set_offset(m.offset);
  r->set_entry(m.entry);
  r->set_generation(m.generation);
  return absl::OkStatus();
}

absl::Status EncodeBody(const SealedNotice& m, wire::Envelope* w) {
  w->mutable_sealed()->set_id(IdBytes(m.id));
  return absl::OkStatus();
}

absl::Status EncodeBody(const AbortRequest& m, wire::Envelope* w) {
  w->mutable_abort()->set_id(IdBytes(m.id));
  return absl::OkStatus();
}

absl::Status EncodeBody(const GetRequest& m, wire::Envelope* w) {
  auto* r = w->mutable_get();
  for (const ObjectId& id : m.ids) r->add_ids(IdBytes(id));
  r->set_timeout_ms(m.timeout_ms);
  return absl::OkStatus();
}

absl::Status EncodeBody(const GetReply& m, wire::Envelope* w) {
  auto* r = w->mutable_get_reply();
  for (const ObjectInfo& info : m.objects) {
    auto* o = r->add_objects();
    o->set_id(IdBytes(info.id));
    o->set_code(static_cast<int32_t>(info.status.code()));
    o->set_message(std::string(info.status.message()));
    o->set_offset(info.offset);
    o->set_nbytes(info.nbytes);
    o->set_entry(info.entry);
    o->set_generation(info.generation);
    if (info.status.ok()) ToWire(info.meta, o->mutable_meta());
  }
  return absl::OkStatus();
}

absl::Status EncodeBody(const ReleaseRequest& m, wire::Envelope* w) {
  w->mutable_release()->set_id(IdBytes(m.id));
  return absl::OkStatus();
}

absl::Status EncodeBody(const DeleteRequest& m, wire::Envelope* w) {
  w->mutable_delete_object()->set_id(IdBytes(m.id));
  return absl::OkStatus();
}

absl::Status EncodeBody(const ContainsRequest& m, wire::Envelope* w) {
  w->mutable_contains()->set_id(IdBytes(m.id));
  return absl::OkStatus();
}

absl::Status EncodeBody(const ContainsReply& m, wire::Envelope* w) {
  w->mutable_contains_reply()->set_sealed(m.sealed);
  return absl::OkStatus();
}

absl::Status EncodeBody(const StoreStatsRequest&, wire::Envelope* w) {
  w->mutable_store_stats();
  return absl::OkStatus();
}

absl::Status EncodeBody(const StoreStats& m, wire::Envelope* w) {
  *w->mutable_store_stats_reply() = m;
  return absl::OkStatus();
}

absl::Status EncodeBody(const ReclaimHint& m, wire::Envelope* w) {
  w->mutable_reclaim_hint()->set_id(IdBytes(m.id));
  return absl::OkStatus();
}

absl::Status EncodeBody(const StoreAccountRequest& m, wire::Envelope* w) {
  *w->mutable_store_account() = m;
  return absl::OkStatus();
}

absl::Status EncodeBody(const StoreAccountReply& m, wire::Envelope* w) {
  *w->mutable_store_account_reply() = m;
  return absl::OkStatus();
}

absl::Status EncodeBody(const StoreRefRoomRequest& m, wire::Envelope* w) {
  *w->mutable_store_ref_room() = m;
  return absl::OkStatus();
}

// ---- decode -----------------------------------------------------------------

namespace {

absl::StatusOr<Message> StoreConnectFromWire(const wire::StoreConnectRequest& r,
                                             const DecodeLimits& limits) {
  if (r.name().size() > limits.max_string_bytes) {
    return absl::ResourceExhaustedError("client name too long");
  }
  if (r.pid() <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("invalid pid ", r.pid()));
  }
  return StoreConnectRequest{r.pid(), r.name()};
}

absl::StatusOr<Message> CreateFromWire(const wire::CreateRequest& r) {
  CreateRequest m;
  auto id = ObjectId::FromBinary(r.id());
  if (!id.ok()) return id.status();
  m.id = *id;
  auto meta = FromWire(r.meta());
  if (!meta.ok()) return meta.status();
  m.meta = *std::move(meta);
  m.nbytes = r.nbytes();
  m.device_uuid = r.device_uuid();
  m.account = r.account();
  if (!m.device_uuid.empty() && m.device_uuid.size() != 16) {
    return absl::InvalidArgumentError("create: device_uuid must be 16 bytes");
  }
  return m;
}

absl::StatusOr<Message> GetFromWire(const wire::GetRequest& r,
                                    const DecodeLimits& limits) {
  if (static_cast<size_t>(r.ids_size()) > limits.max_ids) {
    return TooMany("get", r.ids_size(), limits.max_ids);
  }
  GetRequest m;
  m.timeout_ms = r.timeout_ms();
  for (const std::string& b : r.ids()) {
    auto id = ObjectId::FromBinary(b);
    if (!id.ok()) return id.status();
    m.ids.push_back(*id);
  }
  return m;
}

absl::StatusOr<ObjectInfo> ObjectInfoFromWire(const wire::ObjectInfo& o) {
  ObjectInfo info;
  auto id = ObjectId::FromBinary(o.id());
  if (!id.ok()) return id.status();
  info.id = *id;
  if (!StatusFromWire(o.code(), o.message(), &info.status)) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid status code ", o.code()));
  }
  info.offset = o.offset();
  info.nbytes = o.nbytes();
  info.entry = o.entry();
  info.generation = o.generation();
  if (info.status.ok()) {
    auto meta = FromWire(o.meta());
    if (!meta.ok()) return meta.status();
    info.meta = *std::move(meta);
  }
  return info;
}

absl::StatusOr<Message> GetReplyFromWire(const wire::GetReply& r,
                                         const DecodeLimits& limits) {
  if (static_cast<size_t>(r.objects_size()) > limits.max_ids) {
    return TooMany("get reply", r.objects_size(), limits.max_ids);
  }
  GetReply m;
  for (const wire::ObjectInfo& o : r.objects()) {
    auto info = ObjectInfoFromWire(o);
    if (!info.ok()) return info.status();
    m.objects.push_back(*std::move(info));
  }
  return m;
}

}  // namespace

absl::StatusOr<Message> StoreBodyFromWire(const wire::Envelope& w,
                                          const DecodeLimits& limits) {
  switch (w.body_case()) {
    case wire::Envelope::kStoreConnect:
      return StoreConnectFromWire(w.store_connect(), limits);
    case wire::Envelope::kStoreConnectReply: {
      const auto& r = w.store_connect_reply();
      return StoreConnectReply{r.client_slot(), r.segment_name(),
                               r.segment_bytes(), r.session()};
    }
    case wire::Envelope::kStoreDisconnect:
      return StoreDisconnectRequest{};
    case wire::Envelope::kCreate:
      return CreateFromWire(w.create());
    case wire::Envelope::kCreateReply: {
      const auto& r = w.create_reply();
      return CreateReply{r.offset(), r.entry(), r.generation()};
    }
    case wire::Envelope::kSealed:
      return IdMessageFromWire<SealedNotice>(w.sealed().id());
    case wire::Envelope::kAbort:
      return IdMessageFromWire<AbortRequest>(w.abort().id());
    case wire::Envelope::kGet:
      return GetFromWire(w.get(), limits);
    case wire::Envelope::kGetReply:
      return GetReplyFromWire(w.get_reply(), limits);
    case wire::Envelope::kRelease:
      return IdMessageFromWire<ReleaseRequest>(w.release().id());
    case wire::Envelope::kDeleteObject:
      return IdMessageFromWire<DeleteRequest>(w.delete_object().id());
    case wire::Envelope::kContains:
      return IdMessageFromWire<ContainsRequest>(w.contains().id());
    case wire::Envelope::kContainsReply:
      return ContainsReply{w.contains_reply().sealed()};
    case wire::Envelope::kStoreStats:
      return StoreStatsRequest{};
    case wire::Envelope::kStoreStatsReply:
      return w.store_stats_reply();
    case wire::Envelope::kReclaimHint:
      return IdMessageFromWire<ReclaimHint>(w.reclaim_hint().id());
    case wire::Envelope::kStoreAccount:
      return w.store_account();
    case wire::Envelope::kStoreAccountReply:
      return w.store_account_reply();
    case wire::Envelope::kStoreRefRoom:
      return w.store_ref_room();
    default:
      return NotInArea("store", w);
  }
}

}  // namespace protocol_internal
}  // namespace shoal::ipc
