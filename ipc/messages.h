// The C++ side of the wire format: one type per Envelope body case.
//
// Two kinds, by one rule:
// - A body that carries shoal's own types (ObjectId, TensorMeta, Value, an
//   absl::Status) or needs checks beyond the schema's is a struct here; the
//   protocol layer (ipc/protocol*.cc) converts it and validates the input,
//   so code above ipc/ never sees an unchecked id or tensor.
// - A plain record — every field a number or text, nothing to check — is the
//   class protoc generates from proto/shoal.proto, named here with `using`:
//   the schema is its only definition (StoreStats, WorkerStatus, NodeStatus).
//   protobuf's JSON printer prints these directly (`shoal status --json`).
#ifndef SHOAL_IPC_MESSAGES_H_
#define SHOAL_IPC_MESSAGES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "ipc/object_id.h"
#include "ipc/tensor_meta.h"
#include "ipc/value.h"
#include "proto/shoal.pb.h"

namespace shoal::ipc {

// The protocol version this build speaks. A peer with another major version
// gets a FailedPrecondition error reply.
inline constexpr uint32_t kProtocolMajor = 1;
// 1: SubmitRequest.push; 2: SubmitRequest.push_ids;
// 3: SubmitRequest.ids_with_result; 4: resumable sessions (Envelope.session,
// ack, seq; SessionAck; ErrorReply.session_reset), PutObjectRequest.
inline constexpr uint32_t kProtocolMinor = 5;

// The absl::Status payload (type URL) that marks an ErrorReply's status as a
// session reset (ErrorReply.session_reset on the wire).
inline constexpr char kSessionResetPayload[] = "shoal.wire/session_reset";
// Whether `s` is a session reset (the node no longer knows the session).
bool IsSessionReset(const absl::Status& s);
// `s` marked as a session reset.
absl::Status MarkSessionReset(absl::Status s);

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
  std::string device_uuid;  // CUDA objects: the GPU's 16-byte UUID
  uint32_t account = 0;     // charged to this store account; 0: none
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

// Plain record (see the rule above): the store's counters.
using StoreStats = wire::StoreStatsReply;
using StoreDeviceStats = wire::StoreDeviceStats;

struct ReclaimHint {
  ObjectId id;
};

// Plain records (see the rule above): a store account read or its limit set.
using StoreAccountRequest = wire::StoreAccountRequest;
using StoreAccountReply = wire::StoreAccountReply;
// Plain record: grow a client's reference table (StoreClient::Transfer).
using StoreRefRoomRequest = wire::StoreRefRoomRequest;

// Tasks ---------------------------------------------------------------------

struct Resources {
  uint32_t cpus = 1;
  uint32_t gpus = 0;
};

inline constexpr int32_t kDefaultMaxRetries = 3;
// The longest timeout a request may ask for (a task's, a wait's): about ten
// years. Longer ones are a mistake, or an attempt to overflow the deadline
// arithmetic (milliseconds become nanoseconds in the task table).
inline constexpr int64_t kMaxTimeoutMs = int64_t{10} * 366 * 24 * 3600 * 1000;
// The most restarts an actor may ask for.
inline constexpr uint32_t kMaxActorRestarts = 1000;
// The longest TaskSpec::python_path accepted from outside.
inline constexpr size_t kMaxPythonPathBytes = 16 << 10;

struct TaskSpec {
  std::string function;
  std::vector<Value> args;
  Resources resources;
  int64_t timeout_ms = 0;    // 0: none
  int32_t max_retries = -1;  // -1: kDefaultMaxRetries
  // Python tasks: ':'-separated directories the worker adds to sys.path
  // before importing the function's module. Default "": none.
  std::string python_path;
};

// The Python exception that failed a task, caught by the worker
// (worker/python_runner.cc). Carried beside the task's status (whose message
// stays a readable "<type>: <message>\n<traceback>" for C++ callers) so that
// clients rebuild the exception from fields, never by parsing text.
struct TaskException {
  std::string type;       // qualified: "builtins.ValueError", "mymod.MyError"
  std::string message;    // str(exception); may hold anything, newlines too
  std::string traceback;  // the worker's formatted traceback
  // The exception pickled (protocol 5) when it pickles and unpickles again,
  // else empty: a Python client raises it as itself.
  std::string pickled;

