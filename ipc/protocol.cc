#include "ipc/protocol.h"

#include <type_traits>

#include "absl/strings/str_cat.h"
#include "proto/shoal.pb.h"

namespace shoal::ipc {
namespace {

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

// ---- value conversions ------------------------------------------------------

void ToWire(const TensorMeta& m, wire::TensorMetaSpec* out) {
  out->set_dtype(static_cast<uint32_t>(m.dtype));
  for (int64_t d : m.shape) out->add_shape(d);
  for (int64_t s : m.strides) out->add_strides(s);
  out->mutable_device()->set_type(static_cast<uint32_t>(m.device.type));
  out->mutable_device()->set_index(m.device.index);
}

absl::StatusOr<TensorMeta> FromWire(const wire::TensorMetaSpec& w) {
  if (!IsValidDType(w.dtype())) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown dtype value ", w.dtype()));
  }
  if (w.shape_size() > kMaxRank || w.strides_size() > kMaxRank) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor rank ", std::max(w.shape_size(), w.strides_size()),
                     " exceeds the maximum of ", kMaxRank));
  }
  if (w.device().type() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown device type ", w.device().type()));
  }
  TensorMeta m;
  m.dtype = static_cast<DType>(w.dtype());
  m.shape.assign(w.shape().begin(), w.shape().end());
  m.strides.assign(w.strides().begin(), w.strides().end());
  m.device.type = static_cast<Device::Type>(w.device().type());
  m.device.index = w.device().index();
  absl::Status s = m.Validate();
  if (!s.ok()) return s;
  return m;
}

absl::StatusOr<ObjectId> IdFromWire(const std::string& bytes) {
  return ObjectId::FromBinary(bytes);
}

bool ValidCode(int32_t code) {
  return code > 0 &&
         code <= static_cast<int32_t>(absl::StatusCode::kUnauthenticated);
}

absl::Status StatusFromWire(int32_t code, const std::string& message) {
  if (code == 0) return absl::OkStatus();
  if (!ValidCode(code)) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid status code ", code));
  }
  return absl::Status(static_cast<absl::StatusCode>(code), message);
}

void InfoToWire(const ObjectInfo& info, wire::ObjectInfo* out) {
  out->set_id(std::string(info.id.Binary()));
  out->set_code(static_cast<int32_t>(info.status.code()));
  out->set_message(std::string(info.status.message()));
  out->set_offset(info.offset);
  out->set_nbytes(info.nbytes);
  out->set_entry(info.entry);
  out->set_generation(info.generation);
  if (info.status.ok()) ToWire(info.meta, out->mutable_meta());
}

absl::StatusOr<ObjectInfo> InfoFromWire(const wire::ObjectInfo& w) {
  ObjectInfo info;
  auto id = IdFromWire(w.id());
  if (!id.ok()) return id.status();
  info.id = *id;
  if (w.code() != 0 && !ValidCode(w.code())) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid status code ", w.code()));
  }
  info.status = StatusFromWire(w.code(), w.message());
  info.offset = w.offset();
  info.nbytes = w.nbytes();
  info.entry = w.entry();
  info.generation = w.generation();
  if (info.status.ok()) {
    auto meta = FromWire(w.meta());
    if (!meta.ok()) return meta.status();
    info.meta = *std::move(meta);
  }
  return info;
}

// ---- encode -----------------------------------------------------------------

