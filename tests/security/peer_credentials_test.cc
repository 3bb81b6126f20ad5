// The store's peer identity (docs/security.md, "The store service"): a
// request's pid and uid come with the connection it arrived on, as the kernel
// told ZeroMQ when it accepted it, not from the descriptor number the request
// was read from. A descriptor number is reused as soon as its connection
// closes, so a request still queued from a client that has gone must not be
// credited to the next process that connects (which may get the same
// number): that was the ZMQ_SRCFD weakness.
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/temp_dir.h"
#include "gtest/gtest.h"
#include "ipc/messages.h"
#include "ipc/protocol.h"
#include "ipc/router.h"
#include "ipc/socket.h"

namespace shoal::ipc {
namespace {

TEST(PeerCredentials, ParsesOnlyTheIpcForm) {
  RequestPeer p;
  EXPECT_TRUE(ParsePeerCredentials("localhost:1000:100:4242", &p));
  EXPECT_TRUE(p.has_credentials);
  EXPECT_EQ(p.uid, 1000u);
  EXPECT_EQ(p.gid, 100u);
  EXPECT_EQ(p.pid, 4242);
  for (const char* other :
       {"127.0.0.1", "::1", "fe80::1:2:3", "2001:db8::7:8:9", "localhost",
        "localhost:1:2", "localhost:1:2:x", "localhost:1:2:0",
        "localhost:1:2:-5", "localhost:1:2:3:4", "localhost:::"}) {
    RequestPeer q;
    EXPECT_FALSE(ParsePeerCredentials(other, &q)) << other;
    EXPECT_FALSE(q.has_credentials) << other;
  }
}

// Waits for the ROUTER's monitor to report a closed connection; returns its
// descriptor.
int WaitForDisconnect(Socket& monitor) {
  std::vector<std::string> frames;
  while (true) {
    absl::Status s = monitor.Recv(&frames, absl::Seconds(30));
    if (!s.ok()) return -1;
    if (frames.empty() || frames[0].size() != 6) continue;
    uint16_t event;
    int32_t fd;
    std::memcpy(&event, frames[0].data(), 2);
    std::memcpy(&fd, frames[0].data() + 2, 4);
    if (event == ZMQ_EVENT_DISCONNECTED) return fd;
  }
}

// Client A (a process) sends a request and goes away before the service
// reads it; client B (another) connects and sends one. Each
// request is credited to the process that sent it, even when B's connection
// got A's old descriptor number, where asking the kernel about the
// descriptor (the old way) names B for A's request.
TEST(PeerCredentials, AQueuedRequestKeepsItsSendersIdentity) {
  // In a private folder in /tmp (mkdtemp): a socket path must fit 107
  // bytes, which bazel's TempDir often does not.
  absl::StatusOr<TempDir> dir = TempDir::Create("shoal-peer-test-", "/tmp");
  ASSERT_TRUE(dir.ok()) << dir.status();
  const std::string path = dir->File("router.sock");
  const std::string endpoint = absl::StrCat("ipc://", path);
  auto router = Socket::Create(ZMQ_ROUTER);
  ASSERT_TRUE(router.ok()) << router.status();
  ASSERT_EQ(zmq_socket_monitor(router->raw(), "inproc://peer-test-monitor",
                               ZMQ_EVENT_DISCONNECTED),
            0);
  auto monitor = Socket::Create(ZMQ_PAIR);
  ASSERT_TRUE(monitor.ok());
  // Stops the monitor before its reader closes (libzmq would block on it).
  struct StopMonitor {
    void* router;
    ~StopMonitor() { zmq_socket_monitor(router, nullptr, 0); }
  } stop_monitor{router->raw()};
  ASSERT_TRUE(monitor->Connect("inproc://peer-test-monitor").ok());
  absl::Status bound = router->Bind(endpoint);
  ASSERT_TRUE(bound.ok()) << bound;

  // Each client is its own process: it connects, sends one request and
  // stays until the test writes to its pipe.
  auto start_client = [&](uint64_t request_id, int* release) -> pid_t {
    int fds[2];
    if (pipe(fds) != 0) return -1;
    const pid_t pid = fork();
    if (pid == 0) {
      close(fds[1]);
      auto dealer = Socket::Create(ZMQ_DEALER);
      if (!dealer.ok() || !dealer->Connect(endpoint).ok()) _exit(2);
      auto frame = Encode(request_id, StoreConnectRequest{1, "client"});
      if (!frame.ok() || !dealer->Send(*frame).ok()) _exit(3);
      char c;
      (void)read(fds[0], &c, 1);
      _exit(0);
    }
    close(fds[0]);
    *release = fds[1];
    return pid;
  };
  auto stop_client = [](pid_t pid, int release) {
    close(release);
    int status = 0;
    return waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
           WEXITSTATUS(status) == 0;
  };

  int release_a = -1;
  const pid_t a = start_client(7, &release_a);
  ASSERT_GT(a, 0);
  // A's request waits in the ROUTER, unread; then A goes away.
  auto queued = router->Poll(absl::Seconds(30));
  ASSERT_TRUE(queued.ok() && *queued);
  ASSERT_TRUE(stop_client(a, release_a));
  const int a_fd = WaitForDisconnect(*monitor);
  ASSERT_GE(a_fd, 0);

  // B connects now: its connection gets the lowest free descriptor, often
  // A's old number.
  int release_b = -1;
  const pid_t b = start_client(8, &release_b);
  ASSERT_GT(b, 0);
  struct StopB {
    std::function<void()> stop;
    ~StopB() { stop(); }
  } stop_b{[&] { (void)stop_client(b, release_b); }};

  std::vector<std::pair<uint64_t, RequestPeer>> seen;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (seen.size() < 2 && absl::Now() < deadline) {
    ASSERT_TRUE(router->Poll(absl::Seconds(1)).ok());
    ServeRequestsWithPeer(*router, DecodeLimits{}, 16,
                          [&](const std::string&, const RequestPeer& peer,
                              uint64_t request_id, const Message&) {
                            seen.emplace_back(request_id, peer);
                            return std::nullopt;
                          });
  }
  ASSERT_EQ(seen.size(), 2u);
  for (const auto& [request_id, peer] : seen) {
    SCOPED_TRACE(request_id);
    ASSERT_TRUE(peer.has_credentials);
    EXPECT_EQ(peer.uid, geteuid());
    EXPECT_EQ(peer.pid, request_id == 7 ? a : b);
  }
  const bool a_first = seen[0].first == 7;
  const RequestPeer& from_a = a_first ? seen[0].second : seen[1].second;
  const RequestPeer& from_b = a_first ? seen[1].second : seen[0].second;
  EXPECT_EQ(from_a.fd, a_fd);
  if (from_b.fd == from_a.fd) {
    // The descriptor A's request names now belongs to B's connection: the
    // kernel, asked about it, names B. The request still says A.
    ucred cred = {};
    socklen_t len = sizeof(cred);
    if (getsockopt(from_a.fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
      EXPECT_EQ(cred.pid, b) << "descriptor " << from_a.fd;
      EXPECT_NE(cred.pid, from_a.pid);
    }
  }
  std::printf("A's descriptor %d, B's %d%s\n", from_a.fd, from_b.fd,
              from_a.fd == from_b.fd ? " (reused)" : "");
}

}  // namespace
}  // namespace shoal::ipc
