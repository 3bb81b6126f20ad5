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
  RpcChannel& operator=(RpcChannel&&) = default;

  // Sends `request` and waits up to `timeout` for its reply, a `Reply`:
  //
  //   SHOAL_ASSIGN_OR_RETURN(SubmitReply r, channel.Call<SubmitReply>(req, t));
  //
  // Errors: the ErrorReply's status; Unavailable when no reply came in time
  // (the message names the peer and endpoint); decoding errors of the reply;
  // Internal when the peer answered with another message than `Reply` (a
  // peer that speaks another dialect, named in the message).
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

  const std::string& endpoint() const { return endpoint_; }

 private:
  // Call without the check of the reply's type.
  absl::StatusOr<Message> Exchange(Message request, absl::Duration timeout);
  absl::Status UnexpectedReply(absl::string_view asked,
                               absl::string_view expected,
                               absl::string_view got) const;
  // "the store at ipc://..." or the bare endpoint when no peer was named.
  std::string PeerName() const;

  Socket socket_;
  std::string endpoint_;
  std::string peer_;
  DecodeLimits limits_;
  uint64_t next_request_ = 1;
};

}  // namespace shoal::ipc

#endif  // SHOAL_IPC_RPC_CHANNEL_H_
