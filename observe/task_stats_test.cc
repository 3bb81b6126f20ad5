#include "observe/task_stats.h"

#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace shoal::observe {
namespace {

constexpr int64_t kUs = 1000;

TaskRun MakeRun(absl::string_view function, int64_t wait_us, int64_t run_us,
                bool ok = true, uint32_t attempt = 1) {
  TaskRun r;
  r.function = function;
  r.attempt = attempt;
  r.queued_ns = 1000 * kUs;
  r.claimed_ns = r.queued_ns + wait_us * kUs;
  r.end_ns = r.claimed_ns + run_us * kUs;
  r.ok = ok;
  return r;
}

TEST(TaskStatsTest, BucketsFollowTheBounds) {
  EXPECT_EQ(LatencyBucket(0), 0u);
  EXPECT_EQ(LatencyBucket(25 * kUs), 0u);  // le="25us" holds 25 us
  EXPECT_EQ(LatencyBucket(26 * kUs), 1u);
  EXPECT_EQ(LatencyBucket(1000 * kUs), 3u);
  EXPECT_EQ(LatencyBucket(int64_t{200} * 1000 * 1000 * kUs),
            kLatencyBuckets - 1);
}

TEST(TaskStatsTest, NamesDropTheActorSuffixAndKeepTheEndOfLongOnes) {
  EXPECT_EQ(TaskStatsName("py:shoal._actor:_call@actor=3"),
            "py:shoal._actor:_call");
  const std::string long_name = std::string(300, 'a') + ":fn";
  absl::string_view n = TaskStatsName(long_name);
  EXPECT_EQ(n.size(), kMaxTaskNameBytes);
  EXPECT_TRUE(absl::EndsWith(n, ":fn"));
}

TEST(TaskStatsTest, CountsOutcomesRetriesAndTimesByName) {
  TaskStats stats;
  stats.Record(MakeRun("noop", 10, 50));
  stats.Record(MakeRun("noop", 10, 50));
  stats.Record(MakeRun("sleep", 2000, 30000, /*ok=*/false, /*attempt=*/2));
  stats.Record(MakeRun("noop", 300, 5, /*ok=*/false));
  std::vector<wire::TaskNameStats> s = stats.Snapshot();
  EXPECT_EQ(stats.runs(), 4u);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].name(), "noop");
  EXPECT_EQ(s[0].started(), 3u);
  EXPECT_EQ(s[0].succeeded(), 2u);
  EXPECT_EQ(s[0].failed(), 1u);
  EXPECT_EQ(s[0].retried(), 0u);
  ASSERT_EQ(s[0].run_buckets_size(), static_cast<int>(kLatencyBuckets));
  EXPECT_EQ(s[0].run_buckets(0), 1u);  // 5 us
  EXPECT_EQ(s[0].run_buckets(1), 2u);  // 50 us
  EXPECT_EQ(s[0].wait_buckets(0), 2u);
  EXPECT_EQ(s[0].wait_buckets(3), 1u);  // 300 us
  EXPECT_NEAR(s[0].run_seconds(), 105e-6, 1e-9);
  EXPECT_EQ(s[1].name(), "sleep");
  EXPECT_EQ(s[1].failed(), 1u);
  EXPECT_EQ(s[1].retried(), 1u);
  EXPECT_EQ(s[1].run_buckets(7), 1u);  // 30 ms: (25, 100] ms
}

TEST(TaskStatsTest, NamesBeyondTheLimitCountAsOther) {
  TaskStats stats;
  for (size_t i = 0; i < kMaxTaskNames + 10; ++i)
    stats.Record(MakeRun("f" + std::to_string(i), 1, 1));
  std::vector<wire::TaskNameStats> s = stats.Snapshot();
  EXPECT_EQ(s.size(), kMaxTaskNames + 1);
  uint64_t other = 0, total = 0;
  for (const auto& e : s) {
    total += e.started();
    if (e.name() == kOtherTaskName) other = e.started();
  }
  EXPECT_EQ(other, 10u);
  EXPECT_EQ(total, kMaxTaskNames + 10);
}

TEST(TaskStatsTest, TheSumKeepsARestartedWorkersEarlierCounts) {
  TaskStats first, second, other_worker;
  first.Record(MakeRun("noop", 1, 1));
  first.Record(MakeRun("noop", 1, 1));
  second.Record(MakeRun("noop", 1, 1));
  other_worker.Record(MakeRun("noop", 1, 1));
  other_worker.Record(MakeRun("sleep", 1, 1));
  TaskStatsSum sum;
  sum.Report(1, 100, first.Snapshot());
  sum.Report(1, 100, first.Snapshot());  // the same totals again: no double
  sum.Report(2, 200, other_worker.Snapshot());
  sum.Report(2, 200, {});                 // nothing new from worker 2
  sum.Report(1, 101, second.Snapshot());  // worker 1 restarted
  std::vector<wire::TaskNameStats> s = sum.Sum();
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].name(), "noop");
  EXPECT_EQ(s[0].started(), 4u);
  EXPECT_EQ(s[0].run_buckets(0), 4u);
  EXPECT_EQ(s[1].started(), 1u);
}

TEST(TaskStatsTest, MalformedReportsAreSkipped) {
  wire::TaskNameStats bad;
  bad.set_name("bad");
  bad.set_started(5);
  bad.add_run_buckets(5);  // one bucket, not kLatencyBuckets
  TaskStatsSum sum;
  sum.Report(1, 100, {bad});
  EXPECT_TRUE(sum.Sum().empty());
}

}  // namespace
}  // namespace shoal::observe