absl::Status BodyToWire(const Message& body, wire::Envelope* w) {
  return std::visit(
      Overloaded{
          [&](const ErrorReply& m) -> absl::Status {
            if (m.status.ok()) {
              return absl::InvalidArgumentError(
                  "an ErrorReply needs a non-OK status");
            }
            w->mutable_error()->set_code(static_cast<int32_t>(m.status.code()));
            w->mutable_error()->set_message(std::string(m.status.message()));
            return absl::OkStatus();
          },
          [&](const OkReply&) -> absl::Status {
            w->mutable_ok();
            return absl::OkStatus();
          },
          [&](const StoreConnectRequest& m) -> absl::Status {
            w->mutable_store_connect()->set_pid(m.pid);
            w->mutable_store_connect()->set_name(m.name);
            return absl::OkStatus();
          },
          [&](const StoreConnectReply& m) -> absl::Status {
            auto* r = w->mutable_store_connect_reply();
            r->set_client_slot(m.client_slot);
            r->set_segment_name(m.segment_name);
            r->set_segment_bytes(m.segment_bytes);
            r->set_session(m.session);
            return absl::OkStatus();
          },
          [&](const StoreDisconnectRequest&) -> absl::Status {
            w->mutable_store_disconnect();
            return absl::OkStatus();
          },
          [&](const CreateRequest& m) -> absl::Status {
            absl::Status s = m.meta.Validate();
            if (!s.ok()) return s;
            auto* r = w->mutable_create();
            r->set_id(std::string(m.id.Binary()));
            ToWire(m.meta, r->mutable_meta());
            r->set_nbytes(m.nbytes);
            return absl::OkStatus();
          },
          [&](const CreateReply& m) -> absl::Status {
            auto* r = w->mutable_create_reply();
            r->set_offset(m.offset);
            r->set_entry(m.entry);
            r->set_generation(m.generation);
            return absl::OkStatus();
          },
          [&](const SealedNotice& m) -> absl::Status {
            w->mutable_sealed()->set_id(std::string(m.id.Binary()));
            return absl::OkStatus();
          },
          [&](const AbortRequest& m) -> absl::Status {
            w->mutable_abort()->set_id(std::string(m.id.Binary()));
            return absl::OkStatus();
          },
          [&](const GetRequest& m) -> absl::Status {
            auto* r = w->mutable_get();
            for (const ObjectId& id : m.ids)
              r->add_ids(std::string(id.Binary()));
            r->set_timeout_ms(m.timeout_ms);
            return absl::OkStatus();
          },
          [&](const GetReply& m) -> absl::Status {
            auto* r = w->mutable_get_reply();
            for (const ObjectInfo& info : m.objects) {
              InfoToWire(info, r->add_objects());
            }
            return absl::OkStatus();
          },
          [&](const ReleaseRequest& m) -> absl::Status {
            w->mutable_release()->set_id(std::string(m.id.Binary()));
            return absl::OkStatus();
          },
          [&](const DeleteRequest& m) -> absl::Status {
            w->mutable_delete_object()->set_id(std::string(m.id.Binary()));
            return absl::OkStatus();
          },
          [&](const ContainsRequest& m) -> absl::Status {
            w->mutable_contains()->set_id(std::string(m.id.Binary()));
            return absl::OkStatus();
          },
          [&](const ContainsReply& m) -> absl::Status {
            w->mutable_contains_reply()->set_sealed(m.sealed);
            return absl::OkStatus();
          },
          [&](const StoreStatsRequest&) -> absl::Status {
            w->mutable_store_stats();
            return absl::OkStatus();
          },
          [&](const StoreStats& m) -> absl::Status {
            auto* r = w->mutable_store_stats_reply();
            r->set_capacity_bytes(m.capacity_bytes);
            r->set_used_bytes(m.used_bytes);
            r->set_objects(m.objects);
            r->set_sealed_objects(m.sealed_objects);
            r->set_referenced_objects(m.referenced_objects);
            r->set_evictions(m.evictions);
            r->set_evicted_bytes(m.evicted_bytes);
            r->set_clients(m.clients);
            r->set_prefaulted_bytes(m.prefaulted_bytes);
            r->set_max_objects(m.max_objects);
            r->set_lock_repairs(m.lock_repairs);
            return absl::OkStatus();
          },
          [&](const ReclaimHint& m) -> absl::Status {
            w->mutable_reclaim_hint()->set_id(std::string(m.id.Binary()));
            return absl::OkStatus();
          },
      },
      body);
}

// ---- decode -----------------------------------------------------------------

