#include "gpu/gpu_info.h"

#include <cstdio>
#include <string>

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

TEST(GpuInfoTest, ADriverOlderThanTheRuntimeIsNotNoGpu) {
  absl::StatusOr<int> n = DeviceCountFrom(CudaCountOutcome::kInsufficientDriver,
                                          0, 12080, 13000, 1);
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string m(n.status().message());
  EXPECT_NE(m.find("supports CUDA up to 12.8"), std::string::npos) << m;
  EXPECT_NE(m.find("CUDA 13.0 runtime"), std::string::npos) << m;
  EXPECT_NE(m.find("update the driver"), std::string::npos) << m;
  EXPECT_EQ(m.find("no GPU"), std::string::npos) << m;
}

TEST(GpuInfoTest, NoDriverAtAllIsNoGpu) {
  EXPECT_EQ(
      *DeviceCountFrom(CudaCountOutcome::kInsufficientDriver, 0, 0, 13000, 0),
      0);
  EXPECT_EQ(*DeviceCountFrom(CudaCountOutcome::kNoDevice, 0, 13000, 13000, 0),
            0);
  EXPECT_EQ(*DeviceCountFrom(CudaCountOutcome::kSuccess, 3, 13000, 13000, 3),
            3);
}

TEST(GpuInfoTest, GpusWhoseDriverLibraryIsMissingAreAnError) {
  absl::StatusOr<int> n =
      DeviceCountFrom(CudaCountOutcome::kInsufficientDriver, 0, 0, 13000, 2);
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(n.status().message().find("libcuda.so.1"), std::string::npos)
      << n.status();
  EXPECT_NE(n.status().message().find("lists 2 GPU(s)"), std::string::npos)
      << n.status();
}

}  // namespace
}  // namespace shoal::gpu
