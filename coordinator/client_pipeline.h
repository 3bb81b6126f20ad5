// RemotePipeline: one call per task to a coordinator's frontend at the wire's
// rate (docs/protocol.md, "Pushed results and pipelining"). Each Submit sends
// one SubmitRequest with push set and returns at once; the frontend sends no
// SubmitReply but pushes the task's result, taken with release, as a
// WaitReply carrying the submit's request id, which Take matches.
//
// Flow control is a credit window: at most `window` submits are in flight
// (sent, result not yet arrived). Submit on a full window reads arriving
// results until a credit frees, up to its timeout, then returns
// ResourceExhausted; nothing is queued on this side. Results that arrived
// are kept until Take (the caller holds a handle to each).
//
// It is a peer of its own on the frontend (its own DEALER socket), so the
// outputs of its results are held for it: release them with ReleaseOutput.
// Thread-compatible, like Client.
#ifndef SHOAL_COORDINATOR_CLIENT_PIPELINE_H_
#define SHOAL_COORDINATOR_CLIENT_PIPELINE_H_

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "ipc/messages.h"
#include "ipc/rpc_channel.h"
#include "ipc/socket.h"

namespace shoal::coordinator {

class RemotePipeline {
 public:
  // `options` as for the client's RpcChannel (CURVE keys, limits).
  // REQUIRES: window ≥ 1. Errors: socket or CURVE set-up failures.
  static absl::StatusOr<RemotePipeline> Connect(
      const std::string& endpoint, const ipc::RpcChannelOptions& options,
      size_t window);

  RemotePipeline() = default;
  RemotePipeline(RemotePipeline&&) = default;
  RemotePipeline& operator=(RemotePipeline&&) = default;

  // Sends `task`; returns its handle for Take. Errors: ResourceExhausted (the
  // window stayed full for `timeout`), InvalidArgument (encoding),
  // Unavailable (the socket).
  absl::StatusOr<uint64_t> Submit(ipc::TaskSpec task, absl::Duration timeout);
  // The result of submit `handle` (its submit's error if it was refused),
  // waiting up to `timeout`. The handle is then spent.
  // Errors: NotFound (not a handle of this pipeline, or spent),
  // DeadlineExceeded (no result in time; the handle stays good), the
  // submit's error (nothing ran), Unavailable.
  absl::StatusOr<ipc::TaskResult> Take(uint64_t handle, absl::Duration timeout);
  // Whether `id` is an output of a result of this pipeline not yet released.
  bool HoldsOutput(const ObjectId& id) const;
  // Lets the node free output `id` (a DeleteRequest; its reply is skipped).
  void ReleaseOutput(const ObjectId& id);

  size_t in_flight() const { return in_flight_; }
  size_t window() const { return window_; }

 private:
  // Reads and files one message, waiting up to `timeout`.
  // Errors: DeadlineExceeded (nothing came), Unavailable.
  absl::Status ReadOne(absl::Duration timeout);

  ipc::Socket socket_;
  ipc::DecodeLimits limits_;
  size_t window_ = 1;
  size_t in_flight_ = 0;
  uint64_t next_request_ = 1;
  // Submits not yet taken: nullopt while in flight, then their result.
  std::unordered_map<uint64_t, std::optional<absl::StatusOr<ipc::TaskResult>>>
      submits_;
  std::set<ObjectId> outputs_;  // outputs of arrived results, not released
};

}  // namespace shoal::coordinator

#endif  // SHOAL_COORDINATOR_CLIENT_PIPELINE_H_
