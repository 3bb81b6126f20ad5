#include "coordinator/client_pipeline.h"

#include <unistd.h>
#include <zmq.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/process_info.h"
#include "base/status_macros.h"
#include "ipc/curve.h"
#include "ipc/protocol.h"

namespace shoal::coordinator {
namespace {

// About how many bytes `task` adds to a SubmitRequest (the byte bound).
size_t SpecBytes(const ipc::TaskSpec& task) {
  size_t bytes = 32 + task.function.size() + task.python_path.size();
  for (const Value& v : task.args) {
    if (const auto* s = std::get_if<std::string>(&v)) {
      bytes += s->size();
    } else if (const auto* b = std::get_if<BytesValue>(&v)) {
      bytes += b->data.size();
    } else if (const auto* t = std::get_if<TensorValue>(&v)) {
      bytes += t->data.size() + 64;
    } else {
      bytes += 16;
    }
  }
  return bytes;
}

absl::Time DeadlineAfter(absl::Duration timeout) {
  return timeout == absl::InfiniteDuration() ? absl::InfiniteFuture()
                                             : absl::Now() + timeout;
}

absl::Duration LeftUntil(absl::Time deadline) {
  return deadline == absl::InfiniteFuture()
             ? absl::InfiniteDuration()
             : std::max(absl::ZeroDuration(), deadline - absl::Now());
}

}  // namespace

absl::StatusOr<RemotePipeline> RemotePipeline::Connect(
    const std::string& endpoint, const ipc::RpcChannelOptions& options,
    PipelineOptions pipeline) {
  if (pipeline.window < 1) {
    return absl::InvalidArgumentError("a window of 0 submits");
  }
  if (pipeline.max_batch < 1) {
    return absl::InvalidArgumentError("batches of 0 submits");
  }
  RemotePipeline p;
  p.options_ = pipeline;
  p.limits_ = options.limits;
  SHOAL_ASSIGN_OR_RETURN(p.socket_,
                         ipc::Socket::Create(ZMQ_DEALER, options.socket));
  if (!options.server_key.empty()) {
    SHOAL_RETURN_IF_ERROR(ipc::ConfigureCurveClient(
        p.socket_, options.server_key, options.client_keys));
  }
  SHOAL_RETURN_IF_ERROR(p.socket_.Connect(endpoint));
  if (!pipeline.resumable) return p;
  // The session first: its welcome is its first numbered reply.
  const uint64_t id = p.next_request_++;
  SHOAL_ASSIGN_OR_RETURN(
      std::string hello,
      ipc::Encode(id, ipc::ClientHello{static_cast<int32_t>(getpid()),
                                       pipeline.name, "", true, BootId()}));
  SHOAL_RETURN_IF_ERROR(p.socket_.Send(hello));
  const absl::Time deadline = absl::Now() + pipeline.hello_timeout;
  std::vector<std::string> frames;
  while (true) {
    const absl::Duration left = deadline - absl::Now();
    absl::Status got = left > absl::ZeroDuration()
                           ? p.socket_.Recv(&frames, left)
                           : absl::DeadlineExceededError("");
    if (absl::IsDeadlineExceeded(got)) {
      return absl::UnavailableError(absl::StrCat(
          "the coordinator at ", endpoint, " did not answer a hello within ",
          absl::FormatDuration(pipeline.hello_timeout)));
    }
    SHOAL_RETURN_IF_ERROR(got);
    if (frames.size() != 1) continue;
    ipc::DecodeResult d = ipc::Decode(frames[0], p.limits_);
    if (!d.envelope.ok() || d.envelope->request_id != id) continue;
    if (auto* e = std::get_if<ipc::ErrorReply>(&d.envelope->body))
      return e->status;
    if (auto* w = std::get_if<ipc::ClientWelcome>(&d.envelope->body)) {
      p.session_ = w->session;
      p.node_minor_ = d.envelope->minor;
      p.max_request_bytes_ = w->max_request_bytes;
      (void)p.seq_.Accept(d.envelope->seq);
    }
    return p;
  }
}

absl::StatusOr<std::string> RemotePipeline::Frame(uint64_t request_id,
                                                  ipc::Message body) {
  ipc::Envelope e{request_id, std::move(body)};
  e.session = session_;
  if (session_ != 0) {
    e.ack = seq_.ack();
    seq_.MarkReported();
  }
  SHOAL_ASSIGN_OR_RETURN(std::string frame, ipc::Encode(e));
  SHOAL_RETURN_IF_ERROR(
      ipc::CheckRequestSize(frame.size(), max_request_bytes_));
  return frame;
}

void RemotePipeline::SendAck() {
  if (session_ == 0) return;
  absl::StatusOr<std::string> frame = Frame(0, ipc::SessionAck{});
  if (frame.ok()) (void)socket_.Send(*frame, /*dontwait=*/true);
}

absl::Status RemotePipeline::SendRequest(uint64_t id,
                                         absl::StatusOr<std::string> frame,
                                         bool dontwait) {
  if (!frame.ok()) {
    if (resends()) {
      absl::StatusOr<std::string> filler = Frame(id, ipc::SessionAck{});
      if (filler.ok()) (void)socket_.Send(*filler, /*dontwait=*/true);
    }
    return frame.status();
  }
  absl::Status sent = socket_.Send(*frame, dontwait);
  if (sent.ok() && resends()) unconfirmed_.emplace(id, *std::move(frame));
  return sent;
}

void RemotePipeline::Confirm(uint64_t ack) {
  unconfirmed_.erase(unconfirmed_.begin(), unconfirmed_.upper_bound(ack));
}

void RemotePipeline::FailAll(const absl::Status& status) {
  std::vector<uint64_t> requests;
  for (const auto& [id, r] : requests_) requests.push_back(id);
  for (uint64_t id : requests) FailRequest(id, status);
  for (auto& [id, call] : calls_) {
    if (!call.has_value()) call = status;
  }
  outputs_.clear();
}

absl::StatusOr<uint64_t> RemotePipeline::Submit(ipc::TaskSpec task,
                                                absl::Duration timeout) {
  const absl::Time now = absl::Now();
  if (!batch_.empty() && now - batch_since_ >= options_.flush_after) {
    SHOAL_RETURN_IF_ERROR(Flush());
  }
  const absl::Time deadline = now + timeout;
  while (in_flight_ >= options_.window) {
    SHOAL_RETURN_IF_ERROR(Flush());
    const absl::Duration left = deadline - absl::Now();
    absl::Status s = left > absl::ZeroDuration()
                         ? ReadOne(left)
                         : absl::DeadlineExceededError("");
    if (absl::IsDeadlineExceeded(s)) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the window of ", options_.window,
          " tasks in flight stayed full for ", absl::FormatDuration(timeout)));
    }
    SHOAL_RETURN_IF_ERROR(s);
  }
  const uint64_t handle = next_handle_++;
  if (batch_.empty()) batch_since_ = now;
  batch_bytes_ += SpecBytes(task);
  batch_.push_back(std::move(task));
  batch_handles_.push_back(handle);
  submits_.emplace(handle, Slot{});
  ++in_flight_;
  if (!options_.batch || batch_.size() >= options_.max_batch ||
      batch_bytes_ >= options_.max_batch_bytes) {
    SHOAL_RETURN_IF_ERROR(Flush());
  }
  return handle;
}

