// Store accounts with real processes: a `shoal store` process, clients in this
// test process, and a helper process killed while it holds an account's
// unsealed object. What is checked is what an account is charged, from Create
// until the object is freed (deleted and unreferenced, evicted, aborted, or
// aborted because its creator died), whoever holds it meanwhile; and that a
// create the account's limit refuses allocates and evicts nothing.
#include <signal.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/subprocess.h"
#include "gtest/gtest.h"
#include "tests/testing/store_fixture.h"
#include "tests/testing/test_env.h"

namespace shoal {
namespace {

using shoal::testing::StoreProcess;
using shoal::testing::WaitUntil;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint32_t kAccount = 7;

absl::StatusOr<Subprocess> StartHelper(std::vector<std::string> args) {
  args.insert(args.begin(),
              shoal::testing::RunfilePath("tests/shm/store_helper"));
  SubprocessOptions o;
  o.pipe_stdin = true;
  o.pipe_stdout = true;
  o.parent_death_signal = SIGKILL;
  return Subprocess::Start(args, o);
}

shm::CreateOptions In(uint32_t account) { return shm::CreateOptions{account}; }

class StoreAccountsTest : public ::testing::Test {
 protected:
  void SetUp() override { StartStore(64 * kMiB); }

  void StartStore(uint64_t bytes, std::vector<std::string> flags = {}) {
    client_.reset();
    auto store = StoreProcess::Start(bytes, std::move(flags));
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    auto client = store_->Connect();
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }

  shm::StoreStats Stats() {
    auto s = client_->Stats();
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *s : shm::StoreStats{};
  }

  uint64_t Usage(uint32_t account = kAccount) {
    auto u = client_->AccountUsage(account);
    EXPECT_TRUE(u.ok()) << u.status();
    return u.ok() ? *u : ~uint64_t{0};
  }

  // Creates, writes and seals `bytes` with `account`; the caller holds it.
  absl::Status PutIn(uint32_t account, const ObjectId& id, uint64_t bytes) {
    std::vector<uint8_t> data(bytes, 3);
    return client_->Put(id, TensorMeta::Bytes(static_cast<int64_t>(bytes)),
                        data.data(), In(account));
  }

  std::unique_ptr<StoreProcess> store_;
  std::unique_ptr<shm::StoreClient> client_;
};

TEST_F(StoreAccountsTest, ChargedFromCreateUntilDeletedAndUnreferenced) {
  ASSERT_TRUE(client_->SetAccountLimit(kAccount, 8 * kMiB).ok());
  EXPECT_EQ(Usage(), 0u);
  ObjectId a = ObjectId::Random(), b = ObjectId::Random();
  auto buf = client_->CreateBytes(a, 4 * kMiB, In(kAccount));
  ASSERT_TRUE(buf.ok()) << buf.status();
  EXPECT_EQ(Usage(), 4 * kMiB);  // unsealed: charged already
  ASSERT_TRUE(client_->Seal(a).ok());
  EXPECT_EQ(Usage(), 4 * kMiB);
  ASSERT_TRUE(PutIn(kAccount, b, 4 * kMiB - 100).ok());
  EXPECT_EQ(Usage(), 8 * kMiB - 64);  // reserved bytes: rounded up to 64

  // Over the limit: refused, naming the account, its limit and what it
  // holds; nothing is allocated.
  const shm::StoreStats before = Stats();
  ObjectId c = ObjectId::Random();
  auto refused = client_->CreateBytes(c, 128, In(kAccount));
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(refused.status())) << refused.status();
  EXPECT_TRUE(shm::IsAccountLimitError(refused.status())) << refused.status();
  EXPECT_EQ(refused.status().message(),
            absl::StrCat("store account 7 holds ", 8 * kMiB - 64,
                         " bytes in 2 objects; 128 more would exceed its "
                         "limit of 8388608 bytes"));
  EXPECT_EQ(Stats().used_bytes(), before.used_bytes());
  EXPECT_EQ(Stats().objects(), before.objects());
  EXPECT_FALSE(*client_->Contains(c));
  // Exactly up to the limit fits.
  ASSERT_TRUE(PutIn(kAccount, c, 64).ok());
  EXPECT_EQ(Usage(), 8 * kMiB);

