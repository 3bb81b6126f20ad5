#include "base/spin_turn.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "gtest/gtest.h"

namespace shoal {
namespace {

constexpr int64_t kMs = 1'000'000;

TEST(SpinContentionTest, ShortTurnsKeepSpinningOn) {
  SpinContention c;
  EXPECT_TRUE(c.Allows(0));
  EXPECT_TRUE(c.Record(0, 2'000));
  EXPECT_TRUE(c.Record(10'000, 10'000 + SpinContention::kStolenTurnNs));
  EXPECT_TRUE(c.Allows(20'000));
  EXPECT_EQ(c.backoff_ns(), 0);
}

TEST(SpinContentionTest, AStolenTurnStopsSpinningForTheBackoff) {
  SpinContention c;
  EXPECT_FALSE(c.Record(0, 3 * kMs));
  EXPECT_EQ(c.backoff_ns(), SpinContention::kMinBackoffNs);
  EXPECT_FALSE(c.Allows(3 * kMs));
  EXPECT_FALSE(c.Allows(3 * kMs + SpinContention::kMinBackoffNs - 1));
  EXPECT_TRUE(c.Allows(3 * kMs + SpinContention::kMinBackoffNs));
}

TEST(SpinContentionTest, ContentionFoundAtEachProbeDoublesUpToTheCap) {
  SpinContention c;
  int64_t t = 0;
  int64_t expected = SpinContention::kMinBackoffNs;
  for (int i = 0; i < 20; ++i) {
    // Probe as soon as spinning is allowed again, and lose a slice.
    t = std::max(t, c.off_until_ns());
    ASSERT_FALSE(c.Record(t, t + 3 * kMs));
    EXPECT_EQ(c.backoff_ns(), expected) << "probe " << i;
    expected = std::min(expected * 2, SpinContention::kMaxBackoffNs);
    t += 3 * kMs;
  }
  EXPECT_EQ(c.backoff_ns(), SpinContention::kMaxBackoffNs);
}

TEST(SpinContentionTest, ANewEpisodeStartsAtTheShortestBackoff) {
  SpinContention c;
  ASSERT_FALSE(c.Record(0, 3 * kMs));
  const int64_t probe = c.off_until_ns();
  ASSERT_FALSE(c.Record(probe, probe + 3 * kMs));
  EXPECT_EQ(c.backoff_ns(), 2 * SpinContention::kMinBackoffNs);
  // Clean turns for a long while, then contention again.
  const int64_t later = c.off_until_ns() + 10 * SpinContention::kMaxBackoffNs;
  EXPECT_TRUE(c.Allows(later));
  EXPECT_TRUE(c.Record(later, later + 1'000));
  EXPECT_FALSE(c.Record(later + 2 * kMs, later + 5 * kMs));
  EXPECT_EQ(c.backoff_ns(), SpinContention::kMinBackoffNs);
}

// The real thing: beside a thread that never blocks, on the same CPU, a
// yield loses the CPU for a time slice, and the thread stops spinning.
TEST(SpinTurnTest, AYieldBesideACpuHogIsStolen) {
  cpu_set_t saved;
  ASSERT_EQ(pthread_getaffinity_np(pthread_self(), sizeof(saved), &saved), 0);
  int cpu = -1;
  for (int i = 0; i < CPU_SETSIZE && cpu < 0; ++i) {
    if (CPU_ISSET(i, &saved)) cpu = i;
  }
  ASSERT_GE(cpu, 0);
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  ASSERT_EQ(pthread_setaffinity_np(pthread_self(), sizeof(one), &one), 0);
  std::atomic<bool> stop{false};
  std::atomic<bool> started{false};
  std::thread hog([&] {
    pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
    started.store(true);
    while (!stop.load(std::memory_order_relaxed)) {
    }
  });
  while (!started.load()) sched_yield();
  bool stolen = false;
  for (int i = 0; i < 100000 && !stolen; ++i) stolen = !YieldTurn();
  const bool allowed_after = SpinAllowed();
  stop.store(true);
  hog.join();
  pthread_setaffinity_np(pthread_self(), sizeof(saved), &saved);
  EXPECT_TRUE(stolen);
  EXPECT_FALSE(allowed_after);
}

}  // namespace
}  // namespace shoal