absl::Status RemotePipeline::Flush() {
  if (batch_.empty()) return absl::OkStatus();
  std::vector<uint64_t> handles = std::move(batch_handles_);
  std::vector<ipc::TaskSpec> tasks = std::move(batch_);
  batch_.clear();
  batch_handles_.clear();
  batch_bytes_ = 0;
  return Send(std::move(handles), std::move(tasks));
}

absl::Status RemotePipeline::Send(std::vector<uint64_t> handles,
                                  std::vector<ipc::TaskSpec> tasks) {
  const uint64_t id = next_request_++;
  Request request;
  request.ids = options_.batch;
  if (request.ids && tasks.size() > 1) request.specs = tasks;
  request.handles = std::move(handles);
  request.open = request.handles.size();
  ipc::SubmitRequest req;
  req.tasks = std::move(tasks);
  req.push = true;
  req.push_ids = request.ids;
  req.ids_with_result = request.ids && options_.ids_with_result;
  for (uint64_t h : request.handles) submits_[h].request = id;
  requests_.emplace(id, std::move(request));
  absl::Status sent = SendRequest(id, Frame(id, std::move(req)));
  if (!sent.ok()) {
    if (!absl::IsInvalidArgument(sent) && !absl::IsResourceExhausted(sent)) {
      sent = absl::UnavailableError(
          absl::StrCat("the coordinator's frontend: ", sent.message()));
    }
    FailRequest(id, sent);
  }
  ++requests_sent_;
  return sent;
}

