// Internal to ipc/: the per-area halves of the protocol layer. protocol.cc
// holds the envelope (version, size limits, error replies) and dispatches each
// body to the file of its area, as messages.h groups them:
//   protocol_store.cc  the object store's messages,
//   protocol_tasks.cc  clients, tasks, workers and node status,
//   protocol_kv.cc     the key-value store and barriers.
// Not part of the public API.
#ifndef SHOAL_IPC_PROTOCOL_INTERNAL_H_
#define SHOAL_IPC_PROTOCOL_INTERNAL_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ipc/messages.h"
#include "ipc/object_id.h"
#include "ipc/protocol.h"
#include "proto/shoal.pb.h"

namespace shoal::ipc {
namespace protocol_internal {

inline std::string IdBytes(const ObjectId& id) {
  return std::string(id.Binary());
}

// ResourceExhausted: `what` lists `n` items, more than `limit`.
absl::Status TooMany(absl::string_view what, size_t n, size_t limit);

// Decodes a message whose only field is an object id.
template <class M>
absl::StatusOr<Message> IdMessageFromWire(const std::string& bytes) {
  absl::StatusOr<ObjectId> id = ObjectId::FromBinary(bytes);
  if (!id.ok()) return id.status();
  return M{*id};
}

// ---- encode: one overload per Message alternative, into `w`'s body ---------

// protocol.cc
absl::Status EncodeBody(const ErrorReply& m, wire::Envelope* w);
absl::Status EncodeBody(const OkReply& m, wire::Envelope* w);

// protocol_store.cc
absl::Status EncodeBody(const StoreConnectRequest& m, wire::Envelope* w);
absl::Status EncodeBody(const StoreConnectReply& m, wire::Envelope* w);
absl::Status EncodeBody(const StoreDisconnectRequest& m, wire::Envelope* w);
absl::Status EncodeBody(const CreateRequest& m, wire::Envelope* w);
absl::Status EncodeBody(const CreateReply& m, wire::Envelope* w);
absl::Status EncodeBody(const SealedNotice& m, wire::Envelope* w);
absl::Status EncodeBody(const AbortRequest& m, wire::Envelope* w);
absl::Status EncodeBody(const GetRequest& m, wire::Envelope* w);
absl::Status EncodeBody(const GetReply& m, wire::Envelope* w);
absl::Status EncodeBody(const ReleaseRequest& m, wire::Envelope* w);
absl::Status EncodeBody(const DeleteRequest& m, wire::Envelope* w);
absl::Status EncodeBody(const ContainsRequest& m, wire::Envelope* w);
absl::Status EncodeBody(const ContainsReply& m, wire::Envelope* w);
absl::Status EncodeBody(const StoreStatsRequest& m, wire::Envelope* w);
absl::Status EncodeBody(const StoreStats& m, wire::Envelope* w);
absl::Status EncodeBody(const ReclaimHint& m, wire::Envelope* w);
absl::Status EncodeBody(const StoreAccountRequest& m, wire::Envelope* w);
absl::Status EncodeBody(const StoreAccountReply& m, wire::Envelope* w);
absl::Status EncodeBody(const StoreRefRoomRequest& m, wire::Envelope* w);

// protocol_tasks.cc
absl::Status EncodeBody(const ClientHello& m, wire::Envelope* w);
absl::Status EncodeBody(const ClientWelcome& m, wire::Envelope* w);
absl::Status EncodeBody(const SubmitRequest& m, wire::Envelope* w);
absl::Status EncodeBody(const SubmitReply& m, wire::Envelope* w);
absl::Status EncodeBody(const WaitRequest& m, wire::Envelope* w);
absl::Status EncodeBody(const WaitReply& m, wire::Envelope* w);
absl::Status EncodeBody(const CancelRequest& m, wire::Envelope* w);
absl::Status EncodeBody(const ReleaseTasksRequest& m, wire::Envelope* w);
absl::Status EncodeBody(const FetchObjectRequest& m, wire::Envelope* w);
absl::Status EncodeBody(const FetchObjectReply& m, wire::Envelope* w);
absl::Status EncodeBody(const WorkerHello& m, wire::Envelope* w);
absl::Status EncodeBody(const WorkerHeartbeat& m, wire::Envelope* w);
absl::Status EncodeBody(const StatusRequest& m, wire::Envelope* w);
absl::Status EncodeBody(const NodeStatus& m, wire::Envelope* w);
absl::Status EncodeBody(const ActorCreateRequest& m, wire::Envelope* w);
absl::Status EncodeBody(const ActorCreateReply& m, wire::Envelope* w);
absl::Status EncodeBody(const ActorKillRequest& m, wire::Envelope* w);
absl::Status EncodeBody(const StopRequest& m, wire::Envelope* w);
absl::Status EncodeBody(const SessionAck& m, wire::Envelope* w);
absl::Status EncodeBody(const PutObjectRequest& m, wire::Envelope* w);
absl::Status EncodeBody(const PutObjectReply& m, wire::Envelope* w);

// protocol_kv.cc
absl::Status EncodeBody(const KvSetRequest& m, wire::Envelope* w);
absl::Status EncodeBody(const KvGetRequest& m, wire::Envelope* w);
absl::Status EncodeBody(const KvValue& m, wire::Envelope* w);
absl::Status EncodeBody(const KvAddRequest& m, wire::Envelope* w);
absl::Status EncodeBody(const KvCompareAndSetRequest& m, wire::Envelope* w);
absl::Status EncodeBody(const KvDeleteRequest& m, wire::Envelope* w);
absl::Status EncodeBody(const KvListRequest& m, wire::Envelope* w);
absl::Status EncodeBody(const KvListReply& m, wire::Envelope* w);
absl::Status EncodeBody(const KvWaitRequest& m, wire::Envelope* w);
absl::Status EncodeBody(const BarrierRequest& m, wire::Envelope* w);

// ---- decode: one function per area -----------------------------------------
// Each decodes and validates `w`'s body, which BodyFromWire (protocol.cc) has
// already checked is one of the area's cases.

absl::StatusOr<Message> StoreBodyFromWire(const wire::Envelope& w,
                                          const DecodeLimits& limits);
absl::StatusOr<Message> TaskBodyFromWire(const wire::Envelope& w,
                                         const DecodeLimits& limits);
absl::StatusOr<Message> KvBodyFromWire(const wire::Envelope& w,
                                       const DecodeLimits& limits);

// What an area's decoder returns for a body case outside its area; never
// reached through BodyFromWire.
absl::Status NotInArea(absl::string_view area, const wire::Envelope& w);

}  // namespace protocol_internal
}  // namespace shoal::ipc

#endif  // SHOAL_IPC_PROTOCOL_INTERNAL_H_
