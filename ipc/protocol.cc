// The envelope: version, size limits and error replies. Each body is encoded
// and decoded by the file of its area (see protocol_internal.h).
#include "ipc/protocol.h"

#include <cstdint>
#include <optional>
#include <variant>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "ipc/protocol_internal.h"
#include "ipc/wire_convert.h"
#include "proto/shoal.pb.h"

namespace shoal::ipc {
namespace protocol_internal {

absl::Status TooMany(absl::string_view what, size_t n, size_t limit) {
  return absl::ResourceExhaustedError(
      absl::StrCat(what, " lists ", n, " items, above the limit of ", limit));
}

absl::Status NotInArea(absl::string_view area, const wire::Envelope& w) {
  return absl::InternalError(absl::StrCat("body case ", w.body_case(),
                                          " is not a ", area, " message"));
}

absl::Status EncodeBody(const ErrorReply& m, wire::Envelope* w) {
  if (m.status.ok()) {
    return absl::InvalidArgumentError("an ErrorReply needs a non-OK status");
  }
  w->mutable_error()->set_code(static_cast<int32_t>(m.status.code()));
  w->mutable_error()->set_message(std::string(m.status.message()));
  if (IsSessionReset(m.status)) w->mutable_error()->set_session_reset(true);
  return absl::OkStatus();
}

absl::Status EncodeBody(const OkReply&, wire::Envelope* w) {
  w->mutable_ok();
  return absl::OkStatus();
}

}  // namespace protocol_internal

namespace {

using protocol_internal::EncodeBody;

absl::Status BodyToWire(const Message& body, wire::Envelope* w) {
  return std::visit([w](const auto& m) { return EncodeBody(m, w); }, body);
}

absl::StatusOr<Message> ErrorReplyFromWire(const wire::ErrorReply& r) {
  if (!ValidStatusCode(r.code())) {
    return absl::InvalidArgumentError(
        absl::StrCat("error reply with invalid code ", r.code()));
  }
  absl::Status s(static_cast<absl::StatusCode>(r.code()), r.message());
  return ErrorReply{r.session_reset() ? MarkSessionReset(std::move(s)) : s};
}

// Sends each body case to the decoder of its area (protocol_internal.h). The
// switch names every case, so -Wswitch flags one added to the proto and not
// here.
absl::StatusOr<Message> BodyFromWire(const wire::Envelope& w,
                                     const DecodeLimits& limits) {
  switch (w.body_case()) {
    case wire::Envelope::kError:
      return ErrorReplyFromWire(w.error());
    case wire::Envelope::kOk:
      return OkReply{};
    case wire::Envelope::kStoreConnect:
    case wire::Envelope::kStoreConnectReply:
    case wire::Envelope::kStoreDisconnect:
    case wire::Envelope::kCreate:
    case wire::Envelope::kCreateReply:
    case wire::Envelope::kSealed:
    case wire::Envelope::kAbort:
    case wire::Envelope::kGet:
    case wire::Envelope::kGetReply:
    case wire::Envelope::kRelease:
    case wire::Envelope::kDeleteObject:
    case wire::Envelope::kContains:
    case wire::Envelope::kContainsReply:
    case wire::Envelope::kStoreStats:
    case wire::Envelope::kStoreStatsReply:
    case wire::Envelope::kReclaimHint:
    case wire::Envelope::kStoreAccount:
    case wire::Envelope::kStoreAccountReply:
    case wire::Envelope::kStoreRefRoom:
      return protocol_internal::StoreBodyFromWire(w, limits);
    case wire::Envelope::kClientHello:
    case wire::Envelope::kClientWelcome:
    case wire::Envelope::kSubmit:
    case wire::Envelope::kSubmitReply:
    case wire::Envelope::kWait:
    case wire::Envelope::kWaitReply:
    case wire::Envelope::kCancel:
    case wire::Envelope::kReleaseTasks:
    case wire::Envelope::kFetchObject:
    case wire::Envelope::kFetchObjectReply:
    case wire::Envelope::kWorkerHello:
    case wire::Envelope::kWorkerHeartbeat:
    case wire::Envelope::kStatus:
    case wire::Envelope::kNodeStatus:
    case wire::Envelope::kStop:
    case wire::Envelope::kActorCreate:
    case wire::Envelope::kActorCreateReply:
    case wire::Envelope::kActorKill:
    case wire::Envelope::kSessionAck:
    case wire::Envelope::kPutObject:
    case wire::Envelope::kPutObjectReply:
      return protocol_internal::TaskBodyFromWire(w, limits);
    case wire::Envelope::kKvSet:
    case wire::Envelope::kKvGet:
    case wire::Envelope::kKvValue:
    case wire::Envelope::kKvAdd:
    case wire::Envelope::kKvCas:
    case wire::Envelope::kKvDelete:
    case wire::Envelope::kKvList:
    case wire::Envelope::kKvListReply:
    case wire::Envelope::kKvWait:
    case wire::Envelope::kBarrier:
      return protocol_internal::KvBodyFromWire(w, limits);
    case wire::Envelope::BODY_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError("message has no body (or an unknown one)");
}

// The request id of a frame that does not parse as a whole: the Envelope's
// leading fields (major 1, minor 2, request_id 3: protobuf writes fields in
// order) read as far as they are well-formed; 0 if it cannot be read.
uint64_t LeadingRequestId(absl::string_view frame) {
  size_t at = 0;
  auto varint = [&](uint64_t* out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64 && at < frame.size(); shift += 7) {
      const uint8_t b = static_cast<uint8_t>(frame[at++]);
      v |= uint64_t{b & 0x7fu} << shift;
      if ((b & 0x80) == 0) {
        *out = v;
        return true;
      }
    }
    return false;
  };
  while (at < frame.size()) {
    uint64_t tag = 0, value = 0;
    if (!varint(&tag) || (tag & 7) != 0 || !varint(&value)) return 0;
    if ((tag >> 3) == 3) return value;
    if ((tag >> 3) > 3) return 0;
  }
  return 0;
}

// A reader of protobuf's wire format (varints, tags, length-delimited
// values) over a frame, for PeekEnvelope.
class WireScan {
 public:
  explicit WireScan(absl::string_view data) : data_(data) {}
  bool done() const { return at_ >= data_.size(); }

