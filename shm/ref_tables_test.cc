// Client reference tables growing into the arena, over a real store service
// and real clients (each a process: store_test_helper), with this process
// as the client that holds: handed more objects than its first table takes
// (Transfer, as workers hand task outputs), taking more by Get than it
// takes, several senders racing to fill it, and its release freeing its
// grown table.
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "shm/store_client.h"
#include "shm/store_test_process.h"
#include "shm/store_test_util.h"

namespace shoal::shm {
namespace {

constexpr uint64_t kObjectBytes = 4096;

class RefTablesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // 16 objects' worth in a slot: tables grow after 16.
    auto store = HelperProcess::Serve(uint64_t{64} << 20, 16, "-", &endpoint_);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    StoreClientOptions co;
    co.endpoint = endpoint_;
    auto c = StoreClient::Connect(co);
    ASSERT_TRUE(c.ok()) << c.status();
    holder_ = *std::move(c);
  }
  void TearDown() override {
    holder_.reset();
    if (store_ != nullptr) store_->End();
  }

  std::unique_ptr<HelperProcess> Sender(uint32_t* slot) {
    auto p = HelperProcess::Client(endpoint_, slot);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? *std::move(p) : nullptr;
  }
  // Gets object n from the holder, checks its bytes, releases it.
  void ExpectReadsBack(uint64_t n) {
    auto view = holder_->Get(TestObjectId(n));
    ASSERT_TRUE(view.ok()) << n << ": " << view.status();
    EXPECT_TRUE(HasTestPattern(view->data, view->nbytes, n, kObjectBytes)) << n;
    ASSERT_TRUE(holder_->Release(TestObjectId(n)).ok());
  }

  std::string endpoint_;
  std::unique_ptr<HelperProcess> store_;
  std::unique_ptr<StoreClient> holder_;
};

TEST_F(RefTablesTest, TransferGrowsAFullReceiversTable) {
  uint32_t slot = 0;
  auto sender = Sender(&slot);
  ASSERT_NE(sender, nullptr);
  constexpr uint64_t kN = 3000;  // ~190 times the first table's room
  auto ran = sender->Run(absl::StrCat("put 0 ", kN, " ", kObjectBytes, " ",
                                      holder_->client_slot()));
  ASSERT_TRUE(ran.ok()) << ran.status();
  // Every object is the holder's now and reads back; each Get takes a
  // second reference on the grown table, locally.
  for (uint64_t i = 0; i < kN; ++i) ExpectReadsBack(i);
  auto st = holder_->Stats();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->referenced_objects(), kN);
  const uint64_t used_before = st->used_bytes();
  // The holder's release frees its references and its table: the arena
  // holds only the (now unreferenced) objects.
  holder_.reset();
  StoreClientOptions co;
  co.endpoint = endpoint_;
  auto other = StoreClient::Connect(co);
  ASSERT_TRUE(other.ok());
  auto after = (*other)->Stats();
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->referenced_objects(), 0u);
  EXPECT_EQ(after->used_bytes(), kN * kObjectBytes);
  EXPECT_GT(used_before, after->used_bytes());  // the table was in the arena
  sender->End();
}

TEST_F(RefTablesTest, GetsPastTheFirstTableGoThroughTheService) {
  uint32_t slot = 0;
  auto sender = Sender(&slot);
  ASSERT_NE(sender, nullptr);
  constexpr uint64_t kN = 500;
  ASSERT_TRUE(
      sender->Run(absl::StrCat("put 0 ", kN, " ", kObjectBytes, " -1")).ok());
  // The holder maps all of them at once: its table grows five times over.
  std::vector<ObjectBuffer> views;
  for (uint64_t i = 0; i < kN; ++i) {
    auto view = holder_->Get(TestObjectId(i));
    ASSERT_TRUE(view.ok()) << i << ": " << view.status();
    views.push_back(*view);
  }
  for (uint64_t i = 0; i < kN; ++i) {
    EXPECT_TRUE(HasTestPattern(views[i].data, views[i].nbytes, i, kObjectBytes))
        << i;
  }
  for (uint64_t i = 0; i < kN; ++i) {
    ASSERT_TRUE(holder_->Release(TestObjectId(i)).ok());
  }
  // A second round reuses the grown table.
  for (uint64_t i = 0; i < kN; ++i) ExpectReadsBack(i);
  sender->End();
}

TEST_F(RefTablesTest, RacingSendersGrowOneHolderCorrectly) {
  constexpr int kSenders = 4;
  constexpr uint64_t kEach = 400;
  std::vector<std::unique_ptr<HelperProcess>> senders;
  for (int t = 0; t < kSenders; ++t) {
    uint32_t slot = 0;
    senders.push_back(Sender(&slot));
    ASSERT_NE(senders.back(), nullptr);
  }
  for (int t = 0; t < kSenders; ++t) {
    ASSERT_TRUE(
        senders[t]
            ->Send(absl::StrCat("put ", t * kEach, " ", kEach, " ",
                                kObjectBytes, " ", holder_->client_slot()))
            .ok());
  }
  for (int t = 0; t < kSenders; ++t) {
    auto done = senders[t]->Finish();
    ASSERT_TRUE(done.ok()) << t << ": " << done.status();
  }
  for (uint64_t i = 0; i < kSenders * kEach; ++i) {
    ExpectReadsBack(i);
    ASSERT_TRUE(holder_->Release(TestObjectId(i)).ok());  // the transferred
  }
  auto st = holder_->Stats();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->referenced_objects(), 0u);
  for (auto& s : senders) s->End();
}

}  // namespace
}  // namespace shoal::shm
