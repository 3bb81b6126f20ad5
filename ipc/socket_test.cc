#include "ipc/socket.h"

#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "gtest/gtest.h"

namespace shoal::ipc {
namespace {

TEST(SocketTest, DealerRouterRoundTripOverTcp) {
  auto router = Socket::Create(ZMQ_ROUTER);
  ASSERT_TRUE(router.ok());
  ASSERT_TRUE(router->Bind("tcp://127.0.0.1:*").ok());
  auto endpoint = router->LastEndpoint();
  ASSERT_TRUE(endpoint.ok());
  auto dealer = Socket::Create(ZMQ_DEALER);
  ASSERT_TRUE(dealer->Connect(*endpoint).ok());
  ASSERT_TRUE(dealer->Send("hello").ok());
  std::vector<std::string> frames;
  ASSERT_TRUE(router->Recv(&frames, absl::Seconds(5)).ok());
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(frames[1], "hello");
  absl::string_view reply[] = {frames[0], "world"};
  ASSERT_TRUE(router->Send(reply).ok());
  ASSERT_TRUE(dealer->Recv(&frames, absl::Seconds(5)).ok());
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0], "world");
}

TEST(SocketTest, RouterSendToUnknownPeerFailsInsteadOfDropping) {
  auto router = Socket::Create(ZMQ_ROUTER);
  ASSERT_TRUE(router->Bind("tcp://127.0.0.1:*").ok());
  absl::string_view msg[] = {"nobody", "lost?"};
  EXPECT_EQ(router->Send(msg).code(), absl::StatusCode::kUnavailable);
}

TEST(SocketTest, RecvTimesOut) {
  auto dealer = Socket::Create(ZMQ_DEALER);
  ASSERT_TRUE(dealer->Connect("tcp://127.0.0.1:1").ok());
  std::vector<std::string> frames;
  EXPECT_EQ(dealer->Recv(&frames, absl::Milliseconds(20)).code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST(SocketTest, ForkedChildGetsItsOwnContext) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP()
      << "ThreadSanitizer cannot run a child forked from a threaded process "
         "(the hazard this test checks); covered by the normal and asan runs";
#endif
  void* parent_ctx = ProcessContext();
  auto router = Socket::Create(ZMQ_ROUTER);
  ASSERT_TRUE(router->Bind("tcp://127.0.0.1:*").ok());
  std::string endpoint = *router->LastEndpoint();
  pid_t pid = fork();
  if (pid == 0) {
    if (ProcessContext() == parent_ctx) _exit(2);
    auto dealer = Socket::Create(ZMQ_DEALER);
    if (!dealer.ok() || !dealer->Connect(endpoint).ok()) _exit(3);
    if (!dealer->Send("from child").ok()) _exit(4);
    std::vector<std::string> frames;
    if (!dealer->Recv(&frames, absl::Seconds(5)).ok()) _exit(5);
    _exit(frames.size() == 1 && frames[0] == "ack" ? 0 : 6);
  }
  std::vector<std::string> frames;
  ASSERT_TRUE(router->Recv(&frames, absl::Seconds(5)).ok());
  EXPECT_EQ(frames[1], "from child");
  absl::string_view reply[] = {frames[0], "ack"};
  ASSERT_TRUE(router->Send(reply).ok());
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(SocketTest, IoThreadsAreSetBeforeTheContextStarts) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "ThreadSanitizer cannot run a child forked from a threaded "
                  "process; covered by the normal and asan runs";
#endif
  EXPECT_TRUE(absl::IsInvalidArgument(SetProcessIoThreads(0)));
  (void)ProcessContext();
  EXPECT_TRUE(absl::IsFailedPrecondition(SetProcessIoThreads(2)));
  // A fresh process (a forked child has no context of its own yet).
  pid_t pid = fork();
  if (pid == 0) {
    if (!SetProcessIoThreads(3).ok()) _exit(2);
    auto dealer = Socket::Create(ZMQ_DEALER);
    if (!dealer.ok()) _exit(3);
    if (zmq_ctx_get(ProcessContext(), ZMQ_IO_THREADS) != 3) _exit(4);
    if (!absl::IsFailedPrecondition(SetProcessIoThreads(2))) _exit(5);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace shoal::ipc