void RemotePipeline::Resend(uint64_t request_id) {
  auto it = requests_.find(request_id);
  if (it == requests_.end()) return;
  Request request = std::move(it->second);
  requests_.erase(it);
  for (size_t i = 0; i < request.handles.size(); ++i) {
    // Unsent (the socket failed): its result is that error, a credit freed.
    (void)Send({request.handles[i]}, {std::move(request.specs[i])});
  }
}

absl::StatusOr<RemotePipeline::Slot*> RemotePipeline::Find(uint64_t handle) {
  auto it = submits_.find(handle);
  if (it == submits_.end()) {
    return absl::NotFoundError(
        absl::StrCat("no submit ", handle, " (unknown or taken)"));
  }
  return &it->second;
}

template <typename Done>
absl::Status RemotePipeline::ReadUntil(Done done, absl::Duration timeout,
                                       absl::string_view what) {
  const absl::Time deadline = DeadlineAfter(timeout);
  while (!done()) {
    // A second at a time: a pipeline that waits says where it is (a node
    // whose connection to it broke sends what was lost once it hears).
    const absl::Duration left = LeftUntil(deadline);
    absl::Status s = ReadOne(std::min(left, absl::Seconds(1)));
    if (absl::IsDeadlineExceeded(s)) {
      if (left <= absl::Seconds(1)) {
        return absl::DeadlineExceededError(
            absl::StrCat(what, " within ", absl::FormatDuration(timeout)));
      }
      SendAck();
      continue;
    }
    SHOAL_RETURN_IF_ERROR(s);
  }
  return absl::OkStatus();
}

absl::StatusOr<ipc::TaskResult> RemotePipeline::Take(uint64_t handle,
                                                     absl::Duration timeout) {
  SHOAL_ASSIGN_OR_RETURN(Slot * slot, Find(handle));
  if (!slot->result.has_value()) SHOAL_RETURN_IF_ERROR(Flush());
  // Slots are found again after each read: a read may rehash submits_.
  SHOAL_RETURN_IF_ERROR(
      ReadUntil([&] { return submits_.at(handle).result.has_value(); }, timeout,
                absl::StrCat("submit ", handle, ": no result")));
  auto it = submits_.find(handle);
  absl::StatusOr<ipc::TaskResult> out = *std::move(it->second.result);
  submits_.erase(it);
  return out;
}

absl::StatusOr<
    std::vector<std::pair<uint64_t, absl::StatusOr<ipc::TaskResult>>>>
