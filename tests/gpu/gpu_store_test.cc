// Device objects on a real GPU, with real processes: a `shoal store` process
// owning the device memory and helper processes (gpu_store_helper) producing
// and consuming through CUDA IPC. Every test skips, saying why, without CUDA
// or without a GPU; the bookkeeping is also covered without a GPU by
// tests/shm/device_store_test.cc.
#include <signal.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/subprocess.h"
#include "gpu/device_visibility.h"
#include "gpu/gpu_info.h"
#include "gtest/gtest.h"
#include "tests/testing/store_fixture.h"
#include "tests/testing/test_env.h"

namespace shoal {
namespace {

constexpr uint64_t kGiB = 1ull << 30;

class Helper {
 public:
  static std::unique_ptr<Helper> Start(const std::string& endpoint) {
    SubprocessOptions o;
    o.pipe_stdin = true;
    o.pipe_stdout = true;
    o.env["SHOAL_STORE_ENDPOINT"] = endpoint;
    auto p = Subprocess::Start(
        {testing::RunfilePath("tests/gpu/gpu_store_helper")}, o);
    EXPECT_TRUE(p.ok()) << p.status();
    if (!p.ok()) return nullptr;
    auto h = std::make_unique<Helper>();
    h->p_ = *std::move(p);
    return h;
  }
  // Sends a command; returns the reply's words (empty on failure).
  std::vector<std::string> Ask(const std::string& cmd) {
    if (!p_.WriteLine(cmd).ok()) return {};
    auto line = p_.ReadLine(absl::Minutes(2));
    if (!line.ok()) return {};
    EXPECT_FALSE(absl::StartsWith(*line, "error")) << cmd << ": " << *line;
    return absl::StrSplit(*line, ' ');
  }
  Subprocess& process() { return p_; }

 private:
  Subprocess p_;
};

class GpuStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!gpu::GetBuildInfo().cuda) GTEST_SKIP() << "built without CUDA";
    if (gpu::DriverGpuCount() == 0) {
      GTEST_SKIP() << "no GPU: neither /proc/driver/nvidia/gpus nor "
                      "/dev/nvidia<N> shows one on this machine";
    }
    // The objects live in device memory; the /dev/shm segment holds only
    // the table and the clients' slots.
    auto store = testing::StoreProcess::Start(
        64 << 20, {"--device-bytes", "2G", "--device-chunk-bytes", "256M"});
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    producer_ = Helper::Start(store_->endpoint());
    consumer_ = Helper::Start(store_->endpoint());
    ASSERT_NE(producer_, nullptr);
    ASSERT_NE(consumer_, nullptr);
  }

  std::unique_ptr<testing::StoreProcess> store_;
  std::unique_ptr<Helper> producer_, consumer_;
};

TEST_F(GpuStoreTest, TwoProcessesExchangeAGibibyte) {
  auto put = producer_->Ask(absl::StrCat("put ", kGiB, " 42"));
  ASSERT_EQ(put.size(), 3u);
  auto read = consumer_->Ask("read " + put[1]);
  ASSERT_EQ(read.size(), 3u);
  EXPECT_EQ(read[1], put[2]);  // the same bytes arrived
}

TEST_F(GpuStoreTest, TheSecondGetFindsTheChunkMapped) {
  auto put = producer_->Ask(absl::StrCat("put ", 64 << 20, " 1"));
  ASSERT_EQ(put.size(), 3u);
  auto twice = consumer_->Ask("twice " + put[1]);
  ASSERT_EQ(twice.size(), 3u);
  double first = 0, second = 0;
  ASSERT_TRUE(absl::SimpleAtod(twice[1], &first));
  ASSERT_TRUE(absl::SimpleAtod(twice[2], &second));
  std::printf("first get %.1f us (maps the chunk), second %.1f us\n", first,
              second);
  EXPECT_LT(second, first / 5);
  EXPECT_LT(second, 200.0);
}

TEST_F(GpuStoreTest, DeletedMemoryIsReusedOnlyAfterTheConsumerReleases) {
  auto put = producer_->Ask(absl::StrCat("put ", 256 << 20, " 7"));
  ASSERT_EQ(put.size(), 3u);
  ASSERT_EQ(consumer_->Ask("hold " + put[1]).size(), 1u);
  ASSERT_EQ(producer_->Ask("delete " + put[1]).size(), 1u);
  // The deleted object is gone for new Gets (NotFound while delete-pending),
  // and its id names nothing new.
  EXPECT_EQ(producer_->Ask("contains " + put[1]),
            std::vector<std::string>({"contains", "0"}));
  // More new objects than the free device memory holds (2 GiB in 256 MiB
  // chunks, one held): the store evicts among them, and none may land on the
  // held one.
  for (int i = 0; i < 8; ++i) {
    ASSERT_EQ(
        producer_->Ask(absl::StrCat("put ", 256 << 20, " ", 100 + i)).size(),
        3u);
  }
  // Through the buffer the consumer still holds, not a fresh Get.
  auto read = consumer_->Ask("readheld " + put[1]);
  ASSERT_EQ(read.size(), 3u);
  EXPECT_EQ(read[1], put[2]);
  ASSERT_EQ(consumer_->Ask("release " + put[1]).size(), 1u);
}

TEST_F(GpuStoreTest, AKilledConsumerLeaksNothing) {
  std::vector<std::string> ids;
  for (int i = 0; i < 2; ++i) {
    auto put = producer_->Ask(absl::StrCat("put ", kGiB, " ", i));
    ASSERT_EQ(put.size(), 3u);
    ids.push_back(put[1]);
    ASSERT_EQ(consumer_->Ask("hold " + put[1]).size(), 1u);
  }
  consumer_->process().Signal(SIGKILL);
  (void)consumer_->process().Wait(absl::Seconds(10));
  for (const std::string& id : ids)
    ASSERT_EQ(producer_->Ask("delete " + id).size(), 1u);
  // The store released the dead consumer's references and freed both: with
  // its 2 GiB limit reached, two new 1 GiB objects fit only in that memory.
  std::vector<std::string> stats;
  for (int i = 0; i < 100; ++i) {
    stats = producer_->Ask("stats");
    if (stats.size() == 3 && stats[2] == "0") break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_EQ(stats.size(), 3u);
  EXPECT_EQ(stats[2], "0");
  EXPECT_EQ(producer_->Ask(absl::StrCat("put ", kGiB, " 8")).size(), 3u);
  EXPECT_EQ(producer_->Ask(absl::StrCat("put ", kGiB, " 9")).size(), 3u);
}

TEST_F(GpuStoreTest, TheEventOrdersTheConsumersReadAfterTheProducersWork) {
  auto slow = producer_->Ask(absl::StrCat("slow ", kGiB));
  ASSERT_EQ(slow.size(), 2u);
  auto read = consumer_->Ask("read " + slow[1]);  // right away
  ASSERT_EQ(read.size(), 3u);
  EXPECT_EQ(read[2], "1") << "the consumer saw bytes before the last memset";
}

}  // namespace
}  // namespace shoal
