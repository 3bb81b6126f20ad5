#include "ipc/connection_guard.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.h>

#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "ipc/socket.h"

namespace shoal::ipc {
namespace {

// A ROUTER listening on loopback TCP, its monitor, and a guard fed from it.
class GuardedRouter {
 public:
  explicit GuardedRouter(ConnectionLimits limits) : guard_(limits) {
    router_ = *Socket::Create(ZMQ_ROUTER);
    static int next = 0;
    const std::string name = absl::StrCat("inproc://guard-test-", ++next);
    EXPECT_EQ(zmq_socket_monitor(router_.raw(), name.c_str(),
                                 ConnectionGuard::MonitorEvents()),
              0);
    events_ = *Socket::Create(ZMQ_PAIR);
    EXPECT_TRUE(events_.Connect(name).ok());
    EXPECT_TRUE(router_.Bind("tcp://127.0.0.1:*").ok());
    const std::string endpoint = *router_.LastEndpoint();
    EXPECT_TRUE(
        absl::SimpleAtoi(endpoint.substr(endpoint.rfind(':') + 1), &port_));
    Pump();
  }

  // The monitor stopped first: libzmq blocks the thread that emits an event
  // (its I/O thread, as connections close) while the monitor has no reader.
  ~GuardedRouter() {
    zmq_socket_monitor(router_.raw(), nullptr, 0);
    router_.Close();
  }

  // Feeds the guard every event that arrives within `quiet` of the last.
  void Pump(absl::Duration quiet = absl::Milliseconds(100)) {
    std::vector<std::string> frames;
    while (events_.Recv(&frames, quiet).ok()) {
      if (auto e = ParseMonitorEvent(frames))
        guard_.OnEvent(e->event, e->value, absl::Now());
    }
  }

  // A non-blocking TCP connect to the router; the descriptor.
  int Connect() const {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port_));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    (void)connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    return fd;
  }

  // Pumps until `done()` holds (events come from libzmq's I/O thread, late
  // on a loaded machine) or `timeout` passes; whether it held.
  template <typename Done>
  bool PumpUntil(Done done, absl::Duration timeout = absl::Seconds(10)) {
    const absl::Time deadline = absl::Now() + timeout;
    while (!done() && absl::Now() < deadline) Pump(absl::Milliseconds(20));
    return done();
  }

  ConnectionGuard& guard() { return guard_; }
  Socket router_;

 private:
  Socket events_;
  ConnectionGuard guard_;
  int port_ = 0;
};

// Whether a non-blocking connect completed within `timeout`.
bool Connected(int fd, absl::Duration timeout) {
  pollfd p{fd, POLLOUT, 0};
  if (poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout))) != 1)
    return false;
  int err = 0;
  socklen_t len = sizeof err;
  getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
  return err == 0;
}

// Whether the other side closed the connection within `timeout`.
bool ClosedByPeer(int fd, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 50) == 1) {
      char c;
      const ssize_t n = recv(fd, &c, 1, MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN)) return true;
    }
  }
  return false;
}

TEST(ConnectionGuardTest, HoldsNewConnectionsOffAtTheCapAndLetsThemInAfter) {
  ConnectionLimits limits;
  limits.max_connections = 8;
  limits.max_handshakes_per_address = 100;
  GuardedRouter r(limits);
  std::vector<int> fds;
  for (int i = 0; i < 8; ++i) {
    fds.push_back(r.Connect());
    ASSERT_TRUE(Connected(fds.back(), absl::Seconds(2))) << i;
  }
  ASSERT_TRUE(r.PumpUntil([&] { return r.guard().open() == 8; }));
  EXPECT_TRUE(r.guard().holding_off());
  // The ninth's SYN is dropped: no handshake completes.
  const int ninth = r.Connect();
  EXPECT_FALSE(Connected(ninth, absl::Milliseconds(500)));
  close(fds[0]);
  close(fds[1]);
  ASSERT_TRUE(r.PumpUntil([&] { return r.guard().open() == 6; }));
  EXPECT_FALSE(r.guard().holding_off());
  // Its SYN is retransmitted (after about a second) and now answered.
  EXPECT_TRUE(Connected(ninth, absl::Seconds(5)));
  for (size_t i = 2; i < fds.size(); ++i) close(fds[i]);
  close(ninth);
}