  // Deleted while referenced: charged until the last reference goes.
  ASSERT_TRUE(client_->Delete(a).ok());
  EXPECT_EQ(Usage(), 8 * kMiB);
  ASSERT_TRUE(client_->Release(a).ok());
  EXPECT_TRUE(WaitUntil([&] { return Usage() == 4 * kMiB; }, absl::Seconds(5)));
  // Released but not deleted: still charged (it lives on, evictable).
  ASSERT_TRUE(client_->Release(b).ok());
  EXPECT_EQ(Usage(), 4 * kMiB);
  ASSERT_TRUE(client_->Delete(b).ok());
  EXPECT_EQ(Usage(), 64u);
  ASSERT_TRUE(client_->Release(c).ok());
  ASSERT_TRUE(client_->Delete(c).ok());
  EXPECT_EQ(Usage(), 0u);
}

TEST_F(StoreAccountsTest, AbortUnchargesAndAccountsAreSeparate) {
  ASSERT_TRUE(client_->SetAccountLimit(kAccount, 4 * kMiB).ok());
  ASSERT_TRUE(client_->SetAccountLimit(8, 4 * kMiB).ok());
  ObjectId a = ObjectId::Random();
  ASSERT_TRUE(client_->CreateBytes(a, 4 * kMiB, In(kAccount)).ok());
  EXPECT_TRUE(shm::IsAccountLimitError(
      client_->CreateBytes(ObjectId::Random(), 1, In(kAccount)).status()));
  // Another account, and no account, are not affected.
  ObjectId b = ObjectId::Random(), c = ObjectId::Random();
  ASSERT_TRUE(PutIn(8, b, 4 * kMiB).ok());
  ASSERT_TRUE(PutIn(0, c, 16 * kMiB).ok());
  EXPECT_EQ(Usage(8), 4 * kMiB);
  EXPECT_EQ(Usage(kAccount), 4 * kMiB);
  ASSERT_TRUE(client_->Abort(a).ok());
  EXPECT_EQ(Usage(kAccount), 0u);
  ASSERT_TRUE(client_->CreateBytes(a, 4 * kMiB, In(kAccount)).ok());
  EXPECT_EQ(Usage(kAccount), 4 * kMiB);
}

TEST_F(StoreAccountsTest, ARefusedCreateEvictsNothing) {
  StartStore(16 * kMiB, {"--max-objects", "64", "--max-clients", "8",
                         "--prefault-ahead", "0"});
  const uint64_t capacity = Stats().capacity_bytes();
  // The arena full of sealed objects nobody references (evictable).
  const uint64_t chunk = capacity / 4;
  std::vector<ObjectId> ids(4);
  for (ObjectId& id : ids) {
    id = ObjectId::Random();
    ASSERT_TRUE(PutIn(0, id, chunk).ok());
    ASSERT_TRUE(client_->Release(id).ok());
  }
  ASSERT_TRUE(client_->SetAccountLimit(kAccount, chunk / 2).ok());
  absl::Status s = PutIn(kAccount, ObjectId::Random(), chunk);
  EXPECT_TRUE(shm::IsAccountLimitError(s)) << s;
  EXPECT_EQ(Stats().evictions(), 0u);
  for (const ObjectId& id : ids) EXPECT_TRUE(*client_->Contains(id));
  // One the account allows evicts as usual, and is charged.
  ASSERT_TRUE(PutIn(kAccount, ObjectId::Random(), chunk / 4).ok());
  EXPECT_EQ(Stats().evictions(), 1u);
  EXPECT_EQ(Usage(), chunk / 4);
}

TEST_F(StoreAccountsTest, EvictionUncharges) {
  StartStore(16 * kMiB, {"--max-objects", "64", "--max-clients", "8",
                         "--prefault-ahead", "0"});
  const uint64_t capacity = Stats().capacity_bytes();
  const uint64_t chunk = capacity / 4;
  ASSERT_TRUE(client_->SetAccountLimit(kAccount, 2 * chunk).ok());
  ObjectId a = ObjectId::Random();
  ASSERT_TRUE(PutIn(kAccount, a, chunk).ok());
  ASSERT_TRUE(client_->Release(a).ok());  // sealed, unreferenced: evictable
  EXPECT_EQ(Usage(), chunk);
  // Four more chunks without an account: the oldest (a) is evicted.
  for (int i = 0; i < 4; ++i) {
    ObjectId id = ObjectId::Random();
    ASSERT_TRUE(PutIn(0, id, chunk).ok());
    ASSERT_TRUE(client_->Release(id).ok());
  }
  EXPECT_FALSE(*client_->Contains(a));
  EXPECT_GE(Stats().evictions(), 1u);
  EXPECT_EQ(Usage(), 0u);
}

TEST_F(StoreAccountsTest, TransferKeepsTheChargeWithTheObject) {
  ASSERT_TRUE(client_->SetAccountLimit(kAccount, 8 * kMiB).ok());
  auto producer = store_->Connect("producer");
  ASSERT_TRUE(producer.ok()) << producer.status();
  ObjectId id = ObjectId::Random();
  ASSERT_TRUE(
      (*producer)->CreateBytes(id, 4 * kMiB, In(kAccount)).status().ok());
  ASSERT_TRUE((*producer)->Seal(id).ok());
  ASSERT_TRUE((*producer)->Transfer(id, client_->client_slot()).ok());
  EXPECT_TRUE(*client_->Created(id));
  producer->reset();  // the creator leaves: the object stays, and its charge
  EXPECT_EQ(Usage(), 4 * kMiB);
  ASSERT_TRUE(client_->Delete(id).ok());
  EXPECT_EQ(Usage(), 4 * kMiB);  // still referenced
  ASSERT_TRUE(client_->Release(id).ok());
  EXPECT_TRUE(WaitUntil([&] { return Usage() == 0; }, absl::Seconds(5)));
}

// A crashed creator's unsealed object is aborted by the store and uncharged;
// a create right after the crash (a retry) is not refused for it.
TEST_F(StoreAccountsTest, ADeadClientsUnsealedObjectIsUncharged) {
  ASSERT_TRUE(client_->SetAccountLimit(kAccount, 8 * kMiB).ok());
  ObjectId id = ObjectId::Random();
  auto creator = StartHelper({"create", store_->endpoint(), id.ToHex(),
                              absl::StrCat(8 * kMiB), absl::StrCat(kAccount)});
  ASSERT_TRUE(creator.ok()) << creator.status();
  ASSERT_EQ(*creator->ReadLine(absl::Seconds(20)), "created");
  EXPECT_EQ(Usage(), 8 * kMiB);
  EXPECT_TRUE(shm::IsAccountLimitError(
      client_->CreateBytes(ObjectId::Random(), 1, In(kAccount)).status()));
  creator->Signal(SIGKILL);
  ASSERT_TRUE(creator->Wait(absl::Seconds(10)).ok());
  // At once, without waiting for the store to notice.
  ObjectId retry = ObjectId::Random();
  auto again = client_->CreateBytes(retry, 8 * kMiB, In(kAccount));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(Usage(), 8 * kMiB);
  EXPECT_FALSE(*client_->Contains(id));
  ASSERT_TRUE(client_->Abort(retry).ok());
  EXPECT_EQ(Usage(), 0u);
}

TEST_F(StoreAccountsTest, LimitsUnknownAccountsAndAccountZero) {
  // No such account: a create with it is refused, and its usage unknown.
  auto unknown = client_->CreateBytes(ObjectId::Random(), 1, In(9));
  EXPECT_TRUE(absl::IsFailedPrecondition(unknown.status())) << unknown.status();
  EXPECT_TRUE(absl::IsNotFound(client_->AccountUsage(9).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(client_->SetAccountLimit(0, kMiB)));
  EXPECT_TRUE(absl::IsInvalidArgument(client_->AccountUsage(0).status()));
  EXPECT_TRUE(client_->SetAccountLimit(9, 0).ok());  // nothing to remove

  // A lower limit refuses creates until enough is freed.
  ASSERT_TRUE(client_->SetAccountLimit(kAccount, 8 * kMiB).ok());
  ObjectId a = ObjectId::Random(), b = ObjectId::Random();
  ASSERT_TRUE(client_->CreateBytes(a, 4 * kMiB, In(kAccount)).ok());
  ASSERT_TRUE(client_->CreateBytes(b, 4 * kMiB, In(kAccount)).ok());
  ASSERT_TRUE(client_->SetAccountLimit(kAccount, 4 * kMiB).ok());
  EXPECT_TRUE(shm::IsAccountLimitError(
      client_->CreateBytes(ObjectId::Random(), 64, In(kAccount)).status()));
  ASSERT_TRUE(client_->Abort(a).ok());
  EXPECT_TRUE(shm::IsAccountLimitError(
      client_->CreateBytes(ObjectId::Random(), 64, In(kAccount)).status()));

  // Limit 0: the account goes once it holds nothing; creates are refused
  // meanwhile.
  ASSERT_TRUE(client_->SetAccountLimit(kAccount, 0).ok());
  EXPECT_EQ(Usage(), 4 * kMiB);
  absl::Status removing =
      client_->CreateBytes(ObjectId::Random(), 64, In(kAccount)).status();
  EXPECT_TRUE(shm::IsAccountLimitError(removing)) << removing;
  ASSERT_TRUE(client_->Abort(b).ok());
  EXPECT_TRUE(absl::IsNotFound(client_->AccountUsage(kAccount).status()));
}

}  // namespace
}  // namespace shoal
