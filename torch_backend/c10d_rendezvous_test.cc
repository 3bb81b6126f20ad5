#include "torch_backend/c10d_rendezvous.h"

#include <atomic>
#include <thread>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace shoal::torch_backend {
namespace {

TEST(C10dRendezvousTest, SetGetDeleteAndNotFound) {
  C10dRendezvous rv(c10::make_intrusive<::c10d::HashStore>());
  EXPECT_EQ(rv.Get("k", absl::ZeroDuration()).status().code(),
            absl::StatusCode::kNotFound);
  ASSERT_TRUE(rv.Set("k", std::string("a\0b", 3)).ok());
  auto got = rv.Get("k", absl::Seconds(5));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, std::string("a\0b", 3));
  ASSERT_TRUE(rv.Delete("k").ok());
  EXPECT_EQ(rv.Get("k", absl::ZeroDuration()).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(rv.Delete("never-set").ok());
}

TEST(C10dRendezvousTest, GetWaitsForTheKeyOrTimesOut) {
  auto store = c10::make_intrusive<::c10d::HashStore>();
  C10dRendezvous rv(store);
  const absl::Time start = absl::Now();
  EXPECT_EQ(rv.Get("absent", absl::Milliseconds(200)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(150));
  std::thread setter([store] {
    C10dRendezvous other(store);
    absl::SleepFor(absl::Milliseconds(50));
    ASSERT_TRUE(other.Set("late", "v").ok());
  });
  auto got = rv.Get("late", absl::Seconds(10));
  setter.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "v");
}

TEST(C10dRendezvousTest, BarrierReleasesEveryoneEachRound) {
  auto store = c10::make_intrusive<::c10d::HashStore>();
  constexpr int kWorld = 3, kRounds = 4;
  std::atomic<int> arrived{0};
  std::vector<std::thread> ranks;
  for (int r = 0; r < kWorld; ++r) {
    ranks.emplace_back([&, store] {
      C10dRendezvous rv(store);
      for (int round = 0; round < kRounds; ++round) {
        arrived.fetch_add(1);
        ASSERT_TRUE(rv.Barrier("b", kWorld, absl::Seconds(30)).ok());
        // Nobody leaves round k before everyone reached it.
        EXPECT_GE(arrived.load(), (round + 1) * kWorld);
      }
    });
  }
  for (auto& t : ranks) t.join();
}

TEST(C10dRendezvousTest, BarrierTimesOutWhenSomeoneIsMissing) {
  C10dRendezvous rv(c10::make_intrusive<::c10d::HashStore>());
  EXPECT_EQ(rv.Barrier("lonely", 2, absl::Milliseconds(100)).code(),
            absl::StatusCode::kDeadlineExceeded);
}

}  // namespace
}  // namespace shoal::torch_backend
