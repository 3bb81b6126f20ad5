#include "observe/timeline_clock.h"

#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "base/monotonic_clock.h"
#include "gtest/gtest.h"

namespace shoal::observe {
namespace {

// The timeline's clock against CLOCK_MONOTONIC: every reading lies between
// a kernel reading just before it and one just after, within the
// extrapolation's allowance, across the rate's measurement and many
// anchors; and readings of a thread never go back by more than it.
void CheckAgainstTheKernel(int64_t run_ns) {
  constexpr int64_t kAllowanceNs = 2'000;
  const int64_t end = MonotonicNs() + run_ns;
  int64_t last = 0;
  int64_t readings = 0;
  while (true) {
    const int64_t before = MonotonicNs();
    const int64_t now = TimelineNowNs();
    const int64_t after = MonotonicNs();
    ASSERT_GE(now, before - kAllowanceNs) << "after " << readings;
    ASSERT_LE(now, after + kAllowanceNs) << "after " << readings;
    ASSERT_GE(now, last - kAllowanceNs) << "after " << readings;
    last = now;
    ++readings;
    if (after > end) break;
  }
  EXPECT_GT(readings, 1000);
}

TEST(TimelineClockTest, ReadsTheKernelsMonotonicClock) {
  CheckAgainstTheKernel(300'000'000);
}

TEST(TimelineClockTest, EveryThreadReadsTheSameClock) {
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([] { CheckAgainstTheKernel(200'000'000); });
  }
  for (std::thread& t : threads) t.join();
}

TEST(TimelineClockTest, ReadsTheCounterWhereTheKernelDoes) {
  // Past the rate's first measurement, the counter is read exactly where
  // the kernel keeps CLOCK_MONOTONIC with it.
  std::ifstream source(
      "/sys/devices/system/clocksource/clocksource0/current_clocksource");
  std::string name;
  std::getline(source, name);
  const int64_t until = MonotonicNs() + 50'000'000;
  while (MonotonicNs() < until) (void)TimelineNowNs();
#if defined(__x86_64__)
  EXPECT_EQ(TimelineClockUsesTsc(), name == "tsc") << "clock source " << name;
#else
  EXPECT_FALSE(TimelineClockUsesTsc());
#endif
}

}  // namespace
}  // namespace shoal::observe
