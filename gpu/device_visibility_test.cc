#include "gpu/device_visibility.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shoal::gpu {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kUuid[] = "GPU-8f6c3a2e-1b2c-4d5e-9f00-112233445566";
constexpr char kUuid2[] = "GPU-00000000-1111-2222-3333-444444444444";
constexpr char kMig[] = "MIG-4f6b2c3d-aaaa-bbbb-cccc-ddddeeeeffff";
constexpr char kLegacyMig[] =
    "MIG-GPU-8f6c3a2e-1b2c-4d5e-9f00-112233445566/1/0";

std::vector<std::string> MustParse(const std::string& value) {
  absl::StatusOr<std::vector<std::string>> parsed = ParseVisibleDevices(value);
  EXPECT_TRUE(parsed.ok()) << value << ": " << parsed.status();
  return parsed.ok() ? *parsed : std::vector<std::string>{};
}

TEST(ParseVisibleDevicesTest, Indices) {
  EXPECT_THAT(MustParse("0"), ElementsAre("0"));
  EXPECT_THAT(MustParse("3,1,2"), ElementsAre("3", "1", "2"));
  EXPECT_THAT(MustParse("007"), ElementsAre("7"));  // canonical form
}

TEST(ParseVisibleDevicesTest, Uuid) {
  EXPECT_THAT(MustParse(kUuid), ElementsAre(kUuid));
  EXPECT_THAT(MustParse("GPU-8F6C"), ElementsAre("GPU-8F6C"));  // prefix, kept
}

TEST(ParseVisibleDevicesTest, MigBothForms) {
  EXPECT_THAT(MustParse(kMig), ElementsAre(kMig));
  EXPECT_THAT(MustParse(kLegacyMig), ElementsAre(kLegacyMig));
  EXPECT_THAT(MustParse(std::string(kMig) + "," + kLegacyMig),
              ElementsAre(kMig, kLegacyMig));
}

TEST(ParseVisibleDevicesTest, Mixed) {
  EXPECT_THAT(MustParse(std::string("2,") + kUuid + "," + kMig),
              ElementsAre("2", kUuid, kMig));
}

TEST(ParseVisibleDevicesTest, WhitespaceAroundEntriesIsTrimmed) {
  EXPECT_THAT(MustParse(" 0 ,\t1,  " + std::string(kUuid) + "\n"),
              ElementsAre("0", "1", kUuid));
}

TEST(ParseVisibleDevicesTest, EmptyMeansNoDevices) {
  EXPECT_THAT(MustParse(""), IsEmpty());
  EXPECT_THAT(MustParse("   "), IsEmpty());
}

TEST(ParseVisibleDevicesTest, NegativeIndexEndsTheList) {
  EXPECT_THAT(MustParse("-1"), IsEmpty());
  EXPECT_THAT(MustParse("0,1,-1,2"), ElementsAre("0", "1"));
  // Entries after the terminator are not even parsed, as in CUDA.
  EXPECT_THAT(MustParse("3,-1,garbage,3"), ElementsAre("3"));
}

TEST(ParseVisibleDevicesTest, DuplicatesAreRejected) {
  for (const std::string& value : std::vector<std::string>{
           "0,1,0", "1,01", std::string(kUuid) + "," + kUuid,
           std::string(kUuid) + ",GPU-8F6C3A2E-1B2C-4D5E-9F00-112233445566"}) {
    absl::StatusOr<std::vector<std::string>> parsed =
        ParseVisibleDevices(value);
    ASSERT_FALSE(parsed.ok()) << value;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(parsed.status().message(), HasSubstr("duplicate"));
    EXPECT_THAT(parsed.status().message(), HasSubstr("\"" + value + "\""));
  }
  // Different devices are not duplicates.
  EXPECT_THAT(MustParse(std::string(kUuid) + "," + kUuid2),
              ElementsAre(kUuid, kUuid2));
}

