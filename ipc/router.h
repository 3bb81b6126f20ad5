// The service side of RpcChannel: requests read from a ZeroMQ ROUTER socket,
// replies sent back to the DEALER that asked. The store, the coordinator's
// frontend and the key-value store all serve this way.
#ifndef SHOAL_IPC_ROUTER_H_
#define SHOAL_IPC_ROUTER_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"
#include "ipc/messages.h"
#include "ipc/protocol.h"
#include "ipc/socket.h"

namespace shoal::ipc {

// Sends `body` to the DEALER `routing_id` as the reply to `request_id`; a body
// that cannot be encoded goes as an ErrorReply saying why. Never blocks: a
// service must not stall on one slow client, so a reply that cannot be queued
// is dropped (logged at DEBUG) and that client's call times out.
void SendReply(Socket& router, const std::string& routing_id,
               uint64_t request_id, Message body);

// A service's answer to one request: the reply, or nullopt when it answers
// later (with SendReply) or never (a notice).
using RequestHandler = absl::FunctionRef<std::optional<Message>(
    const std::string& routing_id, uint64_t request_id, const Message& body)>;

// Reads the requests waiting on ROUTER `router`, without blocking, and hands
// each to `handle`, sending back what it returns. Malformed ones (not one
// frame, undecodable under `limits`) get an ErrorReply here. Stops after
// `max_requests` so that a busy socket does not starve the caller's other
// events; the caller polls again.
void ServeRequests(Socket& router, const DecodeLimits& limits, int max_requests,
                   RequestHandler handle);

// Who sent a request, as far as its connection tells.
struct RequestPeer {
  // The file descriptor ZeroMQ read it from (its ZMQ_SRCFD; -1 for inproc or
  // when unknown). A number the kernel reuses once the connection closes:
  // good for telling which requests came over a connection that a socket
  // monitor later reports closed, not for asking who the peer is.
  int fd = -1;
  // ipc:// only: the peer process's credentials, which ZeroMQ read
  // (SO_PEERCRED) when it accepted the connection and attaches to each of its
  // messages (the "Peer-Address" property, "<host>:<uid>:<gid>:<pid>"). Tied
  // to the connection itself, so a reused descriptor cannot lend another
  // process's identity. Unset for tcp:// and inproc://.
  bool has_credentials = false;
  uint32_t uid = 0;
  uint32_t gid = 0;
  int32_t pid = 0;
};

// Parses the "Peer-Address" ZeroMQ gives an ipc:// connection
// ("<host>:<uid>:<gid>:<pid>") into `peer`'s credentials; anything else (a
// tcp:// address, IPv4 or IPv6) leaves them unset. Returns whether it did.
bool ParsePeerCredentials(absl::string_view peer_address, RequestPeer* peer);

using PeerRequestHandler = absl::FunctionRef<std::optional<Message>(
    const std::string& routing_id, const RequestPeer& peer, uint64_t request_id,
    const Message& body)>;

// As ServeRequests, and hands each request's connection to `handle`.
void ServeRequestsWithPeer(Socket& router, const DecodeLimits& limits,
                           int max_requests, PeerRequestHandler handle);

}  // namespace shoal::ipc

#endif  // SHOAL_IPC_ROUTER_H_