RemotePipeline::TakeSome(absl::Span<const uint64_t> handles, size_t min_done,
                         absl::Duration timeout) {
  bool all_here = true;
  for (uint64_t h : handles) {
    SHOAL_ASSIGN_OR_RETURN(Slot * slot, Find(h));
    all_here &= slot->result.has_value();
  }
  if (!all_here) SHOAL_RETURN_IF_ERROR(Flush());
  const size_t want =
      min_done == 0 ? handles.size() : std::min(min_done, handles.size());
  // Slots are found again after each read: a read may rehash submits_.
  auto arrived = [&] {
    size_t n = 0;
    for (uint64_t h : handles) n += submits_.at(h).result.has_value();
    return n;
  };
  absl::Status s = ReadUntil([&] { return arrived() >= want; }, timeout,
                             "SubmitAsync results");
  if (!s.ok() && !absl::IsDeadlineExceeded(s)) return s;
  std::vector<std::pair<uint64_t, absl::StatusOr<ipc::TaskResult>>> out;
  for (uint64_t h : handles) {
    auto it = submits_.find(h);
    if (it == submits_.end() || !it->second.result.has_value()) continue;
    out.emplace_back(h, *std::move(it->second.result));
    submits_.erase(it);
  }
  return out;
}

absl::StatusOr<uint64_t> RemotePipeline::TaskId(uint64_t handle,
                                                absl::Duration timeout) {
  SHOAL_ASSIGN_OR_RETURN(Slot * slot, Find(handle));
  if (slot->request == 0) SHOAL_RETURN_IF_ERROR(Flush());
  if (!options_.batch) {
    return absl::FailedPreconditionError(
        "the node speaks protocol 1.1: a pushed task's id comes only with its "
        "result");
  }
  SHOAL_RETURN_IF_ERROR(ReadUntil(
      [&] {
        const Slot& s = submits_.at(handle);
        return s.task_id.has_value() || s.result.has_value();
      },
      timeout, absl::StrCat("submit ", handle, ": no task id")));
  const Slot& s = submits_.at(handle);
  if (s.task_id) return *s.task_id;
  if (!s.result->ok()) return s.result->status();
  return (*s.result)->task_id;
}

absl::Status RemotePipeline::Cancel(uint64_t handle, absl::Duration timeout) {
  const absl::Time deadline = DeadlineAfter(timeout);
  SHOAL_ASSIGN_OR_RETURN(const uint64_t task, TaskId(handle, timeout));
  if (submits_.at(handle).result.has_value()) return absl::OkStatus();
  const uint64_t id = next_request_++;
  SHOAL_RETURN_IF_ERROR(SendRequest(id, Frame(id, ipc::CancelRequest{{task}})));
  calls_.emplace(id, std::nullopt);
  absl::Status s =
      ReadUntil([&] { return calls_.at(id).has_value(); }, LeftUntil(deadline),
                absl::StrCat("cancel of task ", task, ": no answer"));
  if (s.ok()) s = *calls_.at(id);
  calls_.erase(id);
  return s;
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
  if (!d.envelope.ok()) {
    File(d.request_id, d.envelope.status());
    return absl::OkStatus();
  }
  // Sent again after a reconnect: it arrived before.
  if (!seq_.Accept(d.envelope->seq)) return absl::OkStatus();
  if (auto* e = std::get_if<ipc::ErrorReply>(&d.envelope->body);
      e != nullptr && ipc::IsSessionReset(e->status)) {
    session_ = 0;
    seq_.Reset();
    unconfirmed_.clear();
    FailAll(e->status);
    return absl::OkStatus();
  }
  if (resends()) {
    Confirm(d.envelope->ack);
    // The node found the session on a new connection: what it lacks goes
    // again, in order.
    if (std::holds_alternative<ipc::SessionAck>(d.envelope->body)) {
      for (const auto& [id, frame] : unconfirmed_) (void)socket_.Send(frame);
      return absl::OkStatus();
    }
  }
  File(d.envelope->request_id, std::move(d.envelope->body));
  // The node keeps each numbered reply until it hears: tell it now and then
  // (requests carry it too), and at once when one was lost.
  if (session_ != 0 && (seq_.unreported() >= 64 || seq_.gap())) SendAck();
  return absl::OkStatus();
}

