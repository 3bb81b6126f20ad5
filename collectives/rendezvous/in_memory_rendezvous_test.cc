// InMemoryRendezvous: the store semantics the in-process collectives tests
// rely on (waiting gets, reusable barriers, timeouts), with threads.
#include "collectives/rendezvous/in_memory_rendezvous.h"

#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace shoal::collectives {
namespace {

TEST(InMemoryRendezvousTest, GetWaitsForSet) {
  InMemoryRendezvous rv;
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(20));
    EXPECT_TRUE(rv.Set("k", "v").ok());
  });
  absl::StatusOr<std::string> got = rv.Get("k", absl::Seconds(30));
  setter.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "v");
}

TEST(InMemoryRendezvousTest, GetWithoutWaitOrInTimeFails) {
  InMemoryRendezvous rv;
  EXPECT_EQ(rv.Get("k", absl::ZeroDuration()).status().code(),
            absl::StatusCode::kNotFound);
  const absl::Time t0 = absl::Now();
  EXPECT_EQ(rv.Get("k", absl::Milliseconds(50)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_GE(absl::Now() - t0, absl::Milliseconds(50));
}

TEST(InMemoryRendezvousTest, SetReplacesAndDeleteRemoves) {
  InMemoryRendezvous rv;
  ASSERT_TRUE(rv.Set("k", "1").ok());
  ASSERT_TRUE(rv.Set("k", "2").ok());
  EXPECT_EQ(rv.Get("k", absl::ZeroDuration()).value_or(""), "2");
  ASSERT_TRUE(rv.Delete("k").ok());
  ASSERT_TRUE(rv.Delete("k").ok());  // absent: still OK
  EXPECT_EQ(rv.Get("k", absl::ZeroDuration()).status().code(),
            absl::StatusCode::kNotFound);
}

// Three rounds of one barrier name among four threads: each round releases
// everyone, and the name is reusable.
TEST(InMemoryRendezvousTest, BarrierReleasesEveryoneAndIsReusable) {
  InMemoryRendezvous rv;
  std::vector<std::thread> threads;
  for (int r = 0; r < 4; ++r) {
    threads.emplace_back([&] {
      for (int round = 0; round < 3; ++round) {
        EXPECT_TRUE(rv.Barrier("b", 4, absl::Seconds(30)).ok());
      }
    });
  }
  for (std::thread& t : threads) t.join();
}

TEST(InMemoryRendezvousTest, BarrierTimesOutAndTheLateCallerLeaves) {
  InMemoryRendezvous rv;
  EXPECT_EQ(rv.Barrier("b", 2, absl::Milliseconds(50)).code(),
            absl::StatusCode::kDeadlineExceeded);
  // The timed-out caller left: a new round of two needs two again.
  std::thread other(
      [&] { EXPECT_TRUE(rv.Barrier("b", 2, absl::Seconds(30)).ok()); });
  EXPECT_TRUE(rv.Barrier("b", 2, absl::Seconds(30)).ok());
  other.join();
}

// Two callers disagree on the world: whichever arrives second is refused
// (InvalidArgument) and the first, alone, times out. Which one is second is
// up to the scheduler; the pair of outcomes is not.
TEST(InMemoryRendezvousTest, BarrierRejectsADifferentWorld) {
  InMemoryRendezvous rv;
  absl::Status two, three;
  std::thread a([&] { two = rv.Barrier("b", 2, absl::Seconds(1)); });
  std::thread b([&] { three = rv.Barrier("b", 3, absl::Seconds(1)); });
  a.join();
  b.join();
  const bool two_refused = two.code() == absl::StatusCode::kInvalidArgument;
  EXPECT_EQ((two_refused ? three : two).code(),
            absl::StatusCode::kDeadlineExceeded)
      << two << " / " << three;
  EXPECT_EQ((two_refused ? two : three).code(),
            absl::StatusCode::kInvalidArgument)
      << two << " / " << three;
  EXPECT_EQ(rv.Barrier("b", 0, absl::Seconds(1)).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shoal::collectives
