#include "gpu/device_pointer.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

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

}  // namespace
}  // namespace shoal::gpu
