// The example with real processes under `shoal launch`: N ranks with batch B
// follow the same loss curve as 1 rank with batch N·B; bucketing and overlap
// change nothing; the parameter check catches ranks that drift apart; the
// GPU path (with a GPU) agrees with the CPU path.

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "examples/data_parallel/grad_sync.h"
#include "gpu/device_visibility.h"
#include "gpu/gpu_info.h"
#include "gtest/gtest.h"
#include "tests/testing/command.h"
#include "tests/testing/test_env.h"

namespace shoal {
namespace {

using shoal::testing::RunfilePath;

struct Result {
  int code = -1;
  std::string out, err;
};

// A small model so that a run takes about a second on 2 cores; on the CPU
// unless a test asks otherwise (a later flag wins), so that curves compared
// on a GPU machine come from the same kernels.
const std::vector<std::string> kSmall = {
    "--hidden",    "256",  "--samples", "8192",          "--steps",
    "60",          "--lr", "0.05",      "--check-every", "20",
    "--log-every", "20",   "--no-png",  "--device",      "cpu"};

std::string OutDir() { return absl::StrCat(::testing::TempDir(), "/dp"); }

Result Launch(const std::string& nproc, std::vector<std::string> flags) {
  std::vector<std::string> argv = {
      RunfilePath("tools/shoal"),
      "launch",
      "--nproc-per-node",
      nproc,
      "--store-bytes",
      "64M",
      "--",
      RunfilePath("examples/data_parallel/data_parallel"),
      "--out-dir",
      OutDir()};
  argv.insert(argv.end(), kSmall.begin(), kSmall.end());
  argv.insert(argv.end(), flags.begin(), flags.end());
  testing::CommandResult c = testing::RunCommand(argv, "dp", absl::Minutes(2));
  return Result{c.code, c.OutText(), c.err};
}

// The loss column of a CSV the example wrote.
std::vector<double> Losses(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::vector<double> losses;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::vector<std::string> f = absl::StrSplit(line, ',');
    double v = 0;
    EXPECT_TRUE(f.size() > 1 && absl::SimpleAtod(f[1], &v)) << line;
    losses.push_back(v);
  }
  return losses;
}

std::string Csv(const std::string& name) {
  return absl::StrCat(OutDir(), "/", name, ".csv");
}

class DataParallelTest : public ::testing::TestWithParam<int> {};

TEST_P(DataParallelTest, NRanksFollowTheLossCurveOfOneRankWithNTimesTheBatch) {
  const int n = GetParam();
  Result one = Launch("1", {"--batch", absl::StrCat(32 * n), "--csv",
                            Csv(absl::StrCat("one", n))});
  ASSERT_EQ(one.code, 0) << one.out << one.err;
  Result many = Launch(absl::StrCat(n), {"--batch", "32", "--csv",
                                         Csv(absl::StrCat("many", n))});
  ASSERT_EQ(many.code, 0) << many.out << many.err;
  EXPECT_TRUE(absl::StrContains(
      many.out, "parameters bit-identical across ranks at 3 checks"))
      << many.out;
  // Rank 0 logs the loss and samples/s as it goes.
  EXPECT_TRUE(absl::StrContains(many.out, "step     20  loss ")) << many.out;
  EXPECT_TRUE(absl::StrContains(many.out, " samples/s ")) << many.out;

  const std::vector<double> a = Losses(Csv(absl::StrCat("one", n)));
  const std::vector<double> b = Losses(Csv(absl::StrCat("many", n)));
  ASSERT_EQ(a.size(), 60u);
  ASSERT_EQ(b.size(), 60u);
  for (size_t i = 0; i < a.size(); ++i) {
    // Only the order of float additions differs (measured: ~2e-7).
    EXPECT_NEAR(b[i], a[i], 1e-4 * a[i]) << "step " << i + 1;
  }
  EXPECT_LT(a.back(), 0.6 * a.front()) << "the model should learn";
}

INSTANTIATE_TEST_SUITE_P(Ranks, DataParallelTest, ::testing::Values(2, 3),
                         [](const auto& info) {
                           return absl::StrCat(info.param, "ranks");
                         });

TEST(DataParallelSyncTest, BucketSizesAndOverlapGiveBitIdenticalLosses) {
  Result plain =
      Launch("2", {"--batch", "32", "--overlap", "--csv", Csv("plain")});
  ASSERT_EQ(plain.code, 0) << plain.err;
  Result no_overlap = Launch(
      "2", {"--batch", "32", "--no-overlap", "--csv", Csv("no_overlap")});
  ASSERT_EQ(no_overlap.code, 0) << no_overlap.err;
  // 107,041 floats in buckets of 4 KiB then 64 KiB: 8 of them.
  Result tiny =
      Launch("2", {"--batch", "32", "--overlap", "--first-bucket-bytes", "4K",
                   "--bucket-bytes", "64K", "--csv", Csv("tiny")});
  ASSERT_EQ(tiny.code, 0) << tiny.err;
  EXPECT_TRUE(absl::StrContains(tiny.out, "in 8 buckets")) << tiny.out;
  // The average is element-wise and computed in rank order whatever the
  // chunking, so the results are the same bits.
  EXPECT_EQ(Losses(Csv("no_overlap")), Losses(Csv("plain")));
  EXPECT_EQ(Losses(Csv("tiny")), Losses(Csv("plain")));
}

// The binary's own defaults (not just GradSyncOptions'): buckets of 25 MiB
// after a first one of 1 MiB, as DDP; the default model's 4.6 MiB of
// gradients make two.
TEST(DataParallelSyncTest, DefaultBucketsAreDdps) {
  Result r = Launch("2", {"--hidden", "1024", "--steps", "3", "--batch", "16",
                          "--check-every", "0"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(absl::StrContains(
      r.out, "in 2 buckets (first 1 MiB, then up to 25 MiB; overlap "))
      << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "buckets=2 ")) << r.out;
}

// Without --overlap/--no-overlap the CPU path overlaps only when every rank
// has a core to spare (dp::ChooseOverlap, unit-tested in grad_sync_test).
TEST(DataParallelSyncTest, OverlapByDefaultOnlyWithACoreToSpare) {
  Result r = Launch("2", {"--batch", "32", "--steps", "3"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const dp::OverlapChoice c = dp::ChooseOverlap(false, dp::UsableCpus(), 2);
  EXPECT_TRUE(absl::StrContains(
      r.out, absl::StrCat("overlap ", c.on ? "on" : "off", ": ", c.why, ")")))
      << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, absl::StrCat("overlap=", c.on ? 1 : 0)))
      << r.out;
  Result forced = Launch("2", {"--batch", "32", "--steps", "3", "--overlap"});
  ASSERT_EQ(forced.code, 0) << forced.out << forced.err;
  EXPECT_TRUE(absl::StrContains(forced.out, "; overlap on)")) << forced.out;
}

TEST(DataParallelSyncTest, RanksThatDriftApartStopTheJob) {
  Result r =
      Launch("2", {"--batch", "32", "--diverge-at", "3", "--check-every", "5"});
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_TRUE(absl::StrContains(
      r.err, "parameters are no longer bit-identical after step 5"))
      << r.err;
}

TEST(DataParallelOutputTest, WritesThePlotOverlayingAnotherRun) {
  Result one = Launch("1", {"--batch", "64", "--csv", Csv("ref")});
  ASSERT_EQ(one.code, 0) << one.err;
  const std::string png = absl::StrCat(OutDir(), "/overlay.png");
  Result r = Launch(
      "2", {"--batch", "32", "--png", "--plot", png, "--compare", Csv("ref")});
  ASSERT_EQ(r.code, 0) << r.err;
  if (absl::StrContains(r.out, "plot: not rendered")) {
    GTEST_SKIP() << "gnuplot is not installed (tools/setup installs it): "
                 << r.out;
  }
  EXPECT_TRUE(absl::StrContains(r.out, absl::StrCat("plot: ", png))) << r.out;
  std::ifstream in(png, std::ios::binary);
  char magic[8] = {};
  in.read(magic, 8);
  EXPECT_EQ(std::string(magic + 1, 3), "PNG");
  std::ifstream gp(png + ".gp");
  std::stringstream script;
  script << gp.rdbuf();
  EXPECT_TRUE(absl::StrContains(script.str(), "2 ranks x batch 32 (cpu)"));
  EXPECT_TRUE(absl::StrContains(script.str(), "1 rank x batch 64 (cpu)"));
}

// The data set is a store object: rank 0 creates it, and a data set larger
// than the store fails with the store's own error (the tests' stores hold
// 64 MiB; 131072 samples of 160 floats take 80 MiB).
TEST(DataParallelDataTest, TheDataSetLivesInTheNodesStore) {
  Result ok = Launch("2", {"--batch", "32", "--steps", "2"});
  ASSERT_EQ(ok.code, 0) << ok.out << ok.err;
  EXPECT_TRUE(absl::StrContains(
      ok.out, "data: 8192 samples (5 MiB) in the node's store, read in place"))
      << ok.out;
  Result big =
      Launch("2", {"--batch", "32", "--steps", "2", "--samples", "131072"});
  EXPECT_EQ(big.code, 1) << big.out << big.err;
  EXPECT_TRUE(absl::StrContains(big.err, "requested 83886080 bytes"))
      << big.err;
}

// GPUs CUDA sees under this process's CUDA_VISIBLE_DEVICES (one rank each
// with --nproc-per-node gpu), not the driver's whole list; 0 without CUDA or
// a GPU. A driver CUDA cannot use fails the test.
int VisibleGpus() {
  if (!gpu::GetBuildInfo().cuda || gpu::DriverGpuCount() == 0) return 0;
  absl::StatusOr<int> n = gpu::CudaDeviceCount();
  EXPECT_TRUE(n.ok()) << n.status();
  return n.ok() ? *n : 0;
}

bool HaveGpu() { return VisibleGpus() > 0; }

// With no --device flag the binary takes a GPU when one is there (each rank
// its own) and the CPU otherwise, and says why.
TEST(DataParallelDeviceTest, AutoPicksWhatIsPresent) {
  Result r = Launch(HaveGpu() ? "gpu" : "2",
                    {"--batch", "32", "--steps", "5", "--device", "auto"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  if (HaveGpu()) {
    EXPECT_TRUE(absl::StrContains(r.out, "device=cuda")) << r.out;
    EXPECT_TRUE(absl::StrContains(r.out, "(every rank has its own)")) << r.out;
  } else {
    EXPECT_TRUE(absl::StrContains(r.out, "device=cpu")) << r.out;
    EXPECT_TRUE(absl::StrContains(r.out, gpu::GetBuildInfo().cuda
                                             ? "CPU: rank 0: no GPU visible"
                                             : "shoal was built without CUDA"))
        << r.out;
  }
}

TEST(DataParallelDeviceTest, ForcingTheCpuUsesTheCpuEvenWithAGpu) {
  Result r = Launch("1", {"--batch", "32", "--steps", "5", "--device", "cpu"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "CPU: rank 0: --device cpu")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "device=cpu")) << r.out;
}

TEST(DataParallelDeviceTest, ForcingAMissingGpuIsAClearError) {
  if (HaveGpu()) GTEST_SKIP() << "this machine has a GPU";
  Result r = Launch("1", {"--device", "gpu"});
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(absl::StrContains(r.err, "--device gpu, but")) << r.err;
}

// With a GPU: one rank per GPU through NCCL against the CPU path's curve.
TEST(DataParallelDeviceTest, GpuPathFollowsTheCpuLossCurve) {
  if (!gpu::GetBuildInfo().cuda) GTEST_SKIP() << "built without CUDA";
  const int gpus = VisibleGpus();
  if (gpus == 0) GTEST_SKIP() << "no GPU visible to CUDA on this machine";
  Result cpu = Launch("1", {"--batch", absl::StrCat(32 * gpus), "--device",
                            "cpu", "--csv", Csv("cpu_ref")});
  ASSERT_EQ(cpu.code, 0) << cpu.err;
  Result g =
      Launch("gpu", {"--batch", "32", "--device", "gpu", "--csv", Csv("gpu")});
  ASSERT_EQ(g.code, 0) << g.out << g.err;
  EXPECT_TRUE(absl::StrContains(g.out, "device=cuda")) << g.out;
  const std::vector<double> a = Losses(Csv("cpu_ref")), b = Losses(Csv("gpu"));
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(b[i], a[i], 1e-3 * a[i]) << "step " << i + 1;
  }
}

}  // namespace
}  // namespace shoal
