#include "ipc/rpc_channel.h"

#include <unistd.h>
#include <zmq.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace shoal::ipc {
namespace {

constexpr int kHandshakeEvents =
    ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
    ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;

// Starts a monitor of `socket`'s handshake events and returns the PAIR
// socket that receives them (inproc: only this process can connect).
absl::StatusOr<Socket> MonitorHandshakes(Socket& socket) {
  static std::atomic<uint64_t> next{0};
  const std::string endpoint =
      absl::StrCat("inproc://shoal-rpc-handshakes-", getpid(), "-",
                   next.fetch_add(1, std::memory_order_relaxed));
  SHOAL_ZMQ_CHECK(
      zmq_socket_monitor(socket.raw(), endpoint.c_str(), kHandshakeEvents));
  SHOAL_ASSIGN_OR_RETURN(Socket pair, Socket::Create(ZMQ_PAIR));
  // No limit on queued events (the I/O thread would block on a full queue);
  // a failing connection adds one per reconnect, read at each call.
  const int unlimited = 0;
  SHOAL_ZMQ_CHECK(
      zmq_setsockopt(pair.raw(), ZMQ_RCVHWM, &unlimited, sizeof(unlimited)));
  SHOAL_RETURN_IF_ERROR(pair.Connect(endpoint));
  return pair;
}

}  // namespace

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
    // Before Connect, so the first handshake's outcome is seen.
    SHOAL_ASSIGN_OR_RETURN(c.monitor_, MonitorHandshakes(c.socket_));
  }
  SHOAL_RETURN_IF_ERROR(c.socket_.Connect(endpoint));
  return c;
}

RpcChannel& RpcChannel::operator=(RpcChannel&& other) noexcept {
  if (this != &other) {
    Close();
    monitor_ = std::move(other.monitor_);
    handshake_ = other.handshake_;
    socket_ = std::move(other.socket_);
    endpoint_ = std::move(other.endpoint_);
    peer_ = std::move(other.peer_);
    limits_ = other.limits_;
    next_request_ = other.next_request_;
    session_ = other.session_;
    resend_ = other.resend_;
    max_request_bytes_ = other.max_request_bytes_;
    last_reply_minor_ = other.last_reply_minor_;
    seq_ = std::move(other.seq_);
  }
  return *this;
}

RpcChannel::~RpcChannel() { Close(); }

void RpcChannel::Close() {
  if (monitor_ && socket_) zmq_socket_monitor(socket_.raw(), nullptr, 0);
  socket_.Close();
  monitor_.Close();
}

absl::StatusOr<Message> RpcChannel::Exchange(Message request,
                                             absl::Duration timeout) {
  const uint64_t id = next_request_++;
  // A hello may open a session whose replies are numbered from 1 (its
  // welcome first).
  if (std::holds_alternative<ClientHello>(request)) seq_.Reset();
  Envelope out{id, std::move(request)};
  out.session = session_;
  out.ack = session_ != 0 ? seq_.ack() : 0;
  seq_.MarkReported();
  absl::StatusOr<std::string> encoded = Encode(out);
  absl::Status fits =
      encoded.ok() ? CheckRequestSize(encoded->size(), max_request_bytes_)
                   : encoded.status();
  if (!fits.ok()) {
    // The id is spent: an acknowledgement carrying it tells a 1.5 node so,
    // which would otherwise wait for it (a gap in the session's requests).
    if (resend_) {
      Envelope filler{id, SessionAck{}};
      filler.session = session_;
      filler.ack = seq_.ack();
      absl::StatusOr<std::string> f = Encode(filler);
      if (f.ok()) (void)socket_.Send(*f, /*dontwait=*/true);
    }
    return fits;
  }
  const std::string frame = *std::move(encoded);
  const absl::Time deadline = timeout == absl::InfiniteDuration()
                                  ? absl::InfiniteFuture()
                                  : absl::Now() + timeout;
  // A DEALER with no pipe (its CURVE handshake was refused, so ZeroMQ
  // dropped the connection for good) blocks a send forever: wait for room
  // within the deadline instead.
  while (true) {
    absl::Status sent = socket_.Send(frame, /*dontwait=*/true);
    if (sent.ok()) break;
    if (!absl::IsUnavailable(sent)) return sent;  // else no room: wait
    absl::Status ready = WaitFor(ZMQ_POLLOUT, deadline);
    if (absl::IsDeadlineExceeded(ready)) return NoAnswer(timeout);
    SHOAL_RETURN_IF_ERROR(ready);
  }
  std::vector<std::string> frames;
  absl::Time resend_at = absl::Now() + kResendEvery;
  while (true) {
    absl::Status ready =
        WaitFor(ZMQ_POLLIN, resend_ ? std::min(deadline, resend_at) : deadline);
    if (absl::IsDeadlineExceeded(ready) && resend_ && absl::Now() < deadline) {
      // No reply yet: the request may have been lost with a connection
      // (the node drops it if it has it).
      (void)socket_.Send(frame, /*dontwait=*/true);
      resend_at = absl::Now() + kResendEvery;
      continue;
    }
    if (absl::IsDeadlineExceeded(ready)) return NoAnswer(timeout);
    SHOAL_RETURN_IF_ERROR(ready);
    SHOAL_RETURN_IF_ERROR(socket_.Recv(&frames, absl::ZeroDuration()));
    if (frames.size() != 1) continue;
    DecodeResult d = Decode(frames[0], limits_);
    if (!d.envelope.ok()) {
      if (d.request_id == id) return d.envelope.status();
      continue;
    }
    // A reply sent again after a reconnect is dropped.
    if (!seq_.Accept(d.envelope->seq)) continue;
    last_reply_minor_ = d.envelope->minor;
    // The node's word after a reconnect: which requests it has.
    if (std::holds_alternative<SessionAck>(d.envelope->body)) {
      if (resend_ && d.envelope->ack < id) {
        (void)socket_.Send(frame, /*dontwait=*/true);
        resend_at = absl::Now() + kResendEvery;
      }
      continue;
    }
    // Replies to earlier calls that timed out are skipped.
    if (d.envelope->request_id != id) continue;
    if (auto* e = std::get_if<ErrorReply>(&d.envelope->body)) {
      if (IsSessionReset(e->status)) SetSession(0);
      return e->status;
    }
    // A large reply is acknowledged at once: the node keeps each numbered
    // reply until it is, and the next call may be far off.
    if (session_ != 0 && frames[0].size() > (64 << 10)) {
      Envelope ack{0, SessionAck{}};
      ack.session = session_;
      ack.ack = seq_.ack();
      seq_.MarkReported();
      absl::StatusOr<std::string> f = Encode(ack);
      if (f.ok()) (void)socket_.Send(*f, /*dontwait=*/true);
    }
    return std::move(d.envelope->body);
  }
}

