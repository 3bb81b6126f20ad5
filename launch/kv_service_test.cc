#include <limits>
#include "launch/kv_service.h"

#include <thread>

#include "gtest/gtest.h"
#include "launch/kv_client.h"

namespace shoal::launch {
namespace {

class KvServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = KvService::Create({});
    ASSERT_TRUE(s.ok()) << s.status();
    service_ = *std::move(s);
    thread_ = std::thread([this] { ASSERT_TRUE(service_->Run().ok()); });
  }
  void TearDown() override {
    service_->Stop();
    thread_.join();
  }
  std::unique_ptr<launch::KvClient> Client() {
    auto c = launch::KvClient::Connect(service_->endpoint());
    EXPECT_TRUE(c.ok());
    return *std::move(c);
  }

  std::unique_ptr<KvService> service_;
  std::thread thread_;
};

TEST_F(KvServiceTest, SetGetAddCasDeleteList) {
  auto kv = Client();
  ASSERT_TRUE(kv->Set("a/1", "one").ok());
  EXPECT_EQ(*kv->Get("a/1"), "one");
  EXPECT_EQ(kv->Get("missing").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(*kv->Add("n", 5), 5);
  EXPECT_EQ(*kv->Add("n", -2), 3);
  // A sum that overflows 64 bits is refused; the key keeps its value.
  EXPECT_EQ(kv->Add("n", std::numeric_limits<int64_t>::max()).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(*kv->Add("n", 0), 3);
  EXPECT_EQ(kv->Add("a/1", 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(*kv->CompareAndSet("a/1", "two", "three"));
  EXPECT_TRUE(*kv->CompareAndSet("a/1", "one", "uno"));
  EXPECT_EQ(*kv->Get("a/1"), "uno");
  std::string current;
  EXPECT_TRUE(*kv->SetIfAbsent("first", "me", &current));
  EXPECT_FALSE(*kv->SetIfAbsent("first", "you", &current));
  EXPECT_EQ(current, "me");
  ASSERT_TRUE(kv->Set("a/2", "two").ok());
  ASSERT_TRUE(kv->Set("b/1", "x").ok());
  auto list = kv->List("a/");
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[1].first, "a/2");
  EXPECT_TRUE(*kv->Delete("b/1"));
  EXPECT_FALSE(*kv->Delete("b/1"));
  EXPECT_EQ(*kv->DeletePrefix("a/"), 2u);
  EXPECT_TRUE(kv->List("a/")->empty());
  // Binary values survive.
  std::string bin("\0\x01\xff", 3);
  ASSERT_TRUE(kv->Set("bin", bin).ok());
  EXPECT_EQ(*kv->Get("bin"), bin);
}

TEST_F(KvServiceTest, GetAndWaitBlockUntilSetOrTimeout) {
  std::thread setter([this] {
    auto kv = Client();
    absl::SleepFor(absl::Milliseconds(50));
    ASSERT_TRUE(kv->Set("late", "here").ok());
    absl::SleepFor(absl::Milliseconds(50));
    ASSERT_TRUE(kv->Set("later", "too").ok());
  });
  auto kv = Client();
  EXPECT_EQ(*kv->Get("late", absl::Seconds(5)), "here");
  const std::string keys[] = {"late", "later"};
  EXPECT_TRUE(kv->Wait(keys, absl::Seconds(5)).ok());
  setter.join();
  const absl::Time t0 = absl::Now();
  auto never = kv->Get("never", absl::Milliseconds(100));
  EXPECT_EQ(never.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_GE(absl::Now() - t0, absl::Milliseconds(90));
  const std::string missing[] = {"late", "nope"};
  absl::Status s = kv->Wait(missing, absl::Milliseconds(50));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("nope"), std::string::npos) << s;
}

TEST_F(KvServiceTest, BarrierReleasesAllAtOnceAndCanBeReused) {
  constexpr int kN = 4;
  for (int round = 0; round < 3; ++round) {
    std::vector<std::thread> threads;
    std::atomic<int> passed{0};
    for (int i = 0; i < kN; ++i) {
      threads.emplace_back([&] {
        auto kv = Client();
        if (kv->Barrier("b", kN, absl::Seconds(10)).ok()) ++passed;
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(passed.load(), kN);
  }
  // One missing participant: DeadlineExceeded naming how many came.
  auto kv = Client();
  absl::Status s = kv->Barrier("short", 2, absl::Milliseconds(100));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("1 of 2"), std::string::npos) << s;
  // Disagreeing on the size is an error.
  std::thread first(
      [this] { (void)Client()->Barrier("size", 3, absl::Milliseconds(300)); });
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(kv->Barrier("size", 2, absl::Seconds(1)).code(),
            absl::StatusCode::kInvalidArgument);
  first.join();
}

}  // namespace
}  // namespace shoal::launch
