// A client whose CURVE handshake fails gets its answer within its timeout,
// call after call (docs/security.md): a refused key is PermissionDenied as
// soon as the refusal arrives, a wrong server key is Unavailable saying that
// no handshake completed. It used to hang: ZeroMQ drops the connection of a
// refused DEALER for good, and a send on a DEALER with no connection blocks.
// Against the coordinator's frontend (a real node) and the KV service.
#include <unistd.h>

#include <memory>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "coordinator/client.h"
#include "coordinator/discovery.h"
#include "gtest/gtest.h"
#include "ipc/curve.h"
#include "ipc/messages.h"
#include "ipc/rpc_channel.h"
#include "launch/kv_client.h"
#include "launch/kv_service.h"
#include "tests/coordinator/node_fixture.h"
#include "tests/security/node_test_base.h"

namespace shoal {
namespace {

using shoal::testing::NodeTest;

constexpr absl::Duration kTimeout = absl::Seconds(2);
// Generous: the point is "returns", not "returns fast", on 2 busy cores.
const absl::Duration kReturnsWithin = absl::Seconds(10);

ipc::CurveKeyPair NewKeys() {
  auto keys = ipc::GenerateCurveKeyPair();
  EXPECT_TRUE(keys.ok()) << keys.status();
  return *keys;
}

// Three calls on one channel each return within the timeout with `code`, the
// message containing `says`.
template <typename Reply>
void ExpectEachCallReturns(ipc::RpcChannel& channel,
                           const ipc::Message& request, absl::StatusCode code,
                           absl::string_view says) {
  for (int call = 0; call < 3; ++call) {
    SCOPED_TRACE(call);
    const absl::Time start = absl::Now();
    absl::StatusOr<Reply> r = channel.Call<Reply>(request, kTimeout);
    EXPECT_LT(absl::Now() - start, kReturnsWithin);
    EXPECT_EQ(r.status().code(), code) << r.status();
    EXPECT_TRUE(absl::StrContains(r.status().message(), says)) << r.status();
  }
}

class FrontendCurveTest : public NodeTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(StartNode());
    ASSERT_FALSE(discovery_.server_key.empty());
  }

  // coordinator::Client::Connect over TCP with these keys returns `code`
  // within the timeout.
  void ExpectClientConnectReturns(const std::string& server_key,
                                  const std::string& key_file,
                                  absl::StatusCode code) {
    coordinator::ClientOptions o;
    o.endpoint = discovery_.tcp;
    o.job_id = node_->job_id();
    o.force_remote = true;
    o.server_key = server_key;
    o.client_key_file = key_file;
    o.rpc_timeout = kTimeout;
    const absl::Time start = absl::Now();
    auto client = coordinator::Client::Connect(o);
    EXPECT_LT(absl::Now() - start, kReturnsWithin);
    EXPECT_EQ(client.status().code(), code) << client.status();
  }
};

// A key the node never admitted: its ZAP handler refuses it, and every call
// says so at once.
TEST_F(FrontendCurveTest, AStrangersKeyIsRefusedWithinTheTimeout) {
  ipc::RpcChannelOptions o;
  o.server_key = discovery_.server_key;
  o.client_keys = NewKeys();
  o.peer = "the coordinator";
  auto channel = ipc::RpcChannel::Connect(discovery_.tcp, o);
  ASSERT_TRUE(channel.ok()) << channel.status();
  ExpectEachCallReturns<ipc::NodeStatus>(*channel, ipc::StatusRequest{},
                                         absl::StatusCode::kPermissionDenied,
                                         "refused this client's CURVE key");
  ExpectEachCallReturns<ipc::OkReply>(*channel, ipc::StopRequest{},
                                      absl::StatusCode::kPermissionDenied,
                                      "refused");
  const std::string key_file =
      absl::StrCat(::testing::TempDir(), "/stranger-", getpid(), ".key");
  ASSERT_TRUE(ipc::WriteKeyPair(key_file, NewKeys()).ok());
  ExpectClientConnectReturns(discovery_.server_key, key_file,
                             absl::StatusCode::kPermissionDenied);
  ExpectServesOwner();
}

// The owner's own key, but the wrong server key: no handshake completes
// (the server cannot read our hello), so every call is Unavailable in time.
TEST_F(FrontendCurveTest, AWrongServerKeyIsUnavailableWithinTheTimeout) {
  auto owner = ipc::ReadKeyPair(discovery_.client_key_file);
  ASSERT_TRUE(owner.ok()) << owner.status();
  ipc::RpcChannelOptions o;
  o.server_key = NewKeys().public_key;
  o.client_keys = *owner;
  o.peer = "the coordinator";
  auto channel = ipc::RpcChannel::Connect(discovery_.tcp, o);
  ASSERT_TRUE(channel.ok()) << channel.status();
  ExpectEachCallReturns<ipc::NodeStatus>(*channel, ipc::StatusRequest{},
                                         absl::StatusCode::kUnavailable,
                                         "CURVE handshake");
  ExpectClientConnectReturns(NewKeys().public_key, discovery_.client_key_file,
                             absl::StatusCode::kUnavailable);
  ExpectServesOwner();
}

// The KV service: its server key is derived from the job secret, so a client
// with the wrong secret has both keys wrong. Each call is Unavailable within
// the timeout; the job's client is served throughout.
TEST(KvCurveTest, AWrongSecretIsUnavailableWithinTheTimeout) {
  const std::string secret = NewKeys().secret_key;
  launch::KvServiceOptions so;
  so.endpoint = "tcp://127.0.0.1:*";
  so.curve_secret_key = secret;
  auto service = launch::KvService::Create(so);
  ASSERT_TRUE(service.ok()) << service.status();
  std::thread runner([&] { (void)(*service)->Run(); });
  const std::string endpoint = (*service)->endpoint();

  launch::KvClientOptions job_options;
  job_options.secret = secret;
  auto job = launch::KvClient::Connect(endpoint, job_options);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Set("nccl/id", "x").ok());

  launch::KvClientOptions wrong;
  wrong.secret = NewKeys().secret_key;
  wrong.rpc_timeout = kTimeout;
  auto stranger = launch::KvClient::Connect(endpoint, wrong);
  ASSERT_TRUE(stranger.ok()) << stranger.status();
  for (int call = 0; call < 3; ++call) {
    SCOPED_TRACE(call);
    const absl::Time start = absl::Now();
    auto got = (*stranger)->Get("nccl/id");
    EXPECT_LT(absl::Now() - start, kReturnsWithin);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable)
        << got.status();
    EXPECT_TRUE(absl::StrContains(got.status().message(), "CURVE"))
        << got.status();
    EXPECT_EQ(*(*job)->Get("nccl/id"), "x");
  }
  (*service)->Stop();
  runner.join();
}

}  // namespace
}  // namespace shoal