  bool operator==(const TaskException& o) const {
    return type == o.type && message == o.message && traceback == o.traceback &&
           pickled == o.pickled;
  }
};

struct TaskResult {
  uint64_t task_id = 0;
  absl::Status status;
  std::vector<Value> outputs;
  uint32_t attempts = 0;
  // Set when a Python task raised (status is then Unknown); absent for C++
  // tasks and failures of the runtime itself.
  std::optional<TaskException> exception;
};

struct ClientHello {
  int32_t pid = 0;
  std::string name;
  std::string boot_id;
  bool resumable = false;  // 1.4: open a resumable session
  std::string machine;     // 1.4: the client machine's boot id
};

struct ClientWelcome {
  std::string job_id;
  bool local = false;
  std::string task_segment;
  uint32_t task_client = 0;
  std::string store_endpoint;
  uint32_t cpus_per_worker = 1;
  uint32_t gpus_per_worker = 0;
  // 1.4: the resumable session's id (0: none), the largest request frame the
  // node serves, the most reply bytes it keeps for a client, and how long a
  // session outlives its connection.
  uint64_t session = 0;
  uint64_t max_request_bytes = 0;
  uint64_t reply_budget_bytes = 0;
  uint32_t resume_grace_ms = 0;
  bool owner = false;  // 1.4: the node counts this client as its owner
  // The node's protocol minor (its Envelope's, set by Decode; not a field).
  uint32_t protocol_minor = 0;
};

struct SubmitRequest {
  std::vector<TaskSpec> tasks;
  // No SubmitReply: each result is pushed, released, as a WaitReply with this
  // request's id when its task finishes (shoal.proto).
  bool push = false;
  // With push (1.2): a SubmitReply with the task ids first, then the results.
  bool push_ids = false;
  // With push_ids, one task (1.3): no SubmitReply if the result comes within
  // the frontend's hold; its TaskResult.task_id is the id (shoal.proto).
  bool ids_with_result = false;
};

struct SubmitReply {
  std::vector<uint64_t> task_ids;
};

struct WaitRequest {
  std::vector<uint64_t> task_ids;
  int64_t timeout_ms = -1;  // negative: no limit
  uint32_t min_done = 0;    // 0: all
  bool release = false;
};

struct WaitReply {
  std::vector<TaskResult> results;
};

struct CancelRequest {
  std::vector<uint64_t> task_ids;
};

struct ReleaseTasksRequest {
  std::vector<uint64_t> task_ids;
};

struct FetchObjectRequest {
  ObjectId id;
};

struct FetchObjectReply {
  TensorValue tensor;
};

struct SessionAck {};

struct PutObjectRequest {
  TensorValue tensor;
};

struct PutObjectReply {
  ObjectId id;
  uint64_t nbytes = 0;
};

// Actors: plain records (see the rule above).
using ActorCreateRequest = wire::ActorCreateRequest;
using ActorCreateReply = wire::ActorCreateReply;
using ActorKillRequest = wire::ActorKillRequest;

struct WorkerHello {
  uint32_t worker_id = 0;
  int32_t pid = 0;
  std::vector<std::string> functions;
};

struct WorkerHeartbeat {
  uint32_t worker_id = 0;
  uint64_t tasks_done = 0;
  bool blocked = false;  // a task of it waits for tasks (nested tasks)
  // Its runs by task function so far (observe/task_stats.h).
  std::vector<wire::TaskNameStats> tasks;
};

struct StatusRequest {
  bool tasks_by_name = false;  // NodeStatus.tasks_by_name filled
};

// Plain records (see the rule above): one worker, and the node as `shoal
// status` shows it.
using WorkerStatus = wire::WorkerStatus;
using FrontendStats = wire::FrontendStats;
using NodeStatus = wire::NodeStatus;

struct StopRequest {};

// Key-value store -------------------------------------------------------------

struct KvSetRequest {
  std::string key;
  std::string value;
};

struct KvGetRequest {
  std::string key;
  int64_t timeout_ms = 0;  // 0: no wait; negative: forever
};

struct KvValue {
  bool found = false;
  std::string value;
  uint64_t count = 0;
};

struct KvAddRequest {
  std::string key;
  int64_t delta = 0;
};

struct KvCompareAndSetRequest {
  std::string key;
  std::string expected;
  std::string desired;
  bool expect_absent = false;
};

struct KvDeleteRequest {
  std::string key;
  bool prefix = false;
};

struct KvListRequest {
  std::string prefix;
};

struct KvListReply {
  std::vector<std::pair<std::string, std::string>> entries;
};

struct KvWaitRequest {
  std::vector<std::string> keys;
  int64_t timeout_ms = -1;
};

struct BarrierRequest {
  std::string name;
  uint32_t world = 0;
  int64_t timeout_ms = -1;
};

using Message = std::variant<
    ErrorReply, OkReply, StoreConnectRequest, StoreConnectReply,
    StoreDisconnectRequest, CreateRequest, CreateReply, SealedNotice,
    AbortRequest, GetRequest, GetReply, ReleaseRequest, DeleteRequest,
    ContainsRequest, ContainsReply, StoreStatsRequest, StoreStats, ReclaimHint,
    StoreAccountRequest, StoreAccountReply, StoreRefRoomRequest, ClientHello,
    ClientWelcome, SubmitRequest, SubmitReply, WaitRequest, WaitReply,
    CancelRequest, ReleaseTasksRequest, FetchObjectRequest, FetchObjectReply,
    WorkerHello, WorkerHeartbeat, StatusRequest, NodeStatus, StopRequest,
    KvSetRequest, KvGetRequest, KvValue, KvAddRequest, KvCompareAndSetRequest,
    KvDeleteRequest, KvListRequest, KvListReply, KvWaitRequest, BarrierRequest,
    ActorCreateRequest, ActorCreateReply, ActorKillRequest, SessionAck,
    PutObjectRequest, PutObjectReply>;

struct Envelope {
  uint64_t request_id = 0;
  Message body;
  // Resumable sessions (1.4): set by the sender, 0 when unused.
  uint64_t session = 0;  // client → node: its session
  // Client → node: every seq up to this arrived. Node → client (1.5): every
  // request id of the session up to this one arrived.
  uint64_t ack = 0;
  uint64_t seq = 0;  // node → client: this message's number
  // The sender's protocol minor (set by Decode; Encode writes this build's).
  uint32_t minor = 0;
};

}  // namespace shoal::ipc

#endif  // SHOAL_IPC_MESSAGES_H_