TEST(ConnectionGuardTest, ClosesHandshakesOverTheAddressCap) {
  ConnectionLimits limits;
  limits.max_handshakes_per_address = 4;
  GuardedRouter r(limits);
  std::vector<int> fds;
  for (int i = 0; i < 6; ++i) {
    fds.push_back(r.Connect());
    ASSERT_TRUE(Connected(fds.back(), absl::Seconds(2)));
  }
  ASSERT_TRUE(
      r.PumpUntil([&] { return r.guard().stats().closed_handshaking == 2; }));
  int closed = 0;
  for (int fd : fds) closed += ClosedByPeer(fd, absl::Milliseconds(500));
  EXPECT_EQ(closed, 2);
  EXPECT_TRUE(r.PumpUntil([&] { return r.guard().open() == 4; }));
  for (int fd : fds) close(fd);
}

TEST(ConnectionGuardTest, ClosesConnectionsThatSendNoRequest) {
  ConnectionLimits limits;
  limits.first_request_within = absl::Milliseconds(200);
  GuardedRouter r(limits);
  const int fd = r.Connect();
  ASSERT_TRUE(Connected(fd, absl::Seconds(2)));
  ASSERT_TRUE(r.PumpUntil([&] { return r.guard().open() == 1; }));
  r.guard().Tick(absl::Now());
  EXPECT_FALSE(ClosedByPeer(fd, absl::Milliseconds(100)));
  absl::SleepFor(absl::Milliseconds(250));
  r.guard().Tick(absl::Now());
  EXPECT_TRUE(ClosedByPeer(fd, absl::Seconds(2)));
  EXPECT_TRUE(r.PumpUntil([&] { return r.guard().open() == 0; }));
  EXPECT_EQ(r.guard().stats().closed_silent, 1u);
  close(fd);
}

TEST(ConnectionGuardTest, RefusesAClientOverItsConnectionCap) {
  ConnectionLimits limits;
  limits.max_per_client = 2;
  GuardedRouter r(limits);
  // Real ZeroMQ clients, so that the router reads requests with their
  // descriptors (ZMQ_SRCFD), as a frontend does.
  const int timeout_ms = 20000;
  zmq_setsockopt(r.router_.raw(), ZMQ_RCVTIMEO, &timeout_ms, sizeof timeout_ms);
  std::vector<Socket> dealers;
  std::vector<int> router_fds;
  for (int i = 0; i < 3; ++i) {
    dealers.push_back(*Socket::Create(ZMQ_DEALER));
    ASSERT_TRUE(dealers.back().Connect(*r.router_.LastEndpoint()).ok());
    ASSERT_TRUE(dealers.back().Send("hello").ok());
    zmq_msg_t id, body;
    zmq_msg_init(&id);
    zmq_msg_init(&body);
    ASSERT_GE(zmq_msg_recv(&id, r.router_.raw(), 0), 0);
    ASSERT_GE(zmq_msg_recv(&body, r.router_.raw(), 0), 0);
    router_fds.push_back(zmq_msg_get(&body, ZMQ_SRCFD));
    zmq_msg_close(&id);
    zmq_msg_close(&body);
  }
  ASSERT_TRUE(r.PumpUntil([&] { return r.guard().open() == 3; }));
  EXPECT_TRUE(r.guard().OnRequest(router_fds[0], "key-a").ok());
  EXPECT_TRUE(r.guard().OnRequest(router_fds[1], "key-a").ok());
  absl::Status third = r.guard().OnRequest(router_fds[2], "key-a");
  EXPECT_EQ(third.code(), absl::StatusCode::kResourceExhausted) << third;
  EXPECT_NE(third.message().find("max_connections_per_client"),
            absl::string_view::npos);
  // A request again on a counted connection is fine.
  EXPECT_TRUE(r.guard().OnRequest(router_fds[0], "key-a").ok());
  EXPECT_EQ(r.guard().stats().closed_client, 1u);
  EXPECT_TRUE(r.PumpUntil([&] { return r.guard().open() == 2; }));
}

}  // namespace
}  // namespace shoal::ipc
