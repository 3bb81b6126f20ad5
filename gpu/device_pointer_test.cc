// Where a pointer lives. The first test runs before anything in this process
// could load CUDA: host memory is found to be host memory without loading
// the CUDA driver, so a CPU-only rank on a GPU machine creates no context.
// The last one, with a GPU, allocates device memory and finds it.
#include "gpu/device_pointer.h"

#include <dlfcn.h>

#include <vector>

#include "gmock/gmock.h"
#include "gpu/device_visibility.h"
#include "gpu/gpu_info.h"
#include "gtest/gtest.h"

#if defined(SHOAL_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace shoal::gpu {
namespace {

using ::testing::HasSubstr;

// A "device" buffer: host memory the fake calls device 3's, so that a test
// can check it is refused and never read or written.
float fake_device[4];

int FakeDeviceOfPointer(const void* p) {
  const char* c = static_cast<const char*>(p);
  const char* begin = reinterpret_cast<const char*>(fake_device);
  return c >= begin && c < begin + sizeof(fake_device) ? 3 : -1;
}

class DevicePointerTest : public ::testing::Test {
 protected:
  void TearDown() override { SetDeviceOfPointerForTesting(nullptr); }
};

bool CudaDriverLoaded() {
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (h != nullptr) dlclose(h);
  return h != nullptr;
}

TEST_F(DevicePointerTest, ACpuOnlyProcessNeverLoadsTheCudaDriver) {
  ASSERT_FALSE(CudaDriverLoaded()) << "loaded before the test";
  std::vector<float> host(16);
  EXPECT_EQ(DeviceOfPointer(host.data()), -1);
  EXPECT_TRUE(CheckHostMemory("all_reduce", {host.data(), host.data()}).ok());
  EXPECT_FALSE(CudaDriverLoaded())
      << "DeviceOfPointer loaded the CUDA driver in a process without CUDA "
         "(on a GPU machine: a CUDA context in a CPU-only rank); driver GPUs: "
      << DriverGpuCount();
}

TEST_F(DevicePointerTest, HostMemoryIsHost) {
  std::vector<float> host(16);
  // Without a GPU (or without CUDA) this never initialises CUDA; with one,
  // cudaPointerGetAttributes says "host" for unregistered memory.
  EXPECT_EQ(DeviceOfPointer(host.data()), -1);
  EXPECT_EQ(DeviceOfPointer(nullptr), -1);
  EXPECT_TRUE(CheckHostMemory("test", {host.data(), nullptr}).ok());
}

TEST_F(DevicePointerTest, ADevicePointerIsRefusedNamingTheDevice) {
  SetDeviceOfPointerForTesting(&FakeDeviceOfPointer);
  std::vector<float> host(16);
  EXPECT_EQ(DeviceOfPointer(fake_device), 3);
  absl::Status s = CheckHostMemory("all_reduce", {host.data(), fake_device});
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("all_reduce"));
  EXPECT_THAT(s.message(), HasSubstr("CUDA device memory (device 3)"));
  EXPECT_THAT(s.message(), HasSubstr("NCCL"));
  SetDeviceOfPointerForTesting(nullptr);
  EXPECT_EQ(DeviceOfPointer(host.data()), -1);
}

// Last: it loads CUDA in this process.
TEST_F(DevicePointerTest, DeviceMemoryIsFoundOnceCudaIsLoaded) {
#if !defined(SHOAL_WITH_CUDA)
  GTEST_SKIP() << "built without CUDA";
#else
  absl::StatusOr<int> n = CudaDeviceCount();
  if (!n.ok()) GTEST_SKIP() << "CudaDeviceCount: " << n.status();
  if (*n == 0) GTEST_SKIP() << "no GPU visible (CudaDeviceCount() == 0)";
  void* dev = nullptr;
  ASSERT_EQ(cudaMalloc(&dev, 4096), cudaSuccess);
  EXPECT_TRUE(CudaDriverLoaded());
  EXPECT_EQ(DeviceOfPointer(dev), 0);
  EXPECT_EQ(DeviceOfPointer(static_cast<char*>(dev) + 100), 0);
  std::vector<float> host(16);
  EXPECT_EQ(DeviceOfPointer(host.data()), -1);
  void* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(&pinned, 4096), cudaSuccess);
  EXPECT_EQ(DeviceOfPointer(pinned), -1);
  absl::Status s = CheckHostMemory("all_reduce", {host.data(), dev});
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  cudaFreeHost(pinned);
  cudaFree(dev);
#endif
}

}  // namespace
}  // namespace shoal::gpu
