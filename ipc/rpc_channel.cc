#include "ipc/rpc_channel.h"

#include <zmq.h>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace shoal::ipc {

absl::StatusOr<RpcChannel> RpcChannel::Connect(
    const std::string& endpoint, const RpcChannelOptions& options) {
  RpcChannel c;
  c.endpoint_ = endpoint;
  c.peer_ = options.peer;
  c.limits_ = options.limits;
  SHOAL_ASSIGN_OR_RETURN(c.socket_, Socket::Create(ZMQ_DEALER, options.socket));
  if (!options.server_key.empty()) {
    SHOAL_RETURN_IF_ERROR(ConfigureCurveClient(c.socket_, options.server_key,
                                               options.client_keys));
  }
  SHOAL_RETURN_IF_ERROR(c.socket_.Connect(endpoint));
  return c;
}

absl::StatusOr<Message> RpcChannel::Exchange(Message request,
                                             absl::Duration timeout) {
  const uint64_t id = next_request_++;
  SHOAL_ASSIGN_OR_RETURN(std::string frame, Encode(id, std::move(request)));
  SHOAL_RETURN_IF_ERROR(socket_.Send(frame));
  const absl::Time deadline = timeout == absl::InfiniteDuration()
                                  ? absl::InfiniteFuture()
                                  : absl::Now() + timeout;
  std::vector<std::string> frames;
  while (true) {
    const absl::Duration left =
        deadline == absl::InfiniteFuture()
            ? absl::InfiniteDuration()
            : std::max(absl::ZeroDuration(), deadline - absl::Now());
    absl::Status s = socket_.Recv(&frames, left);
    if (absl::IsDeadlineExceeded(s)) {
      return absl::UnavailableError(
          absl::StrCat(PeerName(), " did not answer within ",
                       absl::FormatDuration(timeout)));
    }
    SHOAL_RETURN_IF_ERROR(s);
    if (frames.size() != 1) continue;
    DecodeResult d = Decode(frames[0], limits_);
    if (!d.envelope.ok()) {
      if (d.request_id == id) return d.envelope.status();
      continue;
    }
    // Replies to earlier calls that timed out are skipped.
    if (d.envelope->request_id != id) continue;
    if (auto* e = std::get_if<ErrorReply>(&d.envelope->body)) return e->status;
    return std::move(d.envelope->body);
  }
}

absl::Status RpcChannel::UnexpectedReply(absl::string_view asked,
                                         absl::string_view expected,
                                         absl::string_view got) const {
  return absl::InternalError(
      absl::StrCat(PeerName(), " answered ", asked, " with ", got,
                   " instead of ", expected, " (a peer of another version?)"));
}

std::string RpcChannel::PeerName() const {
  return peer_.empty() ? endpoint_ : absl::StrCat(peer_, " at ", endpoint_);
}

void RpcChannel::Notify(Message message) {
  absl::StatusOr<std::string> frame = Encode(0, std::move(message));
  if (frame.ok()) (void)socket_.Send(*frame, /*dontwait=*/true);
}

}  // namespace shoal::ipc
