#include "tests/security/raw_client.h"

#include <zmq.h>

#include <utility>
#include <vector>

#include "ipc/protocol.h"

namespace shoal::testing {

RawClient::RawClient(const std::string& endpoint,
                     const RawClientOptions& options) {
  ipc::SocketOptions o;
  o.max_msg_bytes = int64_t{256} << 20;
  o.recv_hwm = options.rcvhwm;
  o.send_hwm = options.sndhwm;
  absl::StatusOr<ipc::Socket> s = ipc::Socket::Create(ZMQ_DEALER, o);
  if (!s.ok()) return;
  socket_ = *std::move(s);
  if (options.rcvhwm < 10) {
    const int small = 4096;
    zmq_setsockopt(socket_.raw(), ZMQ_RCVBUF, &small, sizeof(small));
  }
  if (options.keys != nullptr) {
    (void)ipc::ConfigureCurveClient(socket_, options.server_key,
                                    *options.keys);
  }
  (void)socket_.Connect(endpoint);
}

RawClient::RawClient(const std::string& endpoint, int rcvhwm,
                     const ipc::CurveKeyPair* keys,
                     const std::string& server_key)
    : RawClient(endpoint, RawClientOptions{.rcvhwm = rcvhwm,
                                           .keys = keys,
                                           .server_key = server_key}) {}

absl::Status RawClient::Send(uint64_t id, ipc::Message m) {
  absl::StatusOr<std::string> frame = ipc::Encode(id, std::move(m));
  if (!frame.ok()) return frame.status();
  return SendFrame(*frame);
}

absl::Status RawClient::SendFrame(const std::string& frame) {
  if (!socket_) return absl::FailedPreconditionError("no socket");
  return socket_.Send(frame, /*dontwait=*/true);
}

absl::StatusOr<std::pair<uint64_t, ipc::Message>> RawClient::NextWithId(
    absl::Duration timeout) {
  if (!socket_) return absl::FailedPreconditionError("no socket");
  std::vector<std::string> frames;
  absl::Status s = socket_.Recv(&frames, timeout);
  if (!s.ok()) return s;
  ipc::DecodeLimits limits;
  limits.max_frame_bytes = 256 << 20;
  ipc::DecodeResult d = ipc::Decode(frames.at(0), limits);
  if (!d.envelope.ok()) return d.envelope.status();
  if (auto* e = std::get_if<ipc::ErrorReply>(&d.envelope->body))
    return e->status;
  return std::make_pair(d.envelope->request_id, std::move(d.envelope->body));
}

absl::StatusOr<ipc::Message> RawClient::Next(absl::Duration timeout) {
  absl::StatusOr<std::pair<uint64_t, ipc::Message>> r = NextWithId(timeout);
  if (!r.ok()) return r.status();
  return std::move(r->second);
}

absl::StatusOr<ipc::Message> RawClient::Call(ipc::Message m,
                                             absl::Duration timeout) {
  if (absl::Status s = Send(++next_id_, std::move(m)); !s.ok()) return s;
  return Next(timeout);
}

}  // namespace shoal::testing
