// StoreService::Stats, the figures read in place by the service's host, over
// a real service on a thread of this process and real clients: they agree
// with what a StoreStatsRequest answers, follow clients coming and going,
// and can be read from another thread while the service serves creates,
// gets, releases and deletes (the ThreadSanitizer build checks the reads).
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "shm/store_client.h"
#include "shm/store_service_thread.h"
#include "shm/store_test_util.h"

namespace shoal::shm {
namespace {

constexpr uint64_t kObjectBytes = 4096;

class StoreStatsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StoreOptions so;
    so.job_id = absl::StrCat("statstest", getpid());
    so.store_bytes = uint64_t{64} << 20;
    so.prefault_ahead_bytes = 0;
    so.max_clients = 8;
    auto store = StoreServiceThread::Start(so);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    client_ = Connect("stats-test");
    ASSERT_NE(client_, nullptr);
  }

  std::unique_ptr<StoreClient> Connect(const std::string& name) {
    auto c = store_->Connect(name);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }

  absl::Status Put(StoreClient& c, uint64_t n) {
    const std::vector<uint8_t> data = TestPattern(n, kObjectBytes);
    return c.Put(TestObjectId(n),
                 TensorMeta::Bytes(static_cast<int64_t>(kObjectBytes)),
                 data.data());
  }

  // The in-place figures, which must equal the request's.
  StoreStats InPlace() {
    auto in_place = store_->service().Stats();
    EXPECT_TRUE(in_place.ok()) << in_place.status();
    auto asked = client_->Stats();
    EXPECT_TRUE(asked.ok()) << asked.status();
    if (!in_place.ok() || !asked.ok()) return StoreStats{};
    EXPECT_EQ(in_place->DebugString(), asked->DebugString());
    return *in_place;
  }

  std::unique_ptr<StoreServiceThread> store_;
  std::unique_ptr<StoreClient> client_;  // goes before store_
};

TEST_F(StoreStatsTest, InPlaceFiguresEqualTheRequestsAndFollowTheStore) {
  const StoreStats empty = InPlace();
  EXPECT_EQ(empty.objects(), 0u);
  EXPECT_EQ(empty.clients(), 1u);
  EXPECT_GT(empty.capacity_bytes(), 0u);
  EXPECT_LE(empty.capacity_bytes(), uint64_t{64} << 20);  // within the segment

  for (uint64_t n = 0; n < 10; ++n) ASSERT_TRUE(Put(*client_, n).ok()) << n;
  StoreStats st = InPlace();
  EXPECT_EQ(st.objects(), 10u);
  EXPECT_EQ(st.sealed_objects(), 10u);
  EXPECT_EQ(st.referenced_objects(), 10u);  // the creator holds each one
  EXPECT_EQ(st.creates(), 10u);
  EXPECT_EQ(st.created_bytes(), 10 * kObjectBytes);
  EXPECT_GE(st.used_bytes(), 10 * kObjectBytes);

  // A second client reads three objects, then goes: its gets stay counted.
  {
    auto reader = Connect("stats-reader");
    ASSERT_NE(reader, nullptr);
    EXPECT_EQ(InPlace().clients(), 2u);
    for (uint64_t n = 0; n < 3; ++n) {
      auto view = reader->Get(TestObjectId(n));
      ASSERT_TRUE(view.ok()) << view.status();
    }
    EXPECT_EQ(InPlace().gets(), 3u);
  }
  // The service releases a departed client's slot when it hears of it.
  StoreStats after;
  for (int i = 0; i < 500; ++i) {
    after = InPlace();
    if (after.clients() == 1) break;
    usleep(2000);
  }
  EXPECT_EQ(after.clients(), 1u);
  EXPECT_EQ(after.gets(), 3u);
  EXPECT_EQ(after.get_bytes(), 3 * kObjectBytes);

  for (uint64_t n = 0; n < 10; ++n) {
    ASSERT_TRUE(client_->Release(TestObjectId(n)).ok());
    ASSERT_TRUE(client_->Delete(TestObjectId(n)).ok());
  }
  st = InPlace();
  EXPECT_EQ(st.objects(), 0u);
  EXPECT_EQ(st.used_bytes(), 0u);
}

TEST_F(StoreStatsTest, ReadFromAnotherThreadWhileTheServiceServes) {
  std::atomic<bool> stop{false};
  std::atomic<int64_t> reads{0};
  std::thread reader([&] {
    uint64_t most_creates = 0;
    while (!stop.load()) {
      auto st = store_->service().Stats();
      ASSERT_TRUE(st.ok()) << st.status();
      EXPECT_LE(st->objects(), st->max_objects());
      EXPECT_GE(st->creates(), most_creates);  // never goes back
      most_creates = st->creates();
      ++reads;
      usleep(200);  // as a host that serves status requests would
    }
  });
  auto other = Connect("stats-other");
  ASSERT_NE(other, nullptr);
  for (uint64_t round = 0; round < 20; ++round) {
    for (uint64_t n = 0; n < 50; ++n) {
      const uint64_t id = round * 1000 + n;
      ASSERT_TRUE(Put(*client_, id).ok()) << id;
      auto view = other->Get(TestObjectId(id));
      ASSERT_TRUE(view.ok()) << view.status();
      ASSERT_TRUE(other->Release(TestObjectId(id)).ok());
      ASSERT_TRUE(client_->Release(TestObjectId(id)).ok());
      ASSERT_TRUE(client_->Delete(TestObjectId(id)).ok());
    }
  }
  while (reads.load() < 10) usleep(1000);
  stop.store(true);
  reader.join();
  const StoreStats st = InPlace();
  EXPECT_EQ(st.creates(), 1000u);
  EXPECT_EQ(st.gets(), 1000u);
  EXPECT_EQ(st.objects(), 0u);
  EXPECT_EQ(st.clients(), 2u);
}

}  // namespace
}  // namespace shoal::shm
