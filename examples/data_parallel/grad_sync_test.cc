#include "examples/data_parallel/grad_sync.h"

#include "gtest/gtest.h"

namespace shoal::dp {
namespace {

using Buckets = std::vector<std::pair<int64_t, int64_t>>;

TEST(MakeBucketsTest, FirstBucketThenFullOnesThenTheRest) {
  GradSyncOptions o{.bucket_bytes = 400, .first_bucket_bytes = 40};
  EXPECT_EQ(MakeBuckets(250, o),
            (Buckets{{0, 10}, {10, 110}, {110, 210}, {210, 250}}));
  EXPECT_EQ(MakeBuckets(5, o), (Buckets{{0, 5}}));
  EXPECT_EQ(MakeBuckets(0, o), Buckets{});
}

TEST(MakeBucketsTest, DdpDefaultsOnTheDefaultModel) {
  // 1,214,497 floats (4.6 MiB): a 1 MiB bucket, then the rest in one.
  EXPECT_EQ(MakeBuckets(1214497, {}),
            (Buckets{{0, 262144}, {262144, 1214497}}));
}

TEST(MakeBucketsTest, FirstBucketCappedAtTheBucketSize) {
  GradSyncOptions o{.bucket_bytes = 40, .first_bucket_bytes = 400};
  EXPECT_EQ(MakeBuckets(25, o), (Buckets{{0, 10}, {10, 20}, {20, 25}}));
}

TEST(ChooseOverlapTest, OnGpusAndWhenEveryRankHasACoreToSpare) {
  EXPECT_TRUE(ChooseOverlap(/*gpu=*/true, 2, 2).on);
  EXPECT_TRUE(ChooseOverlap(false, 16, 2).on);
  EXPECT_TRUE(ChooseOverlap(false, 4, 2).on);
  EXPECT_TRUE(ChooseOverlap(false, 2, 1).on);
  const OverlapChoice two_on_two = ChooseOverlap(false, 2, 2);
  EXPECT_FALSE(two_on_two.on);
  EXPECT_EQ(two_on_two.why,
            "2 ranks on 2 CPUs: no core to spare for the all-reduce; "
            "--overlap forces it");
  EXPECT_FALSE(ChooseOverlap(false, 3, 2).on);
  EXPECT_FALSE(ChooseOverlap(false, 1, 1).on);
}

TEST(ChooseOverlapTest, UsableCpusCountsTheAffinityMask) {
  EXPECT_GE(UsableCpus(), 1);
}

}  // namespace
}  // namespace shoal::dp
