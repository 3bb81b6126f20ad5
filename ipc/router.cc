#include "ipc/router.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/log.h"

namespace shoal::ipc {

void SendReply(Socket& router, const std::string& routing_id,
               uint64_t request_id, Message body) {
  absl::StatusOr<std::string> frame = Encode(request_id, std::move(body));
  const std::string payload =
      frame.ok() ? *std::move(frame) : EncodeError(request_id, frame.status());
  const absl::string_view parts[] = {routing_id, payload};
  absl::Status s = router.Send(parts, /*dontwait=*/true);
  if (!s.ok()) SHOAL_LOG(DEBUG, "a reply was dropped: %s", s.ToString());
}

void ServeRequests(Socket& router, const DecodeLimits& limits, int max_requests,
                   RequestHandler handle) {
  std::vector<std::string> frames;
  for (int i = 0; i < max_requests; ++i) {
    absl::StatusOr<bool> ready = router.Poll(absl::ZeroDuration());
    if (!ready.ok() || !*ready || !router.Recv(&frames).ok()) return;
    // The routing id, then the one frame a DEALER sends.
    if (frames.size() != 2) {
      if (!frames.empty()) {
        SendReply(
            router, frames[0], 0,
            ErrorReply{absl::InvalidArgumentError(absl::StrCat(
                "expected a single-frame message, got ", frames.size() - 1))});
      }
      continue;
    }
    DecodeResult decoded = Decode(frames[1], limits);
    if (!decoded.envelope.ok()) {
      SendReply(router, frames[0], decoded.request_id,
                ErrorReply{decoded.envelope.status()});
      continue;
    }
    std::optional<Message> reply =
        handle(frames[0], decoded.envelope->request_id, decoded.envelope->body);
    if (reply) {
      SendReply(router, frames[0], decoded.envelope->request_id,
                *std::move(reply));
    }
  }
}

}  // namespace shoal::ipc
