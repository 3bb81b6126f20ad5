#include "gpu/gpu_info.h"

#include <cstdio>

#include "gpu/device_visibility.h"
#include "gtest/gtest.h"

namespace shoal::gpu {
namespace {

TEST(GpuInfoTest, BuildInfoMatchesTheBuild) {
  BuildInfo info = GetBuildInfo();
#if defined(SHOAL_WITH_CUDA)
  EXPECT_TRUE(info.cuda);
  EXPECT_FALSE(info.cuda_runtime.empty());
  EXPECT_FALSE(info.nccl.empty()) << "NCCL should load in a CUDA build";
  std::printf("built with CUDA %s, NCCL %s\n", info.cuda_runtime.c_str(),
              info.nccl.c_str());
#else
  EXPECT_FALSE(info.cuda);
  absl::StatusOr<int> n = CudaDeviceCount();
  EXPECT_EQ(n.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(n.status().message().find("built without CUDA"), std::string::npos);
#endif
}

TEST(GpuInfoTest, DeviceCountIsZeroOrMoreNeverAnError) {
#if !defined(SHOAL_WITH_CUDA)
  GTEST_SKIP() << "built without CUDA";
#else
  absl::StatusOr<int> n = CudaDeviceCount();
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_GE(*n, 0);
  if (*n == 0) {
    std::printf("no GPU visible (driver GPUs: %d)\n", DriverGpuCount());
  } else {
    std::printf("%d GPU(s) visible\n", *n);
  }
#endif
}

}  // namespace
}  // namespace shoal::gpu