absl::StatusOr<Message> BodyFromWire(const wire::Envelope& w,
                                     const DecodeLimits& limits) {
  auto id_of = [](const std::string& bytes) { return IdFromWire(bytes); };
  switch (w.body_case()) {
    case wire::Envelope::kError: {
      if (!ValidCode(w.error().code())) {
        return absl::InvalidArgumentError(
            absl::StrCat("error reply with invalid code ", w.error().code()));
      }
      return ErrorReply{StatusFromWire(w.error().code(), w.error().message())};
    }
    case wire::Envelope::kOk:
      return OkReply{};
    case wire::Envelope::kStoreConnect: {
      if (w.store_connect().name().size() > limits.max_string_bytes) {
        return absl::ResourceExhaustedError("client name too long");
      }
      if (w.store_connect().pid() <= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("invalid pid ", w.store_connect().pid()));
      }
      return StoreConnectRequest{w.store_connect().pid(),
                                 w.store_connect().name()};
    }
    case wire::Envelope::kStoreConnectReply: {
      const auto& r = w.store_connect_reply();
      return StoreConnectReply{r.client_slot(), r.segment_name(),
                               r.segment_bytes(), r.session()};
    }
    case wire::Envelope::kStoreDisconnect:
      return StoreDisconnectRequest{};
    case wire::Envelope::kCreate: {
      CreateRequest m;
      auto id = id_of(w.create().id());
      if (!id.ok()) return id.status();
      m.id = *id;
      auto meta = FromWire(w.create().meta());
      if (!meta.ok()) return meta.status();
      m.meta = *std::move(meta);
      m.nbytes = w.create().nbytes();
      return m;
    }
    case wire::Envelope::kCreateReply: {
      const auto& r = w.create_reply();
      return CreateReply{r.offset(), r.entry(), r.generation()};
    }
    case wire::Envelope::kSealed: {
      auto id = id_of(w.sealed().id());
      if (!id.ok()) return id.status();
      return SealedNotice{*id};
    }
    case wire::Envelope::kAbort: {
      auto id = id_of(w.abort().id());
      if (!id.ok()) return id.status();
      return AbortRequest{*id};
    }
    case wire::Envelope::kGet: {
      if (static_cast<size_t>(w.get().ids_size()) > limits.max_ids) {
        return absl::ResourceExhaustedError(
            absl::StrCat("get of ", w.get().ids_size(),
                         " ids exceeds the limit of ", limits.max_ids));
      }
      GetRequest m;
      m.timeout_ms = w.get().timeout_ms();
      for (const std::string& b : w.get().ids()) {
        auto id = id_of(b);
        if (!id.ok()) return id.status();
        m.ids.push_back(*id);
      }
      return m;
    }
    case wire::Envelope::kGetReply: {
      if (static_cast<size_t>(w.get_reply().objects_size()) > limits.max_ids) {
        return absl::ResourceExhaustedError("get reply holds too many objects");
      }
      GetReply m;
      for (const wire::ObjectInfo& o : w.get_reply().objects()) {
        auto info = InfoFromWire(o);
        if (!info.ok()) return info.status();
        m.objects.push_back(*std::move(info));
      }
      return m;
    }
    case wire::Envelope::kRelease: {
      auto id = id_of(w.release().id());
      if (!id.ok()) return id.status();
      return ReleaseRequest{*id};
    }
    case wire::Envelope::kDeleteObject: {
      auto id = id_of(w.delete_object().id());
      if (!id.ok()) return id.status();
      return DeleteRequest{*id};
    }
    case wire::Envelope::kContains: {
      auto id = id_of(w.contains().id());
      if (!id.ok()) return id.status();
      return ContainsRequest{*id};
    }
    case wire::Envelope::kContainsReply:
      return ContainsReply{w.contains_reply().sealed()};
    case wire::Envelope::kStoreStats:
      return StoreStatsRequest{};
    case wire::Envelope::kStoreStatsReply: {
      const auto& r = w.store_stats_reply();
      StoreStats m;
      m.capacity_bytes = r.capacity_bytes();
      m.used_bytes = r.used_bytes();
      m.objects = r.objects();
      m.sealed_objects = r.sealed_objects();
      m.referenced_objects = r.referenced_objects();
      m.evictions = r.evictions();
      m.evicted_bytes = r.evicted_bytes();
      m.clients = r.clients();
      m.prefaulted_bytes = r.prefaulted_bytes();
      m.max_objects = r.max_objects();
      m.lock_repairs = r.lock_repairs();
      return m;
    }
    case wire::Envelope::kReclaimHint: {
      auto id = id_of(w.reclaim_hint().id());
      if (!id.ok()) return id.status();
      return ReclaimHint{*id};
    }
    case wire::Envelope::BODY_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError("message has no body (or an unknown one)");
}

}  // namespace

