// RemotePipeline: one call per task to a coordinator's frontend at the wire's
// rate (docs/protocol.md, "Pushed results and pipelining"). Submit returns a
// handle at once; tasks are coalesced into batched SubmitRequests with push
// set, so one ZeroMQ message carries up to max_batch tasks each way (the
// frontend pushes the results of one request that finish at one wake-up in
// one WaitReply).
//
// A batch leaves when it holds max_batch tasks or max_batch_bytes of specs,
// when the window fills, on Take, TaskId, Cancel or Flush, and at the first
// Submit called flush_after (50 µs by default) or more after the batch's
// first task. There is no I/O thread: a task submitted last, with no call
// into the pipeline after it, waits for the caller's next Take or Flush.
//
// With a node of protocol 1.2 each batch asks for its task ids first
// (SubmitRequest.push_ids): the frontend answers with a SubmitReply, then
// pushes results, which are matched to handles by task id; a handle's task id
// is then known before its result (TaskId, Cancel). With a 1.3 node a
// one-task request also sets ids_with_result: a task that finishes within the
// frontend's hold has only its result sent, which names its id (TaskId and
// Cancel wait for either). With a 1.1 node (batch
// false) every task is a request of its own and its result is matched by the
// request id, as before; TaskId and Cancel are then FailedPrecondition.
//
// Flow control is a credit window: at most `window` submits are in flight
// (batched or sent, result not yet arrived). Submit on a full window sends the
// batch and reads arriving results until a credit frees, up to its timeout,
// then returns ResourceExhausted; nothing is queued beyond the window.
// Results that arrived are kept until Take (the caller holds a handle each).
//
// It is a session of its own on the frontend (its own DEALER socket), so the
// outputs of its results are held for it: release them with ReleaseOutput.
// With a 1.4 node the session is resumable (docs/protocol.md, "Sessions"):
// every request acknowledges the numbered replies that arrived, a waiting
// pipeline acknowledges every second (so that the node finds it again after
// a reconnect and sends what was lost), duplicates are dropped, and a
// session the node no longer knows fails every submit in flight with its
// reset error (ABORTED). With a 1.5 node requests are kept too, until a
// reply's acknowledgement says the node has them; when the node finds the
// session on a new connection it says which it has (a SessionAck), and the
// pipeline sends the others again (the node serves a request id once).
// Thread-compatible, like Client.
#ifndef SHOAL_COORDINATOR_CLIENT_PIPELINE_H_
#define SHOAL_COORDINATOR_CLIENT_PIPELINE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "ipc/messages.h"
#include "ipc/rpc_channel.h"
#include "ipc/session_seq.h"
#include "ipc/socket.h"

namespace shoal::coordinator {

struct PipelineOptions {
  size_t window = 1024;  // most tasks in flight; ≥ 1
  // Coalescing (only with batch): most tasks and spec bytes per request, and
  // the age at which a Submit sends the batch it finds.
  bool batch = true;  // the node speaks 1.2 (push_ids)
  // The node speaks 1.3: a one-task request asks for its ids with its result
  // (SubmitRequest.ids_with_result), one reply when the task is quick.
  bool ids_with_result = true;
  size_t max_batch = 64;
  size_t max_batch_bytes = 256 << 10;
  absl::Duration flush_after = absl::Microseconds(50);
  // The node speaks 1.4: Connect opens a resumable session (a hello), so
  // that results outlive a connection that breaks; `name` is for its logs.
  bool resumable = true;
  std::string name = "pipeline";
  absl::Duration hello_timeout = absl::Seconds(20);
};

class RemotePipeline {
 public:
  // `options` as for the client's RpcChannel (CURVE keys, limits).
  // REQUIRES: pipeline.window ≥ 1, max_batch ≥ 1 (else InvalidArgument).
  // Errors: socket or CURVE set-up failures; with `resumable`, the hello's
  // (Unavailable when the node does not answer within hello_timeout).
  static absl::StatusOr<RemotePipeline> Connect(
      const std::string& endpoint, const ipc::RpcChannelOptions& options,
      PipelineOptions pipeline);

  RemotePipeline() = default;
  RemotePipeline(RemotePipeline&&) = default;
  RemotePipeline& operator=(RemotePipeline&&) = default;

  // Queues `task` in the batch (sending it when due, above); returns its
  // handle for Take. Errors: ResourceExhausted (the window stayed full for
  // `timeout`), InvalidArgument (encoding), Unavailable (the socket).
  absl::StatusOr<uint64_t> Submit(ipc::TaskSpec task, absl::Duration timeout);
  // Sends the batch now (nothing if empty). Errors: InvalidArgument
  // (encoding), Unavailable; the batch's tasks then fail with it at Take.
  absl::Status Flush();
  // The result of submit `handle` (its submit's error if it was refused),
  // waiting up to `timeout`; sends the batch first. The handle is then spent.
  // Errors: NotFound (not a handle of this pipeline, or spent),
  // DeadlineExceeded (no result in time; the handle stays good), the
  // submit's error (nothing ran), Unavailable.
  absl::StatusOr<ipc::TaskResult> Take(uint64_t handle, absl::Duration timeout);
  // Waits until `min_done` of `handles` have results (0: all of them) or
  // `timeout` passes, then takes every one of them that has one (those
  // handles are then spent), in the order given. A refused submit's error
  // is its result here. Errors: NotFound (a handle unknown or spent; none
  // is taken), Unavailable.
  absl::StatusOr<
      std::vector<std::pair<uint64_t, absl::StatusOr<ipc::TaskResult>>>>
  TakeSome(absl::Span<const uint64_t> handles, size_t min_done,
           absl::Duration timeout);
  // The node's task id of submit `handle`, waiting up to `timeout` for the
  // frontend's SubmitReply. Errors: NotFound (unknown or spent handle),
  // FailedPrecondition (a 1.1 node: no ids before results), DeadlineExceeded,
  // the submit's error, Unavailable.
  absl::StatusOr<uint64_t> TaskId(uint64_t handle, absl::Duration timeout);
  // Cancels submit `handle`: queued, it completes as Cancelled; running, its
  // function sees cancelled(). Its result still comes (Take). OK if its
  // result is already here. Errors: as TaskId, and the CancelRequest's.
  absl::Status Cancel(uint64_t handle, absl::Duration timeout);
  // Whether `id` is an output of a result of this pipeline not yet released.
  bool HoldsOutput(const ObjectId& id) const;
  // Lets the node free output `id` (a DeleteRequest; its reply is skipped).
  void ReleaseOutput(const ObjectId& id);

