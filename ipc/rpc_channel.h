// RpcChannel: request/reply over one ZeroMQ DEALER socket — the client side of
// every shoal service (store, coordinator, key-value store). Matches replies to
// requests by request id (skipping late replies to abandoned calls), turns an
// ErrorReply into its status and checks that the reply is the message the
// request expects. Not thread-safe: one caller at a time.
#ifndef SHOAL_IPC_RPC_CHANNEL_H_
#define SHOAL_IPC_RPC_CHANNEL_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "ipc/curve.h"
#include "ipc/messages.h"
#include "ipc/protocol.h"
#include "ipc/session_seq.h"
#include "ipc/socket.h"

namespace shoal::ipc {

struct RpcChannelOptions {
  SocketOptions socket;
  DecodeLimits limits;
  // CURVE: when `server_key` is set, `client_keys` authenticate this side.
  std::string server_key;
  CurveKeyPair client_keys;
  // What the endpoint is, for errors: with "the store", a call that times out
  // says "the store at ipc://... did not answer within 5s".
  std::string peer;
};

class RpcChannel {
 public:
  // Errors: socket creation and CURVE configuration failures. Connecting is
  // asynchronous: an unreachable endpoint shows as Unavailable on Call.
  static absl::StatusOr<RpcChannel> Connect(
      const std::string& endpoint, const RpcChannelOptions& options = {});

  RpcChannel() = default;
  RpcChannel(RpcChannel&&) = default;
  RpcChannel& operator=(RpcChannel&& other) noexcept;
  ~RpcChannel();

  // Sends `request` and waits up to `timeout` for its reply, a `Reply`:
  //
  //   SHOAL_ASSIGN_OR_RETURN(SubmitReply r, channel.Call<SubmitReply>(req, t));
  //
  // The whole call, sending included, ends within `timeout`: a request that
  // cannot even be queued (no connection: ZeroMQ drops the pipe of a DEALER
  // whose CURVE handshake was refused) is not waited on forever.
  // Errors: the ErrorReply's status; Unavailable when no reply came in time
  // (the message names the peer and endpoint, and over CURVE says when no
  // handshake completed: a wrong server key, or a server that is not there);
  // PermissionDenied when the CURVE server refused this client's key (its
  // ZAP handler said no; returned as soon as the refusal arrives); decoding
  // errors of the reply; Internal when the peer answered with another
  // message than `Reply` (a peer that speaks another dialect, named in the
  // message).
  template <typename Reply>
  absl::StatusOr<Reply> Call(Message request, absl::Duration timeout) {
    const absl::string_view asked = MessageName(request);
    absl::StatusOr<Message> reply = Exchange(std::move(request), timeout);
    if (!reply.ok()) return reply.status();
    if (Reply* r = std::get_if<Reply>(&*reply)) return std::move(*r);
    return UnexpectedReply(asked, MessageName(Message(Reply{})),
                           MessageName(*reply));
  }

  // Sends without waiting (the service sends no reply).
  void Notify(Message message);

  // Requests from now on belong to resumable session `id` (the welcome of
  // the hello this channel sent last gave it, the last reply; 0: none):
  // each carries the id and the acknowledgement of the numbered replies
  // that arrived (docs/protocol.md, "Sessions"), and a reply that comes
  // again after a reconnect is dropped. With a 1.5 node (the welcome's
  // minor) a call whose reply has not come is sent again every
  // kResendEvery, and at once when the node says it lacks it (its
  // SessionAck after a reconnect): the node serves a request id once, so a
  // request lost with a cut connection costs a second, not the call. A
  // reply that says the node no longer knows the session ends it here too
  // (the call returns that error; later calls have no session).
  void SetSession(uint64_t id);
  static constexpr absl::Duration kResendEvery = absl::Seconds(1);
  uint64_t session() const { return session_; }
  // Requests over `bytes` (the welcome's max_request_bytes; 0: none) fail
  // here with ResourceExhausted (ipc::CheckRequestSize), unsent.
  void SetMaxRequestBytes(uint64_t bytes) { max_request_bytes_ = bytes; }

  const std::string& endpoint() const { return endpoint_; }

 private:
  // Call without the check of the reply's type.
  absl::StatusOr<Message> Exchange(Message request, absl::Duration timeout);
  absl::Status UnexpectedReply(absl::string_view asked,
                               absl::string_view expected,
                               absl::string_view got) const;
  // "the store at ipc://..." or the bare endpoint when no peer was named.
  std::string PeerName() const;
  // Waits until `socket_` is ready for `events` (ZMQ_POLLIN / ZMQ_POLLOUT)
  // or `deadline` passes (DeadlineExceeded), reading the handshake monitor
  // meanwhile. Errors: PermissionDenied once the server refused our key.
  absl::Status WaitFor(short events, absl::Time deadline);
  // Reads the handshake events that arrived (without waiting) into
  // `handshake_`. Errors: PermissionDenied once the server refused our key.
  absl::Status ReadHandshakeEvents();
  // Stops the handshake monitor, then closes the sockets: libzmq's I/O
  // thread would block on a monitor whose reader is gone.
  void Close();
  // Unavailable "<peer> did not answer within <timeout>", with what the
  // handshake monitor saw.
  absl::Status NoAnswer(absl::Duration timeout) const;

  // What the CURVE handshake monitor has seen (CURVE channels only).
  struct HandshakeState {
    bool succeeded = false;
    int failures = 0;       // failed handshakes, refusals aside
    int auth_refusals = 0;  // the server's ZAP handler said no
    int auth_status = 0;    // its status code (e.g. 400)
  };

  // Declared before socket_, so that it is closed after the socket it
  // monitors (which sends its last event on close).
  Socket monitor_;  // PAIR: handshake events of socket_ (CURVE only)
  HandshakeState handshake_;
  Socket socket_;
  std::string endpoint_;
  std::string peer_;
  DecodeLimits limits_;
  uint64_t next_request_ = 1;
  uint64_t session_ = 0;
  bool resend_ = false;            // the session's node speaks 1.5
  uint32_t last_reply_minor_ = 0;  // the protocol minor of the last reply
  uint64_t max_request_bytes_ = 0;
  SessionSeq seq_;
};

}  // namespace shoal::ipc

#endif  // SHOAL_IPC_RPC_CHANNEL_H_
