#include "coordinator/client_pipeline.h"

#include <zmq.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "ipc/curve.h"
#include "ipc/protocol.h"

namespace shoal::coordinator {

absl::StatusOr<RemotePipeline> RemotePipeline::Connect(
    const std::string& endpoint, const ipc::RpcChannelOptions& options,
    size_t window) {
  if (window < 1) return absl::InvalidArgumentError("a window of 0 submits");
  RemotePipeline p;
  p.window_ = window;
  p.limits_ = options.limits;
  SHOAL_ASSIGN_OR_RETURN(p.socket_,
                         ipc::Socket::Create(ZMQ_DEALER, options.socket));
  if (!options.server_key.empty()) {
    SHOAL_RETURN_IF_ERROR(ipc::ConfigureCurveClient(
        p.socket_, options.server_key, options.client_keys));
  }
  SHOAL_RETURN_IF_ERROR(p.socket_.Connect(endpoint));
  return p;
}

absl::StatusOr<uint64_t> RemotePipeline::Submit(ipc::TaskSpec task,
                                                absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (in_flight_ >= window_) {
    const absl::Duration left = deadline - absl::Now();
    absl::Status s = left > absl::ZeroDuration()
                         ? ReadOne(left)
                         : absl::DeadlineExceededError("");
    if (absl::IsDeadlineExceeded(s)) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the window of ", window_, " tasks in flight stayed full for ",
          absl::FormatDuration(timeout)));
    }
    SHOAL_RETURN_IF_ERROR(s);
  }
  const uint64_t id = next_request_++;
  ipc::SubmitRequest req;
  req.tasks.push_back(std::move(task));
  req.push = true;
  SHOAL_ASSIGN_OR_RETURN(std::string frame, ipc::Encode(id, std::move(req)));
  SHOAL_RETURN_IF_ERROR(socket_.Send(frame));
  submits_.emplace(id, std::nullopt);
  ++in_flight_;
  return id;
}

absl::StatusOr<ipc::TaskResult> RemotePipeline::Take(uint64_t handle,
                                                     absl::Duration timeout) {
  auto it = submits_.find(handle);
  if (it == submits_.end()) {
    return absl::NotFoundError(
        absl::StrCat("no submit ", handle, " (unknown or taken)"));
  }
  const absl::Time deadline = timeout == absl::InfiniteDuration()
                                  ? absl::InfiniteFuture()
                                  : absl::Now() + timeout;
  while (!it->second.has_value()) {
    const absl::Duration left =
        deadline == absl::InfiniteFuture()
            ? absl::InfiniteDuration()
            : std::max(absl::ZeroDuration(), deadline - absl::Now());
    absl::Status s = ReadOne(left);
    if (absl::IsDeadlineExceeded(s)) {
      return absl::DeadlineExceededError(
          absl::StrCat("submit ", handle, ": no result within ",
                       absl::FormatDuration(timeout)));
    }
    SHOAL_RETURN_IF_ERROR(s);
    it = submits_.find(handle);  // ReadOne may have rehashed
  }
  absl::StatusOr<ipc::TaskResult> out = *std::move(it->second);
  submits_.erase(it);
  return out;
}

absl::Status RemotePipeline::ReadOne(absl::Duration timeout) {
  std::vector<std::string> frames;
  absl::Status s = socket_.Recv(&frames, timeout);
  if (absl::IsDeadlineExceeded(s)) return s;
  if (!s.ok()) {
    return absl::UnavailableError(
        absl::StrCat("the coordinator's frontend: ", s.message()));
  }
  if (frames.size() != 1) return absl::OkStatus();
  ipc::DecodeResult d = ipc::Decode(frames[0], limits_);
  const uint64_t id = d.envelope.ok() ? d.envelope->request_id : d.request_id;
  auto it = submits_.find(id);
  // Replies to ReleaseOutput's requests, or to nothing of ours: skipped.
  if (it == submits_.end() || it->second.has_value()) return absl::OkStatus();
  if (!d.envelope.ok()) {
    it->second = d.envelope.status();
  } else if (auto* e = std::get_if<ipc::ErrorReply>(&d.envelope->body)) {
    it->second = e->status;
  } else if (auto* w = std::get_if<ipc::WaitReply>(&d.envelope->body);
             w != nullptr && w->results.size() == 1) {
    for (const Value& v : w->results[0].outputs) {
      if (const auto* o = std::get_if<ObjectValue>(&v)) outputs_.insert(o->id);
    }
    it->second = std::move(w->results[0]);
  } else {
    it->second = absl::InternalError(
        absl::StrCat("the coordinator answered a pushed submit with ",
                     ipc::MessageName(d.envelope->body),
                     " (a node of protocol 1.0, without push?)"));
  }
  --in_flight_;
  return absl::OkStatus();
}

bool RemotePipeline::HoldsOutput(const ObjectId& id) const {
  return outputs_.count(id) != 0;
}

void RemotePipeline::ReleaseOutput(const ObjectId& id) {
  if (outputs_.erase(id) == 0) return;
  absl::StatusOr<std::string> frame =
      ipc::Encode(next_request_++, ipc::DeleteRequest{id});
  if (frame.ok()) (void)socket_.Send(*frame);
}

}  // namespace shoal::coordinator
