// Collectives with real processes under `shoal launch`: 2, 3 and 4 ranks.
#include <map>
#include <optional>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gpu/device_visibility.h"
#include "gpu/gpu_info.h"
#include "gtest/gtest.h"
#include "tests/testing/command.h"
#include "tests/testing/test_env.h"

namespace shoal {
namespace {

using shoal::testing::RunfilePath;

using Result = testing::CommandResult;

Result Launch(const std::string& nproc, const std::string& mode,
              std::vector<std::string> extra = {},
              std::map<std::string, std::optional<std::string>> env = {}) {
  std::vector<std::string> argv = {RunfilePath("tools/shoal_lean"),
                                   "launch",
                                   "--nproc-per-node",
                                   nproc,
                                   "--store-bytes",
                                   "64M",
                                   "--tee"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.push_back("--");
  argv.push_back(RunfilePath("tests/collectives/coll_probe"));
  argv.push_back(mode);
  return testing::RunCommand(argv, "coll", absl::Minutes(5), std::move(env));
}

Result Launch(int nproc, const std::string& mode,
              std::vector<std::string> extra = {},
              std::map<std::string, std::optional<std::string>> env = {}) {
  return Launch(absl::StrCat(nproc), mode, std::move(extra), std::move(env));
}

class CollectivesTest : public ::testing::TestWithParam<int> {};

TEST_P(CollectivesTest, EveryOpDtypeAndSizeMatchesTheReference) {
  const int n = GetParam();
  Result r = Launch(n, "all");
  EXPECT_EQ(r.code, 0) << r.err;
  int ok = 0;
  for (const std::string& line : r.out) ok += absl::StrContains(line, " ok ");
  EXPECT_EQ(ok, n) << r.OutText() << r.err;
}

TEST_P(CollectivesTest, AsyncAndGroups) {
  const int n = GetParam();
  Result r = Launch(n, "async");
  EXPECT_EQ(r.code, 0) << r.err;
  r = Launch(n, "group");
  EXPECT_EQ(r.code, 0) << r.err;
}

// A rank that finished and exited fails no send or receive between the
// others (once it did: a sleeping receive checked every rank's pid).
TEST_P(CollectivesTest, ARankThatLeftFailsNoExchangeBetweenTheOthers) {
  const int n = GetParam();
  if (n < 3) GTEST_SKIP() << "needs two ranks besides the one that leaves";
  Result r = Launch(n, "leave");
  EXPECT_EQ(r.code, 0) << r.OutText() << r.err;
  int ok = 0;
  for (const std::string& line : r.out) ok += absl::StrContains(line, " ok ");
  EXPECT_EQ(ok, n - 1) << r.OutText() << r.err;
}

TEST_P(CollectivesTest, MismatchedCountsAreReportedByEveryRank) {
  const int n = GetParam();
  Result r = Launch(n, "mismatch");
  EXPECT_EQ(r.code, 0) << r.err;
  int reported = 0;
  for (const std::string& line : r.out) {
    reported += absl::StrContains(line, "INVALID_ARGUMENT") &&
                absl::StrContains(line, "mismatch");
  }
  EXPECT_EQ(reported, n) << r.OutText();
}

// Device buffers take the NCCL path: one rank per GPU. Skips without a GPU
// (the path is compiled and linked all the same).
TEST(CollectivesGpuTest, DeviceBuffersGoThroughNccl) {
  if (!gpu::GetBuildInfo().cuda) GTEST_SKIP() << "shoal was built without CUDA";
  if (gpu::DriverGpuCount() == 0)
    GTEST_SKIP() << "no GPU on this machine: the NCCL path needs one";
  // One rank per GPU that CUDA sees under CUDA_VISIBLE_DEVICES (what
  // --nproc-per-node gpu starts), not per GPU the driver lists.
  absl::StatusOr<int> visible = gpu::CudaDeviceCount();
  ASSERT_TRUE(visible.ok()) << visible.status();
  const int gpus = *visible;
  if (gpus == 0)
    GTEST_SKIP() << "no GPU visible to CUDA here (CUDA_VISIBLE_DEVICES)";
  Result r = Launch("gpu", "gpu");
  EXPECT_EQ(r.code, 0) << r.OutText() << r.err;
  int ok = 0;
  for (const std::string& line : r.out) ok += absl::StrContains(line, "gpu ok");
  EXPECT_EQ(ok, gpus) << r.OutText() << r.err;
  if (gpus < 2) {
    std::printf(
        "note: one GPU, so NCCL ran with one rank; collectives across "
        "GPUs need two or more\n");
  }
}

// Tiny slots and point-to-point buffers, no one-step path and streaming
// stores for every result: every size goes through the chunked paths.
TEST(CollectivesTuningTest, TinyChunksAndStreamingStoresGiveTheSameResults) {
  Result r = Launch(3, "all", {},
                    {{"SHOAL_COLL_SLOT_BYTES", "4096"},
                     {"SHOAL_COLL_ONE_STEP_BYTES", "0"},
                     {"SHOAL_COLL_STREAM_BYTES", "0"},
                     {"SHOAL_COLL_P2P_BYTES", "4096"}});
  EXPECT_EQ(r.code, 0) << r.err;
  int ok = 0;
  for (const std::string& line : r.out) ok += absl::StrContains(line, " ok ");
  EXPECT_EQ(ok, 3) << r.OutText() << r.err;
}

INSTANTIATE_TEST_SUITE_P(Ranks, CollectivesTest, ::testing::Values(2, 3, 4),
                         [](const auto& info) {
                           return absl::StrCat(info.param, "ranks");
                         });

// Rank 1 never joins the all_reduce: the others give up at their 1 s timeout.
// Both report DeadlineExceeded naming rank 1, also the one that first sees
// the other give up (a peer's failure code travels with its reason).
TEST(CollectivesFailureTest, AStalledRankMakesTheOthersFailWithinTheTimeout) {
  Result r = Launch(3, "stall");
  int timed_out = 0;
  for (const std::string& line : r.out) {
    if (!absl::StrContains(line, "stall after")) continue;
    EXPECT_TRUE(absl::StrContains(line, "DEADLINE_EXCEEDED")) << line;
    EXPECT_TRUE(absl::StrContains(line, "rank 1 did not arrive")) << line;
    const size_t at = line.find("after ");
    int64_t ms = 0;
    ASSERT_TRUE(
        absl::SimpleAtoi(line.substr(at + 6, line.find(" ms") - at - 6), &ms))
        << line;
    EXPECT_GE(ms, 950) << line;
    EXPECT_LT(ms, 3000) << line;
    ++timed_out;
  }
  EXPECT_EQ(timed_out, 2) << r.OutText() << r.err;
  for (const std::string& line : r.out) {
    if (absl::StrContains(line, "then ")) {
      EXPECT_TRUE(absl::StrContains(line, "FAILED_PRECONDITION")) << line;
    }
  }
}

// Rank 1 is SIGKILLed: the others see it die (not a 30 s timeout).
TEST(CollectivesFailureTest, ADeadRankMakesTheOthersFailQuickly) {
  Result r = Launch(3, "die", {"--stop-grace", "10"});
  EXPECT_EQ(r.code, 128 + 9) << r.err;
  int saw = 0;
  for (const std::string& line : r.out) {
    if (!absl::StrContains(line, "die after")) continue;
    EXPECT_TRUE(absl::StrContains(line, "UNAVAILABLE") &&
                absl::StrContains(line, "died"))
        << line;
    const size_t at = line.find("after ");
    int64_t ms = 0;
    ASSERT_TRUE(
        absl::SimpleAtoi(line.substr(at + 6, line.find(" ms") - at - 6), &ms))
        << line;
    EXPECT_LT(ms, 5000) << line;
    ++saw;
  }
  EXPECT_EQ(saw, 2) << r.OutText() << r.err;
}

}  // namespace
}  // namespace shoal