  size_t in_flight() const { return in_flight_; }
  size_t batched() const { return batch_.size(); }
  size_t window() const { return options_.window; }
  uint64_t requests_sent() const { return requests_sent_; }

 private:
  // One submitted task: its request (0 while batched), its task id once the
  // SubmitReply told it, and its result once it arrived.
  struct Slot {
    uint64_t request = 0;
    std::optional<uint64_t> task_id;
    std::optional<absl::StatusOr<ipc::TaskResult>> result;
  };
  // A sent SubmitRequest with results still due.
  struct Request {
    std::vector<uint64_t> handles;  // in the batch's order
    size_t open = 0;                // results not yet arrived
    bool ids = false;               // push_ids: results matched by task id
    // A batch of several tasks keeps its specs until its ids come: if the
    // node refuses the batch, each task is sent again alone, so that a
    // refused task fails only itself (one call per task, as if unbatched).
    std::vector<ipc::TaskSpec> specs;
  };

  // Reads and files one message, waiting up to `timeout`.
  // Errors: DeadlineExceeded (nothing came), Unavailable.
  absl::Status ReadOne(absl::Duration timeout);
  // Encodes a request of this pipeline's session (with its acknowledgement).
  // Errors: ResourceExhausted over the welcome's max_request_bytes.
  absl::StatusOr<std::string> Frame(uint64_t request_id, ipc::Message body);
  // Sends the acknowledgement alone (SessionAck).
  void SendAck();
  // Sends request `id`'s `frame` (blocking unless `dontwait`); with a 1.5
  // node keeps it until the node has it (Confirm). A frame that could not be
  // made spends its id with an acknowledgement (no gap for the node).
  absl::Status SendRequest(uint64_t id, absl::StatusOr<std::string> frame,
                           bool dontwait = false);
  // The node has every request up to `ack`: they are let go.
  void Confirm(uint64_t ack);
  bool resends() const { return session_ != 0 && node_minor_ >= 5; }
  // The node reset the session: everything in flight fails with `status`.
  void FailAll(const absl::Status& status);
  // Reads until `done()` or `timeout`; DeadlineExceeded names `what`.
  template <typename Done>
  absl::Status ReadUntil(Done done, absl::Duration timeout,
                         absl::string_view what);
  // Files one arrived message of request `request_id`.
  void File(uint64_t request_id, absl::StatusOr<ipc::Message> body);
  // Gives handle `handle` its result (a credit frees).
  void Deliver(uint64_t handle, absl::StatusOr<ipc::TaskResult> result);
  // Every handle of `request_id` without a result gets `status`.
  void FailRequest(uint64_t request_id, const absl::Status& status);
  // Sends `tasks` (for `handles`) as one request. Errors: as Flush (the
  // handles then have that error as their result).
  absl::Status Send(std::vector<uint64_t> handles,
                    std::vector<ipc::TaskSpec> tasks);
  // A refused batch of several tasks: each is sent again alone.
  void Resend(uint64_t request_id);
  // A slot by handle. Errors: NotFound.
  absl::StatusOr<Slot*> Find(uint64_t handle);

  ipc::Socket socket_;
  ipc::DecodeLimits limits_;
  PipelineOptions options_;
  size_t in_flight_ = 0;
  uint64_t next_request_ = 1;
  uint64_t next_handle_ = 1;
  uint64_t requests_sent_ = 0;                      // SubmitRequests, for tests
  std::unordered_map<uint64_t, Slot> submits_;      // by handle, until Take
  std::unordered_map<uint64_t, Request> requests_;  // by request id
  std::unordered_map<uint64_t, uint64_t> by_task_;  // task id → handle
  std::unordered_map<uint64_t, std::optional<absl::Status>> calls_;  // cancels
  std::vector<ipc::TaskSpec> batch_;  // not sent yet
  std::vector<uint64_t> batch_handles_;
  size_t batch_bytes_ = 0;
  absl::Time batch_since_;
  std::set<ObjectId> outputs_;  // outputs of arrived results, not released
  uint64_t session_ = 0;        // the resumable session's id; 0: none
  uint32_t node_minor_ = 0;     // the welcome's protocol minor
  // Requests sent that the node has not confirmed (resends()), by id.
  std::map<uint64_t, std::string> unconfirmed_;
  uint64_t max_request_bytes_ = 0;  // the welcome's (0: no limit)
  ipc::SessionSeq seq_;
};

}  // namespace shoal::coordinator

#endif  // SHOAL_COORDINATOR_CLIENT_PIPELINE_H_
