// The C++ side of the wire format: one struct per Envelope body case. Code
// outside ipc/protocol.cc builds and reads these, never the generated protobuf
// types.
#ifndef SHOAL_IPC_MESSAGES_H_
#define SHOAL_IPC_MESSAGES_H_

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "ipc/object_id.h"
#include "ipc/tensor_meta.h"

namespace shoal::ipc {

// The protocol version this build speaks. A peer with another major version
// gets a FailedPrecondition error reply.
inline constexpr uint32_t kProtocolMajor = 1;
inline constexpr uint32_t kProtocolMinor = 0;

struct ErrorReply {
  absl::Status status;  // never OK
};

struct OkReply {};

// Store ---------------------------------------------------------------------

struct StoreConnectRequest {
  int32_t pid = 0;
  std::string name;
};

struct StoreConnectReply {
  uint32_t client_slot = 0;
  std::string segment_name;
  uint64_t segment_bytes = 0;
  uint64_t session = 0;
};

struct StoreDisconnectRequest {};

struct CreateRequest {
  ObjectId id;
  TensorMeta meta;
  uint64_t nbytes = 0;
};

struct CreateReply {
  uint64_t offset = 0;
  uint32_t entry = 0;
  uint32_t generation = 0;
};

// One-way, no reply: the creator sealed `id` in the shared table.
struct SealedNotice {
  ObjectId id;
};

struct AbortRequest {
  ObjectId id;
};

struct GetRequest {
  std::vector<ObjectId> ids;
  int64_t timeout_ms = 0;  // 0: do not wait; negative: wait forever
};

struct ObjectInfo {
  ObjectId id;
  absl::Status status;  // OK: found, and one reference taken for the caller
  uint64_t offset = 0;
  uint64_t nbytes = 0;
  uint32_t entry = 0;
  uint32_t generation = 0;
  TensorMeta meta;
};

struct GetReply {
  std::vector<ObjectInfo> objects;
};

struct ReleaseRequest {
  ObjectId id;
};

struct DeleteRequest {
  ObjectId id;
};

struct ContainsRequest {
  ObjectId id;
};

struct ContainsReply {
  bool sealed = false;
};

struct StoreStatsRequest {};

struct StoreStats {
  uint64_t capacity_bytes = 0;
  uint64_t used_bytes = 0;
  uint64_t objects = 0;
  uint64_t sealed_objects = 0;
  uint64_t referenced_objects = 0;
  uint64_t evictions = 0;
  uint64_t evicted_bytes = 0;
  uint64_t clients = 0;
  uint64_t prefaulted_bytes = 0;
  uint64_t max_objects = 0;
  uint64_t lock_repairs = 0;
};

struct ReclaimHint {
  ObjectId id;
};

using Message =
    std::variant<ErrorReply, OkReply, StoreConnectRequest, StoreConnectReply,
                 StoreDisconnectRequest, CreateRequest, CreateReply,
                 SealedNotice, AbortRequest, GetRequest, GetReply,
                 ReleaseRequest, DeleteRequest, ContainsRequest, ContainsReply,
                 StoreStatsRequest, StoreStats, ReclaimHint>;

struct Envelope {
  uint64_t request_id = 0;
  Message body;
};

}  // namespace shoal::ipc

#endif  // SHOAL_IPC_MESSAGES_H_