TEST(ParseVisibleDevicesTest, GarbageIsRejectedNamingTheEntry) {
  absl::StatusOr<std::vector<std::string>> parsed =
      ParseVisibleDevices("0, foo ,1");
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(parsed.status().message(), HasSubstr("\"foo\""));
  EXPECT_THAT(parsed.status().message(), HasSubstr("\"0, foo ,1\""));

  for (const char* bad :
       {"0,,1", "0,", ",0", "GPU-", "GPU-xyz", "gpu-1234", "MIG-", "MIG-GPU-",
        "MIG-GPU-abcd/1", "MIG-GPU-abcd/1/x", "MIG-GPU-abcd/1/0/2", "+1", "1.0",
        "0 1", "99999999999999999999"}) {
    absl::StatusOr<std::vector<std::string>> result = ParseVisibleDevices(bad);
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

TEST(DiscoverGpusTest, FlagOverridesEnvironment) {
  absl::StatusOr<std::vector<std::string>> gpus =
      DiscoverGpus(std::string("0,1,2,3"), std::string("5,6"), 8);
  ASSERT_TRUE(gpus.ok()) << gpus.status();
  EXPECT_THAT(*gpus, ElementsAre("5", "6"));

  // An empty flag means "no GPU", even with GPUs in the environment.
  gpus = DiscoverGpus(std::string("0,1"), std::string(""), 8);
  ASSERT_TRUE(gpus.ok()) << gpus.status();
  EXPECT_THAT(*gpus, IsEmpty());
}

TEST(DiscoverGpusTest, EnvironmentOverridesDriverCount) {
  absl::StatusOr<std::vector<std::string>> gpus =
      DiscoverGpus(std::string("3,5"), std::nullopt, 8);
  ASSERT_TRUE(gpus.ok()) << gpus.status();
  EXPECT_THAT(*gpus, ElementsAre("3", "5"));

  gpus = DiscoverGpus(std::string(""), std::nullopt, 8);
  ASSERT_TRUE(gpus.ok()) << gpus.status();
  EXPECT_THAT(*gpus, IsEmpty());
}

TEST(DiscoverGpusTest, FallsBackToDriverCount) {
  absl::StatusOr<std::vector<std::string>> gpus =
      DiscoverGpus(std::nullopt, std::nullopt, 3);
  ASSERT_TRUE(gpus.ok()) << gpus.status();
  EXPECT_THAT(*gpus, ElementsAre("0", "1", "2"));

  gpus = DiscoverGpus(std::nullopt, std::nullopt, 0);
  ASSERT_TRUE(gpus.ok()) << gpus.status();
  EXPECT_THAT(*gpus, IsEmpty());

  EXPECT_EQ(DiscoverGpus(std::nullopt, std::nullopt, -1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(DiscoverGpusTest, ErrorsNameTheSource) {
  absl::StatusOr<std::vector<std::string>> gpus =
      DiscoverGpus(std::nullopt, std::string("0,x"), 2);
  ASSERT_FALSE(gpus.ok());
  EXPECT_EQ(gpus.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(gpus.status().message(), HasSubstr("--gpus: "));
  EXPECT_THAT(gpus.status().message(), HasSubstr("\"x\""));

  gpus = DiscoverGpus(std::string("0,0"), std::nullopt, 2);
  ASSERT_FALSE(gpus.ok());
  EXPECT_EQ(gpus.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(gpus.status().message(), HasSubstr("CUDA_VISIBLE_DEVICES: "));
}

// Sets or unsets CUDA_VISIBLE_DEVICES for one scope and restores it after.
class ScopedCudaVisibleDevices {
 public:
  explicit ScopedCudaVisibleDevices(const std::optional<std::string>& value) {
    if (const char* old = std::getenv(kName); old != nullptr) saved_ = old;
    Set(value);
  }
  ~ScopedCudaVisibleDevices() { Set(saved_); }
  ScopedCudaVisibleDevices(const ScopedCudaVisibleDevices&) = delete;
  ScopedCudaVisibleDevices& operator=(const ScopedCudaVisibleDevices&) = delete;

 private:
  static constexpr char kName[] = "CUDA_VISIBLE_DEVICES";
  static void Set(const std::optional<std::string>& value) {
    if (value.has_value()) {
      setenv(kName, value->c_str(), /*overwrite=*/1);
    } else {
      unsetenv(kName);
    }
  }
  std::optional<std::string> saved_;
};

// A fake /proc and /dev under the test's temporary folder.
class DriverGpuCountTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A fresh private folder (mkdtemp), under $TEST_TMPDIR when set.
    const char* tmp = std::getenv("TEST_TMPDIR");
    absl::StatusOr<TempDir> made = TempDir::Create(
        absl::StrCat(
            ::testing::UnitTest::GetInstance()->current_test_info()->name(),
            "."),
        tmp != nullptr ? tmp : "");
    ASSERT_TRUE(made.ok()) << made.status();
    dir_ = *std::move(made);
    root_ = dir_.path();
    std::filesystem::create_directories(proc() + "/driver");
    std::filesystem::create_directories(dev());
  }
  void TearDown() override { dir_ = TempDir(); }

  std::string proc() const { return (root_ / "proc").string(); }
  std::string dev() const { return (root_ / "dev").string(); }
  void Touch(const std::string& path) {
    std::filesystem::create_directories(
        std::filesystem::path(path).parent_path());
    std::FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr) << path;
    std::fclose(f);
  }
  int Count() { return DriverGpuCountAt(proc(), dev()); }

  TempDir dir_;
  std::filesystem::path root_;
};

TEST_F(DriverGpuCountTest, NoDriverMeansNoGpu) {
  EXPECT_EQ(Count(), 0);
  EXPECT_EQ(DriverGpuCountAt(proc() + "/missing", dev() + "/missing"), 0);
}

TEST_F(DriverGpuCountTest, ProcListsOneFolderPerGpu) {
  std::filesystem::create_directories(proc() +
                                      "/driver/nvidia/gpus/0000:18:00.0");
  std::filesystem::create_directories(proc() +
                                      "/driver/nvidia/gpus/0000:3b:00.0");
  Touch(dev() + "/nvidia0");  // /proc wins: /dev is not read
  EXPECT_EQ(Count(), 2);
}

TEST_F(DriverGpuCountTest, FallsBackToDeviceNodesWithoutProc) {
  for (const char* name :
       {"nvidia0", "nvidia1", "nvidia7", "nvidiactl", "nvidia-uvm",
        "nvidia-uvm-tools", "nvidia-modeset", "nvidia", "nvidiax1", "null"}) {
    Touch(dev() + "/" + name);
  }
  std::filesystem::create_directories(dev() + "/nvidia-caps");
  EXPECT_EQ(Count(), 3);
}

TEST_F(DriverGpuCountTest, AnEmptyProcFolderFallsBackToo) {
  std::filesystem::create_directories(proc() + "/driver/nvidia/gpus");
  Touch(dev() + "/nvidia0");
  EXPECT_EQ(Count(), 1);
}

TEST(DiscoverGpusFromEnvironmentTest, ReadsTheEnvironment) {
  const char* before = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::optional<std::string> original =
      before ? std::optional<std::string>(before) : std::nullopt;
  {
    ScopedCudaVisibleDevices env(std::string(" 3, ") + kUuid);
    absl::StatusOr<std::vector<std::string>> gpus =
        DiscoverGpusFromEnvironment(std::nullopt);
    ASSERT_TRUE(gpus.ok()) << gpus.status();
    EXPECT_THAT(*gpus, ElementsAre("3", kUuid));

    gpus = DiscoverGpusFromEnvironment(std::string("1"));
    ASSERT_TRUE(gpus.ok()) << gpus.status();
    EXPECT_THAT(*gpus, ElementsAre("1"));
  }
  {
    ScopedCudaVisibleDevices env(std::string("0,bogus"));
    absl::StatusOr<std::vector<std::string>> gpus =
        DiscoverGpusFromEnvironment(std::nullopt);
    EXPECT_EQ(gpus.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(gpus.status().message(), HasSubstr("CUDA_VISIBLE_DEVICES: "));
  }
  {
    ScopedCudaVisibleDevices env(std::nullopt);
    absl::StatusOr<std::vector<std::string>> gpus =
        DiscoverGpusFromEnvironment(std::nullopt);
    ASSERT_TRUE(gpus.ok()) << gpus.status();
    const int driver = DriverGpuCount();
    ASSERT_EQ(gpus->size(), static_cast<size_t>(driver));
    for (int i = 0; i < driver; ++i) EXPECT_EQ((*gpus)[i], std::to_string(i));
  }
  const char* after = std::getenv("CUDA_VISIBLE_DEVICES");
  EXPECT_EQ(after ? std::optional<std::string>(after) : std::nullopt, original);
}

TEST(ChildCudaDeviceOrderTest, PciBusIdUnlessTheParentChose) {
  const char* before = std::getenv("CUDA_DEVICE_ORDER");
  const std::optional<std::string> saved =
      before ? std::optional<std::string>(before) : std::nullopt;
  unsetenv("CUDA_DEVICE_ORDER");
  EXPECT_EQ(ChildCudaDeviceOrder(), "PCI_BUS_ID");
  setenv("CUDA_DEVICE_ORDER", "FASTEST_FIRST", 1);
  EXPECT_EQ(ChildCudaDeviceOrder(), "FASTEST_FIRST");
  if (saved.has_value()) {
    setenv("CUDA_DEVICE_ORDER", saved->c_str(), 1);
  } else {
    unsetenv("CUDA_DEVICE_ORDER");
  }
}

TEST(AssignGpusTest, ContiguousBlocks) {
  absl::StatusOr<std::vector<std::vector<int>>> a = AssignGpus(3, 2, 7);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_THAT(
      *a, ElementsAre(ElementsAre(0, 1), ElementsAre(2, 3), ElementsAre(4, 5)));

  a = AssignGpus(2, 1, 2);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_THAT(*a, ElementsAre(ElementsAre(0), ElementsAre(1)));

  a = AssignGpus(0, 4, 0);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_THAT(*a, IsEmpty());
}

TEST(AssignGpusTest, ZeroGpusPerWorkerGivesEmptyLists) {
  absl::StatusOr<std::vector<std::vector<int>>> a = AssignGpus(3, 0, 0);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_THAT(*a, ElementsAre(IsEmpty(), IsEmpty(), IsEmpty()));
}

TEST(AssignGpusTest, TooManyIsAnActionableError) {
  absl::StatusOr<std::vector<std::vector<int>>> a = AssignGpus(4, 2, 3);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(a.status().message(),
            "asked for 4 workers x 2 GPUs = 8 GPUs but only 3 are visible "
            "(CUDA_VISIBLE_DEVICES / --gpus)");

  a = AssignGpus(1, 1, 0);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().message(),
            "asked for 1 worker x 1 GPU = 1 GPU but only 0 are visible "
            "(CUDA_VISIBLE_DEVICES / --gpus)");

  // No int overflow in workers x gpus_per_worker.
  a = AssignGpus(1 << 20, 1 << 20, 8);
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(), HasSubstr("= 1099511627776 GPUs"));
}

TEST(AssignGpusTest, NegativeArgumentsAreRejected) {
  EXPECT_EQ(AssignGpus(-1, 1, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AssignGpus(1, -1, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AssignGpus(1, 1, -4).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ChildVisibleDevicesTest, MapsThroughTheParentList) {
  const std::vector<std::string> parent = {"3", "5"};
  absl::StatusOr<std::string> child = ChildVisibleDevices(parent, {1});
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_EQ(*child, "5");

  child = ChildVisibleDevices(parent, {1, 0});
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_EQ(*child, "5,3");
}

TEST(ChildVisibleDevicesTest, UuidAndMigKeptVerbatim) {
  const std::vector<std::string> parent =
      MustParse(std::string(kUuid) + ", 2 ," + kMig + "," + kLegacyMig);
  absl::StatusOr<std::string> child = ChildVisibleDevices(parent, {0, 2, 3});
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_EQ(*child, std::string(kUuid) + "," + kMig + "," + kLegacyMig);
  // The child's value parses back to the same entries.
  EXPECT_THAT(MustParse(*child), ElementsAre(kUuid, kMig, kLegacyMig));
}

TEST(ChildVisibleDevicesTest, EmptyLogicalMeansNoGpu) {
  absl::StatusOr<std::string> child = ChildVisibleDevices({"3", "5"}, {});
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_EQ(*child, "");
  EXPECT_THAT(MustParse(*child), IsEmpty());
}

TEST(ChildVisibleDevicesTest, OutOfRangeIsRejected) {
  const std::vector<std::string> parent = {"3", "5"};
  for (int bad : {2, -1, 100}) {
    absl::StatusOr<std::string> child = ChildVisibleDevices(parent, {0, bad});
    ASSERT_FALSE(child.ok()) << bad;
    EXPECT_EQ(child.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(child.status().message(), HasSubstr(std::to_string(bad)));
  }
  EXPECT_EQ(ChildVisibleDevices({}, {0}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ChildVisibleDevicesTest, RepeatedIndexIsRejected) {
  EXPECT_EQ(ChildVisibleDevices({"3", "5"}, {1, 1}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shoal::gpu
