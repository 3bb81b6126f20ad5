// Spill I/O off the store's lock, over a real store service and real clients
// (each a process: store_test_helper; this process is the client that holds
// the objects). While one client's create waits for tens of MiB to be
// written out, another client's put and this client's reads go on; a client
// killed while its create waits leaves a store whose objects all read back.
#include <dirent.h>
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/temp_dir.h"
#include "gtest/gtest.h"
#include "shm/store_client.h"
#include "shm/store_test_process.h"
#include "shm/store_test_util.h"

namespace shoal::shm {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kBigNumber = 1u << 30;  // the waiting create's object

// Files in the one spill folder inside `parent` (its `owner` file aside).
int SpilledFiles(const std::string& parent) {
  int files = 0;
  DIR* d = opendir(parent.c_str());
  if (d == nullptr) return -1;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    DIR* inner = opendir((parent + "/" + name).c_str());
    if (inner == nullptr) continue;
    while (dirent* f = readdir(inner)) {
      const std::string file = f->d_name;
      files += file != "." && file != ".." && file != "owner";
    }
    closedir(inner);
  }
  closedir(d);
  return files;
}

class SpillMovesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The service makes the spill folder inside a folder of this test's.
    auto parent = TempDir::Create("spill-moves-");
    ASSERT_TRUE(parent.ok()) << parent.status();
    parent_ = *std::move(parent);
    spill_dir_ = parent_.File("spill");
    auto store = HelperProcess::Serve(256 * kMiB, 1024, spill_dir_, &endpoint_);
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

  std::unique_ptr<HelperProcess> Client() {
    uint32_t slot = 0;
    auto p = HelperProcess::Client(endpoint_, &slot);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? *std::move(p) : nullptr;
  }

  // Fills the arena with 1 MiB objects the holder holds (unmapped: they may
  // spill), leaving under 2 MiB free. Returns how many.
  uint64_t Fill(HelperProcess& filler) {
    auto st = holder_->Stats();
    EXPECT_TRUE(st.ok());
    const uint64_t n = st->capacity_bytes() / kMiB - 1;
    auto ran = filler.Run(
        absl::StrCat("put 0 ", n, " ", kMiB, " ", holder_->client_slot()));
    EXPECT_TRUE(ran.ok()) << ran.status();
    EXPECT_EQ(SpilledFiles(spill_dir_), 0);
    return n;
  }

  // Reads object `number` back and checks it; with `drop`, lets it go
  // altogether (the holder's transferred reference too: a held object the
  // holder has read stays mapped by it until then, and cannot spill).
  void ExpectReadsBack(uint64_t number, uint64_t bytes, bool drop) {
    auto view = holder_->Get(TestObjectId(number));
    ASSERT_TRUE(view.ok()) << number << ": " << view.status();
    EXPECT_TRUE(HasTestPattern(view->data, view->nbytes, number, bytes))
        << number;
    ASSERT_TRUE(holder_->Release(TestObjectId(number)).ok());
    if (drop) {
      ASSERT_TRUE(holder_->Release(TestObjectId(number)).ok());
    }
  }

  // Sends a create of 160 MiB to `waiter` and returns once its spill is
  // under way (files appear in the spill folder) while it still waits.
  void StartBigCreate(HelperProcess& waiter) {
    ASSERT_TRUE(
        waiter.Send(absl::StrCat("create ", kBigNumber, " ", 160 * kMiB)).ok());
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (SpilledFiles(spill_dir_) == 0) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    ASSERT_FALSE(waiter.Answered()) << "the spill was over before it was seen";
  }

  TempDir parent_;
  std::string spill_dir_;
  std::string endpoint_;
  std::unique_ptr<HelperProcess> store_;
  std::unique_ptr<StoreClient> holder_;
};

TEST_F(SpillMovesTest, APutAndReadsProceedWhileAnotherClientsSpillIsInFlight) {
  auto filler = Client();
  auto waiter = Client();
  auto putter = Client();
  ASSERT_TRUE(filler && waiter && putter);
  const uint64_t n = Fill(*filler);
  StartBigCreate(*waiter);
  // Another client's put (it fits in what is left) and this client's reads
  // (local: they take the table lock) of the newest objects, which stay in
  // the arena, are served while the create still waits for its room.
  auto put = putter->Run(absl::StrCat("put ", n, " 1 ", 256 << 10, " -1"));
  ASSERT_TRUE(put.ok()) << put.status();
  ExpectReadsBack(n - 1, kMiB, /*drop=*/true);
  ExpectReadsBack(n - 2, kMiB, /*drop=*/true);
  EXPECT_FALSE(waiter->Answered())
      << "the put and the reads waited for the spill (took " << *put << " ms)";
  auto created = waiter->Finish();
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_GT(SpilledFiles(spill_dir_), 100);
  // Everything reads back, spilled or not (the arena's room for the
  // read-backs: the big object goes).
  waiter->End();  // its object is released with its client
  for (uint64_t i = 0; i < n - 2; ++i) ExpectReadsBack(i, kMiB, true);
  filler->End();
  putter->End();
}

TEST_F(SpillMovesTest, AClientKilledWhileItsCreateWaitsLeavesAConsistentStore) {
  auto filler = Client();
  auto waiter = Client();
  ASSERT_TRUE(filler && waiter);
  const uint64_t n = Fill(*filler);
  StartBigCreate(*waiter);
  waiter.reset();  // SIGKILLed while its create waits for the spill
  // The spills finish, the dead client's create is dropped, and every
  // object the holder holds reads back; new objects fit.
  for (uint64_t i = 0; i < n; ++i) ExpectReadsBack(i, kMiB, i % 2 == 0);
  auto putter = Client();
  ASSERT_NE(putter, nullptr);
  auto put = putter->Run(absl::StrCat("put ", n, " 8 ", kMiB, " -1"));
  ASSERT_TRUE(put.ok()) << put.status();
  auto st = holder_->Stats();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->lock_repairs(), 0u);
  filler->End();
  putter->End();
}

}  // namespace
}  // namespace shoal::shm
