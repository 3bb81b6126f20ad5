#include "base/descriptor_limit.h"

#include <sys/resource.h>

#include "gtest/gtest.h"

namespace shoal {
namespace {

TEST(DescriptorLimitTest, RaisesTheSoftLimitToTheHardOne) {
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  if (saved.rlim_max < 64) GTEST_SKIP() << "hard limit " << saved.rlim_max;
  rlimit low = saved;
  low.rlim_cur = 32;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  EXPECT_EQ(DescriptorLimit(), 32u);
  absl::StatusOr<uint64_t> raised = RaiseDescriptorLimit();
  ASSERT_TRUE(raised.ok()) << raised.status();
  EXPECT_EQ(*raised, saved.rlim_max == RLIM_INFINITY
                         ? static_cast<uint64_t>(RLIM_INFINITY)
                         : static_cast<uint64_t>(saved.rlim_max));
  rlimit now{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &now), 0);
  EXPECT_EQ(now.rlim_cur, now.rlim_max);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &saved), 0);
}

}  // namespace
}  // namespace shoal
