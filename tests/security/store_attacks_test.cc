// Attacks on the store service (docs/security.md, "The store service"),
// against a real `shoal store` process: a client that lies about its pid is
// registered under its real pid (SO_PEERCRED), and the store keeps serving.
#include <zmq.h>

#include <memory>
#include <string>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "ipc/messages.h"
#include "ipc/rpc_channel.h"
#include "tests/testing/store_fixture.h"

namespace shoal {
namespace {

TEST(StoreAttacks, TheClaimedPidIsIgnored) {
  auto store = testing::StoreProcess::Start(uint64_t{32} << 20);
  ASSERT_TRUE(store.ok()) << store.status();
  auto channel = ipc::RpcChannel::Connect((*store)->endpoint());
  ASSERT_TRUE(channel.ok()) << channel.status();
  // No process has this pid (above pid_max): a store that trusted the message
  // could not watch it and refused the client (it would have watched the
  // wrong process had the pid been another live one's).
  auto reply = channel->Call<ipc::StoreConnectReply>(
      ipc::StoreConnectRequest{0x7ffffff0, "liar"}, absl::Seconds(10));
  ASSERT_TRUE(reply.ok()) << reply.status();
  // Registered: the store serves its requests.
  auto stats = channel->Call<wire::StoreStatsReply>(ipc::StoreStatsRequest{},
                                                    absl::Seconds(10));
  EXPECT_TRUE(stats.ok()) << stats.status();
  // A normal client too.
  auto normal = (*store)->Connect("normal");
  ASSERT_TRUE(normal.ok()) << normal.status();
}

}  // namespace
}  // namespace shoal
