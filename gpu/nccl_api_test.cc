// NCCL is loaded at run time: a missing library is a clear error, not a
// program that cannot start.
#include "gtest/gtest.h"

#if defined(SHOAL_WITH_CUDA)
#include <cstdio>

#include "absl/strings/match.h"
#include "gpu/nccl_api.h"

namespace shoal::gpu {
namespace {

TEST(NcclApiTest, AMissingLibraryIsAClearError) {
  absl::StatusOr<const NcclApi*> api = LoadNcclFrom("libnccl-absent.so.2");
  ASSERT_FALSE(api.ok());
  EXPECT_EQ(api.status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string m(api.status().message());
  EXPECT_TRUE(absl::StrContains(m, "cannot load NCCL (libnccl-absent.so.2)"))
      << m;
  EXPECT_TRUE(absl::StrContains(m, "LD_LIBRARY_PATH")) << m;
  EXPECT_TRUE(absl::StrContains(m, "nvidia/nccl/lib")) << m;
}

TEST(NcclApiTest, ALibraryWithoutNcclIsAClearError) {
  // libm is everywhere and has no NCCL symbols.
  absl::StatusOr<const NcclApi*> api = LoadNcclFrom("libm.so.6");
  ASSERT_FALSE(api.ok());
  EXPECT_EQ(api.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(
      absl::StrContains(api.status().message(), "it has no ncclGetVersion"))
      << api.status();
}

TEST(NcclApiTest, TheInstalledNcclLoadsWhenOnTheLibraryPath) {
  absl::StatusOr<const NcclApi*> api = LoadNccl();
  if (!api.ok()) {
    GTEST_SKIP() << "no NCCL on this machine's library path: " << api.status();
  }
  int version = 0;
  ASSERT_EQ((*api)->GetVersion(&version), ncclSuccess);
  EXPECT_GE(version, 21900);
  std::printf("NCCL %d loaded\n", version);
  EXPECT_EQ(*LoadNccl(), *api) << "loaded once per process";
}

}  // namespace
}  // namespace shoal::gpu

#else
TEST(NcclApiTest, BuiltWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }
#endif
