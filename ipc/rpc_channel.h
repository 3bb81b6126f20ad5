// RpcChannel: request/reply over one ZeroMQ DEALER socket — the client side of
// every shoal service (store, coordinator, key-value store). Matches replies to
// requests by request id (skipping late replies to abandoned calls) and turns
// an ErrorReply into its status. Not thread-safe: one caller at a time.
#ifndef SHOAL_IPC_RPC_CHANNEL_H_
#define SHOAL_IPC_RPC_CHANNEL_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
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

  // Sends `request` and waits up to `timeout` for its reply.
  // Errors: the ErrorReply's status; Unavailable when no reply came in time
  // (the message names the endpoint); decoding errors of the reply.
  absl::StatusOr<Message> Call(Message request, absl::Duration timeout);

  // Sends without waiting (the service sends no reply).
  void Notify(Message message);

  const std::string& endpoint() const { return endpoint_; }

 private:
  Socket socket_;
  std::string endpoint_;
  DecodeLimits limits_;
  uint64_t next_request_ = 1;
};

}  // namespace shoal::ipc

#endif  // SHOAL_IPC_RPC_CHANNEL_H_