absl::StatusOr<std::string> Encode(const Envelope& envelope) {
  wire::Envelope w;
  w.set_major(kProtocolMajor);
  w.set_minor(kProtocolMinor);
  w.set_request_id(envelope.request_id);
  absl::Status s = BodyToWire(envelope.body, &w);
  if (!s.ok()) return s;
  std::string out;
  if (!w.SerializeToString(&out)) {
    return absl::InternalError("protobuf serialisation failed");
  }
  return out;
}

absl::StatusOr<std::string> Encode(uint64_t request_id, Message body) {
  return Encode(Envelope{request_id, std::move(body)});
}

std::string EncodeError(uint64_t request_id, const absl::Status& status) {
  absl::StatusOr<std::string> frame = Encode(
      request_id, ErrorReply{status.ok() ? absl::InternalError(
                                               "error reply without an error")
                                         : status});
  if (frame.ok()) return *std::move(frame);
  wire::Envelope w;
  w.set_major(kProtocolMajor);
  w.set_minor(kProtocolMinor);
  w.set_request_id(request_id);
  w.mutable_error()->set_code(
      static_cast<int32_t>(absl::StatusCode::kInternal));
  w.mutable_error()->set_message("failed to encode an error reply");
  return w.SerializeAsString();
}

DecodeResult Decode(absl::string_view frame, const DecodeLimits& limits) {
  DecodeResult result;
  if (frame.size() > limits.max_frame_bytes) {
    result.envelope = absl::ResourceExhaustedError(
        absl::StrCat("frame of ", frame.size(), " bytes exceeds the limit of ",
                     limits.max_frame_bytes));
    return result;
  }
  wire::Envelope w;
  if (!w.ParseFromArray(frame.data(), static_cast<int>(frame.size()))) {
    result.envelope = absl::InvalidArgumentError(absl::StrCat(
        "frame of ", frame.size(), " bytes is not a shoal message"));
    return result;
  }
  result.request_id = w.request_id();
  if (w.major() != kProtocolMajor) {
    result.envelope = absl::FailedPreconditionError(
        absl::StrCat("protocol version mismatch: peer speaks ", w.major(), ".",
                     w.minor(), ", this side speaks ", kProtocolMajor, ".",
                     kProtocolMinor, "; use matching shoal builds"));
    return result;
  }
  absl::StatusOr<Message> body = BodyFromWire(w, limits);
  if (!body.ok()) {
    result.envelope = body.status();
    return result;
  }
  result.envelope = Envelope{w.request_id(), *std::move(body)};
  return result;
}

absl::string_view MessageName(const Message& m) {
  static constexpr absl::string_view kNames[] = {"error",
                                                 "ok",
                                                 "store_connect",
                                                 "store_connect_reply",
                                                 "store_disconnect",
                                                 "create",
                                                 "create_reply",
                                                 "sealed",
                                                 "abort",
                                                 "get",
                                                 "get_reply",
                                                 "release",
                                                 "delete",
                                                 "contains",
                                                 "contains_reply",
                                                 "store_stats",
                                                 "store_stats_reply",
                                                 "reclaim_hint"};
  static_assert(std::size(kNames) == std::variant_size_v<Message>);
  return kNames[m.index()];
}

}  // namespace shoal::ipc
