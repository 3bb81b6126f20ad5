// A frontend peer's session ends when its connection closes: what it owns
// (tasks, held outputs, actors) is freed at once, not at remote_result_ttl.
//
// libzmq 4.3.4 as Debian builds it has no ZMQ_ROUTER_NOTIFY (a draft option:
// setsockopt 97 fails with EINVAL), so disconnects come from a socket monitor
// (ZMQ_EVENT_DISCONNECTED, whose value is the connection's descriptor), and
// each request's descriptor from ZMQ_SRCFD; peers_by_fd_ maps one to the
// other. After reading each request the frontend reads the events queued so
// far: ZeroMQ queues a disconnect before it closes the descriptor, so the
// disconnect of a descriptor the kernel reused for the request's connection
// is always handled before that request. TCP peers are probed with TCP
// keepalive: a host that vanishes without closing is noticed within about
// 16 s of silence.
#include <zmq.h>

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "coordinator/coordinator_impl.h"

namespace shoal::coordinator {
namespace {

constexpr int kKeepaliveIdleS = 10;
constexpr int kKeepaliveIntervalS = 2;
constexpr int kKeepaliveProbes = 3;
constexpr int kHandshakeMs = 5000;

}  // namespace

absl::Status Coordinator::Impl::MonitorFrontend(bool tcp) {
  ipc::Socket& socket = tcp ? tcp_frontend_ : frontend_;
  ipc::Socket& events = tcp ? tcp_frontend_events_ : frontend_events_;
  int mask = ZMQ_EVENT_DISCONNECTED;
  if (tcp) {
    // A host that vanishes is noticed by TCP keepalive, not by ZMTP
    // heartbeats: libzmq 4.3.4 runs a connection's heartbeat timer after it
    // has stopped reading the connection (its queue to us full) and seen it
    // reset, and aborts the process (stream_engine_base.cpp:331).
    SHOAL_ZMQ_CHECK(zmq_setsockopt(socket.raw(), ZMQ_TCP_KEEPALIVE_IDLE,
                                   &kKeepaliveIdleS, sizeof kKeepaliveIdleS));
    SHOAL_ZMQ_CHECK(zmq_setsockopt(socket.raw(), ZMQ_TCP_KEEPALIVE_INTVL,
                                   &kKeepaliveIntervalS,
                                   sizeof kKeepaliveIntervalS));
    SHOAL_ZMQ_CHECK(zmq_setsockopt(socket.raw(), ZMQ_TCP_KEEPALIVE_CNT,
                                   &kKeepaliveProbes, sizeof kKeepaliveProbes));
    // A connection that has not completed its CURVE handshake in this long
    // is closed (libzmq's default is 30 s).
    SHOAL_ZMQ_CHECK(zmq_setsockopt(socket.raw(), ZMQ_HANDSHAKE_IVL,
                                   &kHandshakeMs, sizeof kHandshakeMs));
    mask |= ipc::ConnectionGuard::MonitorEvents();
  }
  // inproc names are per context: this object's address keeps two
  // coordinators of one process (tests) apart.
  const std::string name =
      absl::StrCat("inproc://shoal-frontend-events-", tcp ? "tcp-" : "ipc-",
                   reinterpret_cast<uintptr_t>(this));
  SHOAL_ZMQ_CHECK(zmq_socket_monitor(socket.raw(), name.c_str(), mask));
  SHOAL_ASSIGN_OR_RETURN(events, ipc::Socket::Create(ZMQ_PAIR));
  return events.Connect(name);
}

void Coordinator::Impl::DrainFrontendEvents(bool tcp) {
  ipc::Socket& events = tcp ? tcp_frontend_events_ : frontend_events_;
  MarkTouched(tcp ? kTcpEventsItem : kEventsItem);
  std::vector<std::string> frames;
  while (events.Recv(&frames, absl::ZeroDuration()).ok()) {
    std::optional<ipc::MonitorEvent> e = ipc::ParseMonitorEvent(frames);
    if (!e) continue;
    if (tcp) connections_.OnEvent(e->event, e->value, absl::Now());
    if (e->event != ZMQ_EVENT_DISCONNECTED) continue;
    const int32_t value = e->value;
    auto it = peers_by_fd_.find({tcp, static_cast<int>(value)});
    if (it == peers_by_fd_.end()) continue;
    const std::set<std::string> keys = std::move(it->second);
    peers_by_fd_.erase(it);
    for (const std::string& key : keys) {
      auto p = peers_.find(key);
      if (p == peers_.end() || p->second.dropped) continue;
      SHOAL_LOG(DEBUG,
                "a frontend client's connection closed: freeing its %d tasks, "
                "%d outputs and %d actors",
                p->second.tasks.size(), p->second.outputs.size(),
                p->second.actors.size());
      EndSession(p->second);
      // Forgotten, not kept as dropped: a DEALER with a routing id of its
      // own that reconnects starts a new session. (Replies still queued
      // count against a ReplyBytes their messages own.)
      peers_.erase(p);
    }
  }
}

}  // namespace shoal::coordinator
