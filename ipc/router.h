// The service side of RpcChannel: requests read from a ZeroMQ ROUTER socket,
// replies sent back to the DEALER that asked. The store, the coordinator's
// frontend and the key-value store all serve this way.
#ifndef SHOAL_IPC_ROUTER_H_
#define SHOAL_IPC_ROUTER_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/functional/function_ref.h"
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

// A request's connection: the file descriptor ZeroMQ read it from (its
// ZMQ_SRCFD; -1 for inproc or when unknown). A service uses it to ask the
// kernel who the peer is (SO_PEERCRED on ipc://) and to tell which requests
// came over a connection that a socket monitor later reports closed.
using PeerRequestHandler = absl::FunctionRef<std::optional<Message>(
    const std::string& routing_id, int peer_fd, uint64_t request_id,
    const Message& body)>;

// As ServeRequests, and hands each request's connection to `handle`.
void ServeRequestsWithPeer(Socket& router, const DecodeLimits& limits,
                           int max_requests, PeerRequestHandler handle);

}  // namespace shoal::ipc

#endif  // SHOAL_IPC_ROUTER_H_
