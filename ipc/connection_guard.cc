#include "ipc/connection_guard.h"

#include <arpa/inet.h>
#include <linux/filter.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <zmq.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/descriptor_limit.h"
#include "base/log.h"

namespace shoal::ipc {
namespace {

// The peer's IP address of a connected socket, "" if it has none.
std::string PeerAddress(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "";
  char text[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    if (inet_ntop(AF_INET, &a->sin_addr, text, sizeof text) == nullptr)
      return "";
  } else if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    if (inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof text) == nullptr)
      return "";
  } else {
    return "";
  }
  return text;
}

// Drops bare SYNs (SYN without ACK): the TCP header is at offset 0 of what a
// TCP socket's filter sees, its flags byte at 13.
bool AttachSynFilter(int fd) {
  static sock_filter code[] = {
      BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 13),
      BPF_STMT(BPF_ALU | BPF_AND | BPF_K, 0x12),  // SYN | ACK
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x02, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, 0),           // a bare SYN: drop
      BPF_STMT(BPF_RET | BPF_K, 0xFFFFFFFF),  // anything else: keep
  };
  sock_fprog prog{static_cast<unsigned short>(sizeof code / sizeof code[0]),
                  code};
  return setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof prog) == 0;
}

bool DetachFilter(int fd) {
  int unused = 0;
  return setsockopt(fd, SOL_SOCKET, SO_DETACH_FILTER, &unused, sizeof unused) ==
             0 ||
         errno == ENOENT;
}

}  // namespace

int ConnectionGuard::MonitorEvents() {
  return ZMQ_EVENT_LISTENING | ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED |
         ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
         ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;
}

ConnectionGuard::ConnectionGuard(ConnectionLimits limits)
    : limits_(std::move(limits)) {}

size_t ConnectionGuard::cap() const {
  return std::max<size_t>(
      1, std::min<size_t>(limits_.max_connections, DescriptorLimit() / 4));
}

void ConnectionGuard::OnEvent(uint16_t event, int32_t value, absl::Time now) {
  const int fd = value;
  switch (event) {
    case ZMQ_EVENT_LISTENING:
      listener_ = fd;
      UpdateHoldOff();
      return;
    case ZMQ_EVENT_ACCEPTED: {
      Forget(fd);  // a DISCONNECTED that never came: the number is new now
      ++stats_.accepted;
      Connection c;
      c.accepted = now;
      c.address = PeerAddress(fd);
      size_t& handshaking = handshaking_[c.address];
      ++handshaking;
      connections_.emplace(fd, std::move(c));
      if (handshaking > limits_.max_handshakes_per_address) {
        ++stats_.closed_handshaking;
        Close(fd);
      }
      UpdateHoldOff();
      return;
    }
    case ZMQ_EVENT_HANDSHAKE_SUCCEEDED:
    case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL:
    case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
    case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
      if (auto it = connections_.find(fd); it != connections_.end())
        HandshakeDone(it->second);
      return;
    case ZMQ_EVENT_DISCONNECTED:
      Forget(fd);
      UpdateHoldOff();
      return;
    default:
      return;
  }
}

absl::Status ConnectionGuard::OnRequest(int fd, absl::string_view client,
                                        bool exempt) {
  auto it = connections_.find(fd);
  if (it == connections_.end() || !it->second.client.empty())
    return absl::OkStatus();  // counted at its first request
  HandshakeDone(it->second);
  it->second.client = std::string(client);
  std::vector<int>& fds = clients_[it->second.client];
  fds.push_back(fd);
  if (!exempt && fds.size() > limits_.max_per_client) {
    ++stats_.closed_client;
    Close(fd);
    return absl::ResourceExhaustedError(
        absl::StrCat("this client has ", fds.size() - 1,
                     " connections to the node already: over the limit "
                     "max_connections_per_client = ",
                     limits_.max_per_client, "; this connection is closed"));
  }
  return absl::OkStatus();
}

void ConnectionGuard::HandshakeDone(Connection& c) {
  if (!c.handshaking) return;
  c.handshaking = false;
  if (auto a = handshaking_.find(c.address); a != handshaking_.end()) {
    if (--a->second == 0) handshaking_.erase(a);
  }
}

void ConnectionGuard::Tick(absl::Time now) {
  for (auto& [fd, c] : connections_) {
    if (c.client.empty() && now - c.accepted > limits_.first_request_within &&
        c.accepted != absl::InfinitePast()) {
      ++stats_.closed_silent;
      c.accepted = absl::InfinitePast();  // closed once; DISCONNECTED follows
      Close(fd);
    }
  }
}

void ConnectionGuard::Close(int fd) {
  // libzmq reads end of file, ends the connection and reports DISCONNECTED.
  if (shutdown(fd, SHUT_RDWR) != 0 && errno != ENOTCONN) {
    SHOAL_LOG(DEBUG, "shutdown(%d): %s", fd, std::strerror(errno));
  }
}

void ConnectionGuard::Forget(int fd) {
  auto it = connections_.find(fd);
  if (it == connections_.end()) return;
  HandshakeDone(it->second);
  if (!it->second.client.empty()) {
    if (auto c = clients_.find(it->second.client); c != clients_.end()) {
      std::erase(c->second, fd);
      if (c->second.empty()) clients_.erase(c);
    }
  }
  connections_.erase(it);
}

void ConnectionGuard::UpdateHoldOff() {
  if (listener_ < 0) return;
  const size_t limit = cap();
  // Hysteresis: hold off at the cap, let in again below 90% of it.
  if (!holding_off_ && connections_.size() >= limit) {
    if (AttachSynFilter(listener_)) {
      holding_off_ = true;
      ++stats_.hold_offs;
      SHOAL_LOG(WARNING,
                "%d TCP connections are open (the cap): new ones are held "
                "off until some close",
                connections_.size());
    } else {
      SHOAL_LOG(ERROR, "attaching the SYN filter: %s", std::strerror(errno));
    }
  } else if (holding_off_ && connections_.size() < limit - limit / 10) {
    if (DetachFilter(listener_)) holding_off_ = false;
  }
}

std::optional<MonitorEvent> ParseMonitorEvent(
    const std::vector<std::string>& frames) {
  if (frames.empty() || frames[0].size() != 6) return std::nullopt;
  MonitorEvent e;
  std::memcpy(&e.event, frames[0].data(), sizeof e.event);
  std::memcpy(&e.value, frames[0].data() + 2, sizeof e.value);
  return e;
}

}  // namespace shoal::ipc
