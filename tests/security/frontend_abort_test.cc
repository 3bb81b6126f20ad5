// The coordinator never aborts, whatever its frontend's clients do: each test
// reproduces a way libzmq used to abort the node, then checks that the node
// still serves a normal client (docs/security.md).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "coordinator/client.h"
#include "coordinator/discovery.h"
#include "gtest/gtest.h"
#include "ipc/curve.h"
#include "ipc/messages.h"
#include "tests/coordinator/node_fixture.h"
#include "tests/security/node_test_base.h"
#include "tests/security/raw_client.h"

namespace shoal {
namespace {

using shoal::testing::NodeTest;
using shoal::testing::RawClient;
using shoal::testing::RawClientOptions;

int OpenDescriptors(pid_t pid) {
  int n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(
           absl::StrCat("/proc/", pid, "/fd"))) {
    ++n;
  }
  return n;
}

// A plain TCP connection to the node from loopback address 127.0.0.<1 +
// n % 200> (a flood from many addresses: the node caps connections in
// their handshake per address too).
int ConnectRaw(int port, int n) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  sockaddr_in from{};
  from.sin_family = AF_INET;
  from.sin_addr.s_addr =
      htonl(INADDR_LOOPBACK + static_cast<uint32_t>(n % 200));
  (void)bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  (void)connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  return fd;
}

class FrontendAbortTest : public NodeTest {
 protected:
  void StartNodeAsOwner(std::vector<std::string> flags = {}) {
    StartNode(std::move(flags));
    auto keys = ipc::ReadKeyPair(discovery_.client_key_file);
    ASSERT_TRUE(keys.ok()) << keys.status();
    owner_keys_ = *keys;
  }

  // The node serves a client on the owner's ipc:// socket and one over TCP.
  void ExpectServesNormalClients() {
    ExpectServesOwner(/*remote=*/false);
    ExpectServesOwner(/*remote=*/true);
  }

  // Opens 3,000 plain TCP connections to the node's frontend into `fds`,
  // in batches, so that the kernel's accept queue (ZeroMQ listens with a
  // backlog of 100) does not drop the SYNs; then lets the node take them.
  void Flood(std::vector<int>& fds) {
    int port = 0;
    ASSERT_TRUE(absl::SimpleAtoi(
        discovery_.tcp.substr(discovery_.tcp.rfind(':') + 1), &port));
    for (int i = 0; i < 3000; ++i) {
      const int fd = ConnectRaw(port, i);
      ASSERT_GE(fd, 0) << "socket: " << i;
      fds.push_back(fd);
      if (i % 50 == 49) absl::SleepFor(absl::Milliseconds(20));
    }
    absl::SleepFor(absl::Seconds(1));
  }

  // The node is up and answers a status request on the owner's ipc://
  // socket.
  void ExpectAnswersOwnersStatus() {
    ASSERT_TRUE(NodeAlive()) << "the node exited";
    auto client = node_->Connect(/*remote=*/false);
    ASSERT_TRUE(client.ok()) << client.status();
    EXPECT_TRUE((*client)->Status().ok());
  }

  ipc::CurveKeyPair owner_keys_;
};

// A client that queues far more requests than the frontend's receive queue
// holds and then disconnects without reading: libzmq stopped reading its
// connection (the queue was full), saw the reset, and its ZMTP heartbeat
// timer then wrote to the dead connection: "Assertion failed: !_io_error
// (src/stream_engine_base.cpp:331)". The frontend uses no ZMTP heartbeats.
TEST_F(FrontendAbortTest, BurstOfRequestsThenDisconnectDoesNotAbort) {
  StartNodeAsOwner();
  for (int trial = 0; trial < 3; ++trial) {
    RawClientOptions o;
    o.rcvhwm = 1;
    o.sndhwm = 0;
    o.keys = &owner_keys_;
    o.server_key = discovery_.server_key;
    RawClient burst(discovery_.tcp, o);
    ASSERT_TRUE(burst.Call(ipc::StatusRequest{}).ok());  // connected
    for (uint64_t i = 0; i < 30000; ++i) {
      ASSERT_TRUE(burst.Send(100 + i, ipc::StatusRequest{}).ok()) << i;
    }
    absl::SleepFor(absl::Milliseconds(200));
    burst.Close();
    // Longer than the heartbeat interval the frontend used (2 s).
    absl::SleepFor(absl::Milliseconds(2600));
    ASSERT_TRUE(NodeAlive()) << "trial " << trial << ": the node exited";
  }
  ExpectServesNormalClients();
}

// Thousands of plain TCP connections (no ZMTP, no key) used to take every
// descriptor the node had, and the next connection on its ipc:// socket
// aborted it: "Too many open files (src/ipc_listener.cpp:325)". The node
// raises its descriptor limit and caps its TCP connections.
TEST_F(FrontendAbortTest, DescriptorFloodDoesNotAbort) {
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  if (saved.rlim_max < 4096) {
    GTEST_SKIP() << "the hard descriptor limit is " << saved.rlim_max
                 << "; the test needs 4096 to open its connections";
  }
  // The node starts with the soft limit most shells give (1024).
  rlimit low = saved;
  low.rlim_cur = 1024;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  StartNodeAsOwner();
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &saved), 0);
  std::vector<int> fds;
  ASSERT_NO_FATAL_FAILURE(Flood(fds));
  const int held = OpenDescriptors(node_->pid());
  std::cout << "the node holds " << held << " descriptors" << std::endl;
  EXPECT_GT(held, 1024) << "the flood did not reach the old soft limit";
  // Owner clients on the ipc:// socket (and the workers) are served while
  // the flood holds its connections.
  ExpectAnswersOwnersStatus();
  for (int fd : fds) close(fd);
  absl::SleepFor(absl::Milliseconds(500));
  ExpectServesNormalClients();
}

// With a hard limit too low to raise (the node's limit lowered under it with
// prlimit), the node caps its TCP connections at a quarter of the limit and
// holds new ones off at the cap: the flood never takes its last descriptors.
TEST_F(FrontendAbortTest, DescriptorFloodUnderALowHardLimitIsHeldOff) {
  StartNodeAsOwner();
  const rlimit low{1024, 1024};
  ASSERT_EQ(prlimit(node_->pid(), RLIMIT_NOFILE, &low, nullptr), 0);
  std::vector<int> fds;
  ASSERT_NO_FATAL_FAILURE(Flood(fds));
  const int held = OpenDescriptors(node_->pid());
  std::cout << "the node holds " << held << " descriptors" << std::endl;
  EXPECT_LT(held, 1024 - 256);
  ExpectAnswersOwnersStatus();
  for (int fd : fds) close(fd);
  // Held-off SYNs are retried by the kernel for a while; new connections
  // are let in once the flood's have closed.
  absl::SleepFor(absl::Seconds(1));
  ExpectServesNormalClients();
}

}  // namespace
}  // namespace shoal
