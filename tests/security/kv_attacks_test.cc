// Attacks on the job's key-value/rendezvous service (docs/security.md, "The
// key-value service"), each against a real KvService on a real socket,
// followed by a check that a normal client is still served.
#include <zmq.h>

#include <memory>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "ipc/curve.h"
#include "ipc/messages.h"
#include "ipc/rpc_channel.h"
#include "ipc/socket.h"
#include "launch/kv_client.h"
#include "launch/kv_service.h"

namespace shoal::launch {
namespace {

class Service {
 public:
  explicit Service(KvServiceOptions o) {
    auto s = KvService::Create(o);
    EXPECT_TRUE(s.ok()) << s.status();
    service_ = *std::move(s);
    thread_ = std::thread([this] { (void)service_->Run(); });
  }
  ~Service() {
    service_->Stop();
    thread_.join();
  }
  KvService& operator*() { return *service_; }
  KvService* operator->() { return service_.get(); }

 private:
  std::unique_ptr<KvService> service_;
  std::thread thread_;
};

std::string Secret() {
  auto keys = ipc::GenerateCurveKeyPair();
  EXPECT_TRUE(keys.ok()) << keys.status();
  return keys->secret_key;
}

std::unique_ptr<KvClient> Client(const std::string& endpoint,
                                 const std::string& secret,
                                 absl::Duration rpc = absl::Seconds(20)) {
  KvClientOptions o;
  o.secret = secret;
  o.rpc_timeout = rpc;
  auto c = KvClient::Connect(endpoint, o);
  EXPECT_TRUE(c.ok()) << c.status();
  return *std::move(c);
}

// Sends `request` once from a raw DEALER (CURVE with the key pair of
// `secret` when it is not empty) without ever blocking, and says whether any
// answer came within a second.
bool StrangerIsAnswered(const std::string& endpoint, const std::string& secret,
                        ipc::Message request) {
  auto socket = ipc::Socket::Create(ZMQ_DEALER);
  EXPECT_TRUE(socket.ok());
  if (!secret.empty()) {
    auto keys = KvKeyPairFromSecret(secret);
    EXPECT_TRUE(keys.ok());
    EXPECT_TRUE(
        ipc::ConfigureCurveClient(*socket, keys->public_key, *keys).ok());
  }
  EXPECT_TRUE(socket->Connect(endpoint).ok());
  auto frame = ipc::Encode(1, std::move(request));
  EXPECT_TRUE(frame.ok());
  (void)socket->Send(*frame, /*dontwait=*/true);
  auto ready = socket->Poll(absl::Seconds(1));
  return ready.ok() && *ready;
}

TEST(KvAttacks, NonLoopbackBindWithoutSecretIsRefused) {
  KvServiceOptions o;
  o.endpoint = "tcp://0.0.0.0:*";
  auto s = KvService::Create(o);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition)
      << s.status();
  o.curve_secret_key = "not a key";
  EXPECT_EQ(KvService::Create(o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A stranger without the secret (plain, or CURVE with a guessed server key)
// gets no answer: it can neither read the NCCL id nor stop the job. The
// job's own client is served throughout.
TEST(KvAttacks, ClientsWithoutTheSecretGetNothing) {
  const std::string secret = Secret();
  KvServiceOptions o;
  o.endpoint = "tcp://0.0.0.0:*";
  o.curve_secret_key = secret;
  Service service(o);
  const std::string endpoint = absl::StrCat(
      "tcp://127.0.0.1:",
      service->endpoint().substr(service->endpoint().rfind(':') + 1));
  auto job = Client(endpoint, secret);
  ASSERT_TRUE(job->Set("nccl/id", "secret-id").ok());

  // Each stranger sends one request and waits for any answer.
  EXPECT_FALSE(
      StrangerIsAnswered(endpoint, "", ipc::KvGetRequest{"nccl/id", 0}));
  EXPECT_FALSE(StrangerIsAnswered(
      endpoint, "", ipc::KvSetRequest{"__shoal/launch/g0/stop", "1 x"}));
  EXPECT_FALSE(
      StrangerIsAnswered(endpoint, Secret(), ipc::KvGetRequest{"nccl/id", 0}));
  // The control: the same probe with the secret is answered.
  EXPECT_TRUE(
      StrangerIsAnswered(endpoint, secret, ipc::KvGetRequest{"nccl/id", 0}));

  EXPECT_EQ(*job->Get("nccl/id"), "secret-id");
  EXPECT_FALSE(job->Get("__shoal/launch/g0/stop").ok());
}

TEST(KvAttacks, TheTotalBudgetIsEnforcedAndNamed) {
  KvServiceOptions o;
  o.max_total_bytes = 64 << 10;
  Service service(o);
  auto kv = Client(service->endpoint(), "");
  const std::string big(16 << 10, 'x');
  absl::Status last;
  int stored = 0;
  for (int i = 0; i < 16 && last.ok(); ++i) {
    last = kv->Set(absl::StrCat("k", i), big);
    if (last.ok()) ++stored;
  }
  EXPECT_EQ(stored, 3);
  EXPECT_EQ(last.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(last.message(), "max_total_bytes")) << last;
  // Waits name keys, which count too.
  const std::string long_key(60 << 10, 'w');
  EXPECT_EQ(kv->Get(long_key, absl::Seconds(1)).status().code(),
            absl::StatusCode::kResourceExhausted);
  // Deleting gives the bytes back; the service still serves.
  ASSERT_TRUE(kv->Delete("k0").ok());
  EXPECT_TRUE(kv->Set("small", "v").ok());
  EXPECT_EQ(*kv->Get("small"), "v");
}

TEST(KvAttacks, HugeWireTimeoutsAreRefused) {
  KvServiceOptions o;
  Service service(o);
  ipc::RpcChannelOptions co;
  auto ch = ipc::RpcChannel::Connect(service->endpoint(), co);
  ASSERT_TRUE(ch.ok());
  const int64_t huge = int64_t{1} << 62;
  EXPECT_EQ(ch->Call<ipc::KvValue>(ipc::KvGetRequest{"absent", huge},
                                   absl::Seconds(20))
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  ipc::KvWaitRequest w;
  w.keys = {"absent"};
  w.timeout_ms = huge;
  EXPECT_EQ(ch->Call<ipc::OkReply>(w, absl::Seconds(20)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ch->Call<ipc::OkReply>(ipc::BarrierRequest{"b", 2, huge},
                                   absl::Seconds(20))
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  auto kv = Client(service->endpoint(), "");
  EXPECT_TRUE(kv->Set("a", "b").ok());
}

// Waits with no timeout from clients that go away are dropped with them: a
// client that connects, waits forever and disconnects, many times over, does
// not use up the budget.
TEST(KvAttacks, WaitsOfAClientThatGoesAreDropped) {
  KvServiceOptions o;
  o.max_total_bytes = 64 << 10;
  Service service(o);
  const std::string key(8 << 10, 'k');
  for (int i = 0; i < 40; ++i) {
    // Waits forever on the service's side; the client gives up and goes.
    ipc::RpcChannelOptions co;
    auto ch = ipc::RpcChannel::Connect(service->endpoint(), co);
    ASSERT_TRUE(ch.ok());
    EXPECT_FALSE(ch->Call<ipc::KvValue>(ipc::KvGetRequest{key, -1},
                                        absl::Milliseconds(20))
                     .ok());
    EXPECT_FALSE(ch->Call<ipc::OkReply>(ipc::BarrierRequest{key, 1000, -1},
                                        absl::Milliseconds(20))
                     .ok());
  }
  // 40 × 16 KiB of waits would exceed 64 KiB had they stayed. Their drops
  // arrive asynchronously: retry until the budget is free again.
  auto kv = Client(service->endpoint(), "");
  const std::string value(40 << 10, 'v');
  absl::Status s;
  for (int i = 0; i < 100; ++i) {
    s = kv->Set("v", value);
    if (s.ok()) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_TRUE(s.ok()) << s;
  // A barrier still opens for a full set of live participants.
  std::thread other([&] {
    EXPECT_TRUE(Client(service->endpoint(), "")
                    ->Barrier("live", 2, absl::Seconds(20))
                    .ok());
  });
  EXPECT_TRUE(kv->Barrier("live", 2, absl::Seconds(20)).ok());
  other.join();
}

}  // namespace
}  // namespace shoal::launch