  bool Varint(uint64_t* out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64 && at_ < data_.size(); shift += 7) {
      const uint8_t b = static_cast<uint8_t>(data_[at_++]);
      v |= uint64_t{b & 0x7fu} << shift;
      if ((b & 0x80) == 0) {
        *out = v;
        return true;
      }
    }
    return false;
  }
  bool Tag(uint32_t* field, uint32_t* type) {
    uint64_t tag = 0;
    if (!Varint(&tag) || (tag >> 3) == 0 || (tag >> 3) > UINT32_MAX)
      return false;
    *field = static_cast<uint32_t>(tag >> 3);
    *type = static_cast<uint32_t>(tag & 7);
    return true;
  }
  bool Bytes(absl::string_view* out) {
    uint64_t n = 0;
    if (!Varint(&n) || n > data_.size() - at_) return false;
    *out = data_.substr(at_, n);
    at_ += n;
    return true;
  }
  // Skips a value of wire type `type` (groups are not used by shoal.proto).
  bool Skip(uint32_t type) {
    uint64_t v = 0;
    absl::string_view b;
    switch (type) {
      case 0:
        return Varint(&v);
      case 1:
        return Advance(8);
      case 2:
        return Bytes(&b);
      case 5:
        return Advance(4);
      default:
        return false;
    }
  }

 private:
  bool Advance(size_t n) {
    if (n > data_.size() - at_) return false;
    at_ += n;
    return true;
  }
  absl::string_view data_;
  size_t at_ = 0;
};

// The items a body lists (PeekEnvelope): its field 1's entries, packed or
// not. nullopt when the body does not scan.
std::optional<uint64_t> CountItems(absl::string_view body, bool packed_ints) {
  WireScan scan(body);
  uint64_t items = 0;
  while (!scan.done()) {
    uint32_t field = 0, type = 0;
    if (!scan.Tag(&field, &type)) return std::nullopt;
    if (field == 1 && packed_ints && type == 2) {
      absl::string_view packed;
      if (!scan.Bytes(&packed)) return std::nullopt;
      for (char c : packed) items += (static_cast<uint8_t>(c) & 0x80) == 0;
      continue;
    }
    if (field == 1) ++items;
    if (!scan.Skip(type)) return std::nullopt;
  }
  return items;
}

}  // namespace

std::optional<EnvelopeHead> PeekEnvelope(absl::string_view frame) {
  using W = wire::Envelope;
  constexpr uint32_t kSubmit = W::kSubmitFieldNumber,
                     kWait = W::kWaitFieldNumber,
                     kCancel = W::kCancelFieldNumber,
                     kReleaseTasks = W::kReleaseTasksFieldNumber,
                     kFirstBody = W::kErrorFieldNumber;
  static_assert(kSessionAckField == W::kSessionAckFieldNumber);
  static_assert(W::kMajorFieldNumber == 1 && W::kMinorFieldNumber == 2 &&
                W::kRequestIdFieldNumber == 3 && W::kSessionFieldNumber == 4 &&
                W::kAckFieldNumber == 5 && W::kSeqFieldNumber == 6);
  EnvelopeHead head;
  WireScan scan(frame);
  while (!scan.done()) {
    uint32_t field = 0, type = 0;
    if (!scan.Tag(&field, &type)) return std::nullopt;
    if (field < kFirstBody) {
      uint64_t v = 0;
      if (type != 0) {
        if (!scan.Skip(type)) return std::nullopt;
        continue;
      }
      if (!scan.Varint(&v)) return std::nullopt;
      switch (field) {
        case 1:
          head.major = static_cast<uint32_t>(v);
          break;
        case 2:
          head.minor = static_cast<uint32_t>(v);
          break;
        case 3:
          head.request_id = v;
          break;
        case 4:
          head.session = v;
          break;
        case 5:
          head.ack = v;
          break;
        case 6:
          head.seq = v;
          break;
        default:
          break;
      }
      continue;
    }
    absl::string_view body;
    if (type != 2 || head.body_field != 0 || !scan.Bytes(&body))
      return std::nullopt;
    head.body_field = field;
    if (field == kSubmit || field == kWait || field == kCancel ||
        field == kReleaseTasks) {
      std::optional<uint64_t> items = CountItems(body, field != kSubmit);
      if (!items) return std::nullopt;
      head.items = *items;
    }
  }
  return head;
}

