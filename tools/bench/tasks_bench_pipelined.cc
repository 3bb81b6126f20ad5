#include "tools/bench/tasks_bench_pipelined.h"

#include <zmq.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "coordinator/discovery.h"
#include "ipc/curve.h"
#include "ipc/messages.h"
#include "ipc/protocol.h"
#include "ipc/socket.h"
#include "tools/bench/bench_util.h"

namespace shoal::bench {
namespace {

constexpr size_t kMaxIdsPerWait = 4096;  // the frontend's DecodeLimits

absl::Status SendRequest(ipc::Socket& dealer, uint64_t request_id,
                         ipc::Message body) {
  SHOAL_ASSIGN_OR_RETURN(std::string frame,
                         ipc::Encode(request_id, std::move(body)));
  return dealer.Send(frame);
}

// The next reply, decoded; an ErrorReply becomes its status.
absl::StatusOr<ipc::Envelope> RecvReply(ipc::Socket& dealer) {
  std::vector<std::string> frames;
  SHOAL_RETURN_IF_ERROR(dealer.Recv(&frames, absl::Seconds(30)));
  if (frames.size() != 1) {
    return absl::InternalError(
        absl::StrCat("a reply of ", frames.size(), " frames"));
  }
  ipc::DecodeLimits limits;
  limits.max_frame_bytes = 64 << 20;
  ipc::DecodeResult d = ipc::Decode(frames[0], limits);
  if (!d.envelope.ok()) return d.envelope.status();
  if (const auto* e = std::get_if<ipc::ErrorReply>(&d.envelope->body)) {
    return e->status;
  }
  return *std::move(d.envelope);
}

// Request ids 1..n are the submits; replies fill task_ids[id - 1].
absl::Status SubmitAll(ipc::Socket& dealer, int n, int window,
                       std::vector<uint64_t>* task_ids, int64_t* wrong) {
  ipc::TaskSpec noop;
  noop.function = "noop";
  task_ids->assign(n, 0);
  int sent = 0, received = 0;
  while (received < n) {
    for (; sent < n && sent - received < window; ++sent) {
      SHOAL_RETURN_IF_ERROR(
          SendRequest(dealer, sent + 1, ipc::SubmitRequest{{noop}}));
    }
    SHOAL_ASSIGN_OR_RETURN(ipc::Envelope reply, RecvReply(dealer));
    const auto* r = std::get_if<ipc::SubmitReply>(&reply.body);
    if (r == nullptr || r->task_ids.size() != 1 || reply.request_id < 1 ||
        reply.request_id > static_cast<uint64_t>(n)) {
      return absl::InternalError(
          absl::StrCat("unexpected reply to request ", reply.request_id, " (",
                       ipc::MessageName(reply.body), ")"));
    }
    uint64_t& slot = (*task_ids)[reply.request_id - 1];
    *wrong += slot != 0;  // a request answered twice
    slot = r->task_ids[0];
    ++received;
  }
  return absl::OkStatus();
}

absl::Status WaitAll(ipc::Socket& dealer, const std::vector<uint64_t>& ids,
                     uint64_t first_request_id, int64_t* wrong) {
  for (size_t at = 0; at < ids.size(); at += kMaxIdsPerWait) {
    ipc::WaitRequest w;
    w.task_ids.assign(ids.begin() + at,
                      ids.begin() + std::min(ids.size(), at + kMaxIdsPerWait));
    w.timeout_ms = -1;
    w.release = true;
    const size_t expected = w.task_ids.size();
    SHOAL_RETURN_IF_ERROR(
        SendRequest(dealer, first_request_id++, std::move(w)));
    SHOAL_ASSIGN_OR_RETURN(ipc::Envelope reply, RecvReply(dealer));
    const auto* r = std::get_if<ipc::WaitReply>(&reply.body);
    if (r == nullptr) return absl::InternalError("a Wait got no WaitReply");
    *wrong += static_cast<int64_t>(expected) -
              static_cast<int64_t>(r->results.size());
    for (const ipc::TaskResult& t : r->results) *wrong += !t.status.ok();
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PipelinedSubmit> MeasurePipelinedSubmit(const std::string& job,
                                                       int n, int window) {
  SHOAL_ASSIGN_OR_RETURN(coordinator::Discovery d,
                         coordinator::ReadDiscovery(job));
  SHOAL_ASSIGN_OR_RETURN(ipc::Socket dealer, ipc::Socket::Create(ZMQ_DEALER));
  if (!d.server_key.empty()) {
    SHOAL_ASSIGN_OR_RETURN(ipc::CurveKeyPair keys,
                           ipc::ReadKeyPair(d.client_key_file));
    SHOAL_RETURN_IF_ERROR(
        ipc::ConfigureCurveClient(dealer, d.server_key, keys));
  }
  SHOAL_RETURN_IF_ERROR(dealer.Connect(d.tcp));
  PipelinedSubmit out;
  std::vector<uint64_t> ids;
  const double t0 = NowSeconds();
  SHOAL_RETURN_IF_ERROR(SubmitAll(dealer, n, window, &ids, &out.wrong));
  const double t1 = NowSeconds();
  SHOAL_RETURN_IF_ERROR(WaitAll(dealer, ids, n + 1, &out.wrong));
  const double t2 = NowSeconds();
  out.submits_per_s = n / (t1 - t0);
  out.tasks_per_s = n / (t2 - t0);
  return out;
}

}  // namespace shoal::bench