absl::Status RpcChannel::WaitFor(short events, absl::Time deadline) {
  while (true) {
    SHOAL_RETURN_IF_ERROR(ReadHandshakeEvents());
    zmq_pollitem_t items[2] = {{socket_.raw(), 0, events, 0},
                               {monitor_.raw(), 0, ZMQ_POLLIN, 0}};
    const int n = monitor_ ? 2 : 1;
    const absl::Duration left =
        deadline == absl::InfiniteFuture()
            ? absl::InfiniteDuration()
            : std::max(absl::ZeroDuration(), deadline - absl::Now());
    const int rc = zmq_poll(items, n, PollTimeoutMs(left));
    if (rc < 0) {
      if (zmq_errno() == EINTR) continue;
      return ZmqStatus("zmq_poll", __FILE__, __LINE__);
    }
    if (items[0].revents & events) return absl::OkStatus();
    if (rc == 0 && absl::Now() >= deadline) {
      SHOAL_RETURN_IF_ERROR(ReadHandshakeEvents());
      return absl::DeadlineExceededError("timed out");
    }
  }
}

absl::Status RpcChannel::ReadHandshakeEvents() {
  if (!monitor_) return absl::OkStatus();
  std::vector<std::string> frames;
  while (true) {
    absl::StatusOr<bool> ready = monitor_.Poll(absl::ZeroDuration());
    if (!ready.ok() || !*ready) break;
    if (!monitor_.Recv(&frames, absl::ZeroDuration()).ok()) break;
    // Frame 1: the event (16 bits) and its value (32 bits); 2: the endpoint.
    if (frames.empty() || frames[0].size() < 6) continue;
    uint16_t event;
    uint32_t value;
    std::memcpy(&event, frames[0].data(), 2);
    std::memcpy(&value, frames[0].data() + 2, 4);
    if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
      handshake_.succeeded = true;
    } else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
      ++handshake_.auth_refusals;
      handshake_.auth_status = static_cast<int>(value);
    } else {
      ++handshake_.failures;
    }
  }
  if (handshake_.auth_refusals > 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        PeerName(), " refused this client's CURVE key (ZAP status ",
        handshake_.auth_status,
        "): the server does not admit it; use a key pair the node admits "
        "(docs/security.md)"));
  }
  return absl::OkStatus();
}

absl::Status RpcChannel::NoAnswer(absl::Duration timeout) const {
  std::string why;
  if (monitor_ && !handshake_.succeeded) {
    why =
        handshake_.failures > 0
            ? absl::StrCat(" (its CURVE handshake failed ", handshake_.failures,
                           " times: is the server key right?)")
            : " (no CURVE handshake completed: is the server there, and "
              "is the server key right?)";
  }
  return absl::UnavailableError(
      absl::StrCat(PeerName(), " did not answer within ",
                   absl::FormatDuration(timeout), why));
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

void RpcChannel::SetSession(uint64_t id) {
  session_ = id;
  resend_ = id != 0 && last_reply_minor_ >= 5;
  if (id == 0) seq_.Reset();
}

void RpcChannel::Notify(Message message) {
  absl::StatusOr<std::string> frame = Encode(0, std::move(message));
  if (frame.ok()) (void)socket_.Send(*frame, /*dontwait=*/true);
}

}  // namespace shoal::ipc
