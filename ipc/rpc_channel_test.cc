// RpcChannel against a ROUTER served by ipc::ServeRequests: typed replies, the
// one error for a reply of another type, and errors that name the peer.
#include "ipc/rpc_channel.h"

#include <zmq.h>

#include <atomic>
#include <optional>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "ipc/router.h"

namespace shoal::ipc {
namespace {

// A service on tcp://127.0.0.1:* that answers every request with OkReply,
// except a StoreStatsRequest (StoreStats) and a StopRequest (no answer).
class OkServer {
 public:
  OkServer() {
    auto socket = Socket::Create(ZMQ_ROUTER);
    EXPECT_TRUE(socket.ok()) << socket.status();
    EXPECT_TRUE(socket->Bind("tcp://127.0.0.1:*").ok());
    endpoint_ = *socket->LastEndpoint();
    thread_ = std::thread([this, s = std::move(*socket)]() mutable {
      while (!stop_.load()) {
        absl::StatusOr<bool> ready = s.Poll(absl::Milliseconds(20));
        if (!ready.ok()) break;
        if (!*ready) continue;
        ServeRequests(s, DecodeLimits(), 16,
                      [](const std::string&, uint64_t,
                         const Message& body) -> std::optional<Message> {
                        if (std::holds_alternative<StopRequest>(body))
                          return std::nullopt;
                        if (std::holds_alternative<StoreStatsRequest>(body)) {
                          StoreStats st;
                          st.set_objects(7);
                          return st;
                        }
                        return OkReply{};
                      });
      }
    });
  }
  ~OkServer() {
    stop_.store(true);
    thread_.join();
  }
  const std::string& endpoint() const { return endpoint_; }

 private:
  std::string endpoint_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// A channel to `server` whose errors call it "the test service".
absl::StatusOr<RpcChannel> ConnectTo(const OkServer& server) {
  RpcChannelOptions o;
  o.peer = "the test service";
  return RpcChannel::Connect(server.endpoint(), o);
}

TEST(RpcChannelTest, TypedCalls) {
  OkServer server;
  absl::StatusOr<RpcChannel> c = ConnectTo(server);
  ASSERT_TRUE(c.ok()) << c.status();

  absl::StatusOr<StoreStats> st =
      c->Call<StoreStats>(StoreStatsRequest{}, absl::Seconds(10));
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->objects(), 7u);
  EXPECT_TRUE(
      c->Call<OkReply>(DeleteRequest{ObjectId::Random()}, absl::Seconds(10))
          .ok());

  // The service answers delete with ok: asking for another reply type is the
  // one Internal error, naming what was asked, expected and received.
  absl::StatusOr<ContainsReply> wrong = c->Call<ContainsReply>(
      DeleteRequest{ObjectId::Random()}, absl::Seconds(10));
  ASSERT_EQ(wrong.status().code(), absl::StatusCode::kInternal)
      << wrong.status();
  const std::string message(wrong.status().message());
  EXPECT_NE(message.find("the test service at " + server.endpoint()),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("answered delete with ok instead of contains_reply"),
            std::string::npos)
      << message;

  // The channel still works after a mismatch.
  EXPECT_TRUE(c->Call<StoreStats>(StoreStatsRequest{}, absl::Seconds(10)).ok());
}

TEST(RpcChannelTest, NoAnswerIsUnavailableNamingThePeer) {
  OkServer server;
  absl::StatusOr<RpcChannel> c = ConnectTo(server);
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<OkReply> r =
      c->Call<OkReply>(StopRequest{}, absl::Milliseconds(200));
  ASSERT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
  EXPECT_NE(r.status().message().find("the test service at "),
            std::string::npos)
      << r.status();
  EXPECT_NE(r.status().message().find("did not answer within 200ms"),
            std::string::npos)
      << r.status();
}

}  // namespace
}  // namespace shoal::ipc
