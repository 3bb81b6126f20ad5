#include "ipc/router.h"

#include <zmq.h>

#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
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

namespace {

// Reads one message without blocking: its frames and the connection it came
// on. Returns false when none is waiting.
bool RecvWithPeer(Socket& router, std::vector<std::string>* frames,
                  RequestPeer* peer) {
  frames->clear();
  *peer = RequestPeer{};
  while (true) {
    zmq_msg_t part;
    zmq_msg_init(&part);
    if (zmq_msg_recv(&part, router.raw(), ZMQ_DONTWAIT) < 0) {
      zmq_msg_close(&part);
      if (zmq_errno() == EINTR) continue;
      // EAGAIN before the first frame: nothing waits. A message is delivered
      // whole, so no error comes between its frames.
      return !frames->empty();
    }
    // The routing id frame is made by the ROUTER; the body came over the
    // connection and carries its descriptor.
    if (const int fd = zmq_msg_get(&part, ZMQ_SRCFD); fd >= 0) {
      peer->fd = fd;
      if (const char* address = zmq_msg_gets(&part, "Peer-Address"))
        ParsePeerCredentials(address, peer);
    }
    frames->emplace_back(static_cast<const char*>(zmq_msg_data(&part)),
                         zmq_msg_size(&part));
    const bool more = zmq_msg_more(&part) != 0;
    zmq_msg_close(&part);
    if (!more) return true;
  }
}

}  // namespace

bool ParsePeerCredentials(absl::string_view peer_address, RequestPeer* peer) {
  const std::vector<absl::string_view> fields =
      absl::StrSplit(peer_address, ':');
  uint32_t uid, gid;
  int32_t pid;
  // Exactly four fields: an IPv6 address with the three numbers behind it
  // would have more, and one without them cannot end in three numbers.
  if (fields.size() != 4 || fields[1].empty() || fields[2].empty() ||
      fields[3].empty() || !absl::SimpleAtoi(fields[1], &uid) ||
      !absl::SimpleAtoi(fields[2], &gid) ||
      !absl::SimpleAtoi(fields[3], &pid) || pid <= 0) {
    return false;
  }
  peer->has_credentials = true;
  peer->uid = uid;
  peer->gid = gid;
  peer->pid = pid;
  return true;
}

void ServeRequests(Socket& router, const DecodeLimits& limits, int max_requests,
                   RequestHandler handle) {
  ServeRequestsWithPeer(router, limits, max_requests,
                        [&](const std::string& routing_id, const RequestPeer&,
                            uint64_t request_id, const Message& body) {
                          return handle(routing_id, request_id, body);
                        });
}

void ServeRequestsWithPeer(Socket& router, const DecodeLimits& limits,
                           int max_requests, PeerRequestHandler handle) {
  std::vector<std::string> frames;
  RequestPeer peer;
  for (int i = 0; i < max_requests; ++i) {
    if (!RecvWithPeer(router, &frames, &peer)) return;
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
    std::optional<Message> reply = handle(
        frames[0], peer, decoded.envelope->request_id, decoded.envelope->body);
    if (reply) {
      SendReply(router, frames[0], decoded.envelope->request_id,
                *std::move(reply));
    }
  }
}

}  // namespace shoal::ipc
