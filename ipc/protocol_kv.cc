// The job's key-value store and barriers on the wire.
#include "ipc/protocol_internal.h"

namespace shoal::ipc {
namespace protocol_internal {

// ---- encode -----------------------------------------------------------------

absl::Status EncodeBody(const KvSetRequest& m, wire::Envelope* w) {
  w->mutable_kv_set()->set_key(m.key);
  w->mutable_kv_set()->set_value(m.value);
  return absl::OkStatus();
}

absl::Status EncodeBody(const KvGetRequest& m, wire::Envelope* w) {
  w->mutable_kv_get()->set_key(m.key);
  w->mutable_kv_get()->set_timeout_ms(m.timeout_ms);
  return absl::OkStatus();
}

absl::Status EncodeBody(const KvValue& m, wire::Envelope* w) {
  w->mutable_kv_value()->set_found(m.found);
  w->mutable_kv_value()->set_value(m.value);
  w->mutable_kv_value()->set_count(m.count);
  return absl::OkStatus();
}

absl::Status EncodeBody(const KvAddRequest& m, wire::Envelope* w) {
  w->mutable_kv_add()->set_key(m.key);
  w->mutable_kv_add()->set_delta(m.delta);
  return absl::OkStatus();
}

absl::Status EncodeBody(const KvCompareAndSetRequest& m, wire::Envelope* w) {
  auto* r = w->mutable_kv_cas();
  r->set_key(m.key);
  r->set_expected(m.expected);
  r->set_desired(m.desired);
  r->set_expect_absent(m.expect_absent);
  return absl::OkStatus();
}

absl::Status EncodeBody(const KvDeleteRequest& m, wire::Envelope* w) {
  w->mutable_kv_delete()->set_key(m.key);
  w->mutable_kv_delete()->set_prefix(m.prefix);
  return absl::OkStatus();
}

absl::Status EncodeBody(const KvListRequest& m, wire::Envelope* w) {
  w->mutable_kv_list()->set_prefix(m.prefix);
  return absl::OkStatus();
}

absl::Status EncodeBody(const KvListReply& m, wire::Envelope* w) {
  auto* r = w->mutable_kv_list_reply();
  for (const auto& [k, v] : m.entries) {
    r->add_keys(k);
    r->add_values(v);
  }
  return absl::OkStatus();
}

absl::Status EncodeBody(const KvWaitRequest& m, wire::Envelope* w) {
  auto* r = w->mutable_kv_wait();
  for (const std::string& k : m.keys) r->add_keys(k);
  r->set_timeout_ms(m.timeout_ms);
  return absl::OkStatus();
}

absl::Status EncodeBody(const BarrierRequest& m, wire::Envelope* w) {
  w->mutable_barrier()->set_name(m.name);
  w->mutable_barrier()->set_world(m.world);
  w->mutable_barrier()->set_timeout_ms(m.timeout_ms);
  return absl::OkStatus();
}

// ---- decode -----------------------------------------------------------------

namespace {

absl::Status KeyTooLong() {
  return absl::ResourceExhaustedError("key-value key above the length limit");
}

absl::StatusOr<Message> KvListReplyFromWire(const wire::KvListReply& r) {
  if (r.keys_size() != r.values_size()) {
    return absl::InvalidArgumentError(
        "kv list reply with mismatched keys and values");
  }
  KvListReply m;
  for (int i = 0; i < r.keys_size(); ++i)
    m.entries.emplace_back(r.keys(i), r.values(i));
  return m;
}

absl::StatusOr<Message> KvWaitFromWire(const wire::KvWaitRequest& r,
                                       const DecodeLimits& limits) {
  if (static_cast<size_t>(r.keys_size()) > limits.max_ids) {
    return TooMany("kv wait", r.keys_size(), limits.max_ids);
  }
  KvWaitRequest m;
  for (const std::string& k : r.keys()) {
    if (k.size() > limits.max_string_bytes) return KeyTooLong();
    m.keys.push_back(k);
  }
  m.timeout_ms = r.timeout_ms();
  return m;
}

absl::StatusOr<Message> BarrierFromWire(const wire::BarrierRequest& r,
                                        const DecodeLimits& limits) {
  if (r.name().size() > limits.max_string_bytes) return KeyTooLong();
  if (r.world() == 0)
    return absl::InvalidArgumentError("a barrier of 0 processes");
  return BarrierRequest{r.name(), r.world(), r.timeout_ms()};
}

}  // namespace

absl::StatusOr<Message> KvBodyFromWire(const wire::Envelope& w,
                                       const DecodeLimits& limits) {
  switch (w.body_case()) {
    case wire::Envelope::kKvSet:
      if (w.kv_set().key().size() > limits.max_string_bytes)
        return KeyTooLong();
      return KvSetRequest{w.kv_set().key(), w.kv_set().value()};
    case wire::Envelope::kKvGet:
      if (w.kv_get().key().size() > limits.max_string_bytes)
        return KeyTooLong();
      return KvGetRequest{w.kv_get().key(), w.kv_get().timeout_ms()};
    case wire::Envelope::kKvValue:
      return KvValue{w.kv_value().found(), w.kv_value().value(),
                     w.kv_value().count()};
    case wire::Envelope::kKvAdd:
      if (w.kv_add().key().size() > limits.max_string_bytes)
        return KeyTooLong();
      return KvAddRequest{w.kv_add().key(), w.kv_add().delta()};
    case wire::Envelope::kKvCas: {
      const auto& r = w.kv_cas();
      if (r.key().size() > limits.max_string_bytes) return KeyTooLong();
      return KvCompareAndSetRequest{r.key(), r.expected(), r.desired(),
                                    r.expect_absent()};
    }
    case wire::Envelope::kKvDelete:
      return KvDeleteRequest{w.kv_delete().key(), w.kv_delete().prefix()};
    case wire::Envelope::kKvList:
      return KvListRequest{w.kv_list().prefix()};
    case wire::Envelope::kKvListReply:
      return KvListReplyFromWire(w.kv_list_reply());
    case wire::Envelope::kKvWait:
      return KvWaitFromWire(w.kv_wait(), limits);
    case wire::Envelope::kBarrier:
      return BarrierFromWire(w.barrier(), limits);
    default:
      return NotInArea("key-value", w);
  }
}

}  // namespace protocol_internal
}  // namespace shoal::ipc
