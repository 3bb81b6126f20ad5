// A status asked for by a client other than the owner reads the store's
// figures at most once per --status-store-refresh-ms (docs/security.md,
// "Quotas"): each read scans the store's object table under the store's
// lock, so a guest sending status requests without pause held up every
// process's reads of the store. The owner's status reads them afresh.
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "ipc/curve.h"
#include "ipc/messages.h"
#include "ipc/tensor_meta.h"
#include "tests/security/node_test_base.h"
#include "tests/security/raw_client.h"

namespace shoal {
namespace {

using shoal::testing::NodeTest;
using shoal::testing::RawClient;
using shoal::testing::RawClientOptions;
using shoal::testing::WriteClientKeys;

class StatusRefreshTest : public NodeTest {
 protected:
  // A node admitting one guest key, with the given refresh.
  void StartNode(int64_t refresh_ms) {
    auto g = ipc::GenerateCurveKeyPair();
    ASSERT_TRUE(g.ok()) << g.status();
    guest_keys_ = *g;
    NodeTest::StartNode(
        {"--client-keys",
         WriteClientKeys(absl::StrCat("guest-", getpid(), ".txt"),
                         {&guest_keys_}),
         "--status-store-refresh-ms", absl::StrCat(refresh_ms)});
    RawClientOptions o;
    o.keys = &guest_keys_;
    o.server_key = discovery_.server_key;
    guest_ = std::make_unique<RawClient>(discovery_.tcp, o);
  }

  // The store's object count in a status the guest asks for.
  uint64_t GuestSeesObjects() {
    auto r = guest_->Call(ipc::StatusRequest{});
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return ~0ull;
    return std::get<ipc::NodeStatus>(*r).store().objects();
  }

  // The store's object count in the owner's status.
  uint64_t OwnerSeesObjects() {
    auto owner = node_->Connect(/*remote=*/false);
    EXPECT_TRUE(owner.ok()) << owner.status();
    if (!owner.ok()) return ~0ull;
    auto st = (*owner)->Status();
    EXPECT_TRUE(st.ok()) << st.status();
    return st.ok() ? st->store().objects() : ~0ull;
  }

  // The guest puts one object into the store.
  void GuestPuts() {
    ipc::PutObjectRequest put;
    put.tensor.meta = TensorMeta::Bytes(4096);
    put.tensor.data.assign(4096, 'x');
    auto r = guest_->Call(put);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(std::holds_alternative<ipc::PutObjectReply>(*r))
        << "the put was refused";
  }

  ipc::CurveKeyPair guest_keys_;
  std::unique_ptr<RawClient> guest_;
};

// With a refresh longer than the test, the guest's statuses all show the
// store as the first one read it; the owner's shows it as it is.
TEST_F(StatusRefreshTest, AGuestsStatusReadsTheStoreAtMostOncePerRefresh) {
  ASSERT_NO_FATAL_FAILURE(StartNode(/*refresh_ms=*/3600 * 1000));
  const uint64_t before = GuestSeesObjects();
  ASSERT_NO_FATAL_FAILURE(GuestPuts());
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(GuestSeesObjects(), before)
        << "the guest's status " << i << " read the store again";
  }
  EXPECT_EQ(OwnerSeesObjects(), before + 1);
}

// With a refresh of 0 every status reads the store, the guest's included.
TEST_F(StatusRefreshTest, ARefreshOfZeroReadsTheStoreForEveryone) {
  ASSERT_NO_FATAL_FAILURE(StartNode(/*refresh_ms=*/0));
  const uint64_t before = GuestSeesObjects();
  ASSERT_NO_FATAL_FAILURE(GuestPuts());
  EXPECT_EQ(GuestSeesObjects(), before + 1);
  EXPECT_EQ(OwnerSeesObjects(), before + 1);
}

}  // namespace
}  // namespace shoal