void RemotePipeline::File(uint64_t request_id,
                          absl::StatusOr<ipc::Message> body) {
  if (auto call = calls_.find(request_id); call != calls_.end()) {
    if (!body.ok()) {
      call->second = body.status();
    } else if (auto* e = std::get_if<ipc::ErrorReply>(&*body)) {
      call->second = e->status;
    } else {
      call->second = absl::OkStatus();
    }
    return;
  }
  // Replies to ReleaseOutput's requests, or to nothing of ours: skipped.
  auto it = requests_.find(request_id);
  if (it == requests_.end()) return;
  Request& request = it->second;
  if (!body.ok()) return FailRequest(request_id, body.status());
  if (auto* e = std::get_if<ipc::ErrorReply>(&*body)) {
    if (request.specs.size() > 1) return Resend(request_id);
    return FailRequest(request_id, e->status);
  }
  if (auto* r = std::get_if<ipc::SubmitReply>(&*body);
      r != nullptr && request.ids &&
      r->task_ids.size() == request.handles.size()) {
    request.specs.clear();
    request.specs.shrink_to_fit();
    for (size_t i = 0; i < r->task_ids.size(); ++i) {
      submits_[request.handles[i]].task_id = r->task_ids[i];
      by_task_[r->task_ids[i]] = request.handles[i];
    }
    return;
  }
  auto* w = std::get_if<ipc::WaitReply>(&*body);
  if (w == nullptr) {
    return FailRequest(request_id,
                       absl::InternalError(absl::StrCat(
                           "the coordinator answered a pushed submit with ",
                           ipc::MessageName(*body),
                           " (a node of protocol 1.0, without push?)")));
  }
  // Copied: Deliver may erase the request.
  const bool ids = request.ids;
  const uint64_t only = request.handles.size() == 1 ? request.handles[0] : 0;
  for (ipc::TaskResult& result : w->results) {
    uint64_t handle = only;
    if (ids) {
      auto t = by_task_.find(result.task_id);
      auto s = submits_.find(only);
      // A one-task request's result without its SubmitReply (1.3,
      // ids_with_result): the result names the id.
      const bool no_ids_came = s != submits_.end() && !s->second.task_id;
      handle = t != by_task_.end() ? t->second : no_ids_came ? only : 0;
    }
    if (handle != 0) Deliver(handle, std::move(result));
  }
}

void RemotePipeline::Deliver(uint64_t handle,
                             absl::StatusOr<ipc::TaskResult> result) {
  auto it = submits_.find(handle);
  if (it == submits_.end() || it->second.result.has_value()) return;
  Slot& slot = it->second;
  if (result.ok()) {
    for (const Value& v : result->outputs) {
      if (const auto* o = std::get_if<ObjectValue>(&v)) outputs_.insert(o->id);
    }
  }
  if (slot.task_id) by_task_.erase(*slot.task_id);
  slot.result = std::move(result);
  --in_flight_;
  auto r = requests_.find(slot.request);
  if (r != requests_.end() && --r->second.open == 0) requests_.erase(r);
}

void RemotePipeline::FailRequest(uint64_t request_id,
                                 const absl::Status& status) {
  auto it = requests_.find(request_id);
  if (it == requests_.end()) return;
  const std::vector<uint64_t> handles = it->second.handles;
  for (uint64_t h : handles) Deliver(h, status);
  requests_.erase(request_id);
}

bool RemotePipeline::HoldsOutput(const ObjectId& id) const {
  return outputs_.count(id) != 0;
}

void RemotePipeline::ReleaseOutput(const ObjectId& id) {
  if (outputs_.erase(id) == 0) return;
  const uint64_t request = next_request_++;
  (void)SendRequest(request, Frame(request, ipc::DeleteRequest{id}));
}

}  // namespace shoal::coordinator
