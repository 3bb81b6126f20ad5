// ConnectionGuard: bounds the TCP connections a ZeroMQ socket listening for
// strangers holds, from outside libzmq (which has no connection limit).
//
// Why: every connection costs a descriptor, and a process that runs out of
// descriptors is aborted by libzmq at its next ipc:// accept ("Too many open
// files (src/ipc_listener.cpp:325)"). Anyone who can reach a TCP port can
// open connections without a key. The guard watches the socket's monitor
// events and:
// - holds new connections off while `max_connections` are open: a classic
//   BPF filter on the listening socket drops bare SYNs, so the kernel
//   completes no handshake and libzmq accepts nothing (connectors retry, as
//   ZeroMQ's do); established connections are untouched;
// - closes a connection whose address already has
//   max_handshakes_per_address connections whose ZMTP/CURVE handshake has
//   not completed, and one that sends no request within
//   first_request_within;
// - refuses a client (the key the caller names it by) more than
//   max_per_client connections, unless the caller exempts it.
// Closing is shutdown(2) of libzmq's descriptor, which makes libzmq end the
// connection as if the peer had. A descriptor number is reused once closed;
// the guard acts on a descriptor only between its ACCEPTED and DISCONNECTED
// events, so a reuse can only make it close a connection that libzmq accepted
// in the microseconds since (which reconnects).
//
// Thread-compatible: one thread feeds it (the socket's event loop).
#ifndef SHOAL_IPC_CONNECTION_GUARD_H_
#define SHOAL_IPC_CONNECTION_GUARD_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace shoal::ipc {

struct ConnectionLimits {
  // TCP connections open at once. Default 1024; at most a quarter of the
  // process's descriptor limit, whatever is asked (the rest is left to its
  // other descriptors: ipc:// clients, files, pidfds).
  size_t max_connections = 1024;
  // Connections from one IP address whose handshake is in progress. Default
  // 128.
  size_t max_handshakes_per_address = 128;
  // Connections of one client (OnRequest's `client`). Default 64.
  size_t max_per_client = 64;
  // A connection that sends no request this long after it was accepted is
  // closed. Default 30 s.
  absl::Duration first_request_within = absl::Seconds(30);
};

// Counters of what the guard did, for logs and status.
struct ConnectionGuardStats {
  uint64_t accepted = 0;
  uint64_t closed_handshaking = 0;  // over max_handshakes_per_address
  uint64_t closed_silent = 0;       // no request within first_request_within
  uint64_t closed_client = 0;       // over max_per_client
  uint64_t hold_offs = 0;           // times new connections were held off
};

class ConnectionGuard {
 public:
  // The monitor events the guard needs (zmq_socket_monitor's mask).
  static int MonitorEvents();

  explicit ConnectionGuard(ConnectionLimits limits = {});
  ConnectionGuard(const ConnectionGuard&) = delete;
  ConnectionGuard& operator=(const ConnectionGuard&) = delete;

  // Feeds one monitor event (ZMQ_EVENT_* and its value, a descriptor).
  // LISTENING names the listening socket; ACCEPTED, HANDSHAKE_* and
  // DISCONNECTED follow connections; other events are ignored.
  void OnEvent(uint16_t event, int32_t value, absl::Time now);
  // A request arrived on connection `fd` from `client` (`exempt`: not
  // subject to max_per_client, e.g. the node's owner). Errors:
  // ResourceExhausted naming max_per_client when the client already holds
  // that many other connections: this one is then closed (a reply the
  // caller sends first may still reach it).
  absl::Status OnRequest(int fd, absl::string_view client, bool exempt = false);
  // Closes connections silent for first_request_within. About once a
  // second.
  void Tick(absl::Time now);

  size_t open() const { return connections_.size(); }
  bool holding_off() const { return holding_off_; }
  // The cap in force: max_connections, or a quarter of the descriptor limit.
  size_t cap() const;
  const ConnectionGuardStats& stats() const { return stats_; }

 private:
  struct Connection {
    absl::Time accepted;
    std::string address;      // the peer's IP address; "" if unknown
    bool handshaking = true;  // counted in handshaking_
    std::string client;       // "" until its first request
  };
  // Ends a connection's handshake count (idempotent).
  void HandshakeDone(Connection& c);
  void Close(int fd);
  void Forget(int fd);
  // Attaches or detaches the SYN filter as the count crosses the cap.
  void UpdateHoldOff();

  ConnectionLimits limits_;
  int listener_ = -1;
  bool holding_off_ = false;
  std::map<int, Connection> connections_;            // by descriptor
  std::map<std::string, size_t> handshaking_;        // by address
  std::map<std::string, std::vector<int>> clients_;  // client → descriptors
  ConnectionGuardStats stats_;
};

// Decodes a monitor message (two frames: event and value, endpoint).
struct MonitorEvent {
  uint16_t event = 0;
  int32_t value = 0;
};
std::optional<MonitorEvent> ParseMonitorEvent(
    const std::vector<std::string>& frames);

}  // namespace shoal::ipc

#endif  // SHOAL_IPC_CONNECTION_GUARD_H_