bool IsSessionReset(const absl::Status& s) {
  return s.GetPayload(kSessionResetPayload).has_value();
}

absl::Status MarkSessionReset(absl::Status s) {
  s.SetPayload(kSessionResetPayload, absl::Cord("1"));
  return s;
}

absl::StatusOr<std::string> Encode(const Envelope& envelope) {
  wire::Envelope w;
  w.set_major(kProtocolMajor);
  w.set_minor(kProtocolMinor);
  w.set_request_id(envelope.request_id);
  if (envelope.session != 0) w.set_session(envelope.session);
  if (envelope.ack != 0) w.set_ack(envelope.ack);
  if (envelope.seq != 0) w.set_seq(envelope.seq);
  absl::Status s = BodyToWire(envelope.body, &w);
  if (!s.ok()) return s;
  std::string out;
  if (!w.SerializeToString(&out))
    return absl::InternalError("protobuf serialisation failed");
  return out;
}

absl::StatusOr<std::string> Encode(uint64_t request_id, Message body) {
  return Encode(Envelope{request_id, std::move(body)});
}

absl::Status CheckRequestSize(size_t frame_bytes, uint64_t max_request_bytes) {
  if (max_request_bytes == 0 || frame_bytes <= max_request_bytes)
    return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "a request of ", frame_bytes,
      " bytes is over the node's max_request_bytes = ", max_request_bytes,
      " (nothing was sent; put a large value into the store with put_object "
      "and pass its id)"));
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
    result.request_id = LeadingRequestId(frame);
    result.envelope = absl::ResourceExhaustedError(
        absl::StrCat("frame of ", frame.size(), " bytes exceeds the limit of ",
                     limits.max_frame_bytes, " (max_request_bytes)"));
    return result;
  }
  wire::Envelope w;
  if (!w.ParseFromArray(frame.data(), static_cast<int>(frame.size()))) {
    result.request_id = LeadingRequestId(frame);
    result.envelope = absl::InvalidArgumentError(absl::StrCat(
        "frame of ", frame.size(), " bytes is not a shoal message"));
    return result;
  }
  result.request_id = w.request_id();
  if (w.major() == 0) {
    result.envelope = absl::InvalidArgumentError(
        frame.empty() ? std::string("an empty frame is not a shoal message")
                      : absl::StrCat("frame of ", frame.size(),
                                     " bytes has no protocol version: not a "
                                     "shoal message"));
    return result;
  }
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
  Envelope e{w.request_id(), *std::move(body)};
  e.session = w.session();
  e.ack = w.ack();
  e.seq = w.seq();
  e.minor = w.minor();
  result.envelope = std::move(e);
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
                                                 "reclaim_hint",
                                                 "store_account",
                                                 "store_account_reply",
                                                 "store_ref_room",
                                                 "client_hello",
                                                 "client_welcome",
                                                 "submit",
                                                 "submit_reply",
                                                 "wait",
                                                 "wait_reply",
                                                 "cancel",
                                                 "release_tasks",
                                                 "fetch_object",
                                                 "fetch_object_reply",
                                                 "worker_hello",
                                                 "worker_heartbeat",
                                                 "status",
                                                 "node_status",
                                                 "stop",
                                                 "kv_set",
                                                 "kv_get",
                                                 "kv_value",
                                                 "kv_add",
                                                 "kv_cas",
                                                 "kv_delete",
                                                 "kv_list",
                                                 "kv_list_reply",
                                                 "kv_wait",
                                                 "barrier",
                                                 "actor_create",
                                                 "actor_create_reply",
                                                 "actor_kill",
                                                 "session_ack",
                                                 "put_object",
                                                 "put_object_reply"};
  static_assert(std::size(kNames) == std::variant_size_v<Message>);
  return kNames[m.index()];
}

}  // namespace shoal::ipc
