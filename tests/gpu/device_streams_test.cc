// A device object read on several streams, without a GPU: a real store
// service (on a thread) and real clients over the fake CUDA calls
// (gpu/fake_cuda_ipc.h), whose streams a test holds busy one at a time. A
// process's reference to a device object is dropped only once the work it
// queued on every stream that used the object has finished, not only the
// last stream's: until then the store keeps the block from new objects.
#include <unistd.h>

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gpu/fake_cuda_ipc.h"
#include "gtest/gtest.h"
#include "shm/store_client.h"
#include "shm/store_service_thread.h"

namespace shoal::shm {
namespace {

constexpr uint64_t kMiB = 1 << 20;
void* const kStreamA = reinterpret_cast<void*>(0xa0);
void* const kStreamB = reinterpret_cast<void*>(0xb0);
void* const kProducerStream = reinterpret_cast<void*>(0xc0);

class DeviceStreamsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cuda_ = std::make_shared<gpu::FakeCudaIpc>(1);
    StoreOptions o;
    o.job_id = absl::StrCat("devstreams", getpid());
    o.store_bytes = 64 * kMiB;
    o.prefault_ahead_bytes = 0;
    o.cuda = cuda_;
    o.device.chunk_bytes = 16 * kMiB;
    auto store = StoreServiceThread::Start(o);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    producer_ = Connect("producer");
    consumer_ = Connect("consumer");
    ASSERT_NE(producer_, nullptr);
    ASSERT_NE(consumer_, nullptr);
  }

  void TearDown() override {
    cuda_->SetStreamsBusy(false);
    cuda_->SetStreamBusy(kStreamA, false);
    cuda_->SetStreamBusy(kStreamB, false);
    producer_.reset();
    consumer_.reset();
    store_.reset();
  }

  std::unique_ptr<StoreClient> Connect(const std::string& name) {
    StoreClientOptions o;
    o.cuda = cuda_;
    auto c = store_->Connect(name, o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }

  // A sealed 4 KiB object on cuda:0 that the producer no longer holds.
  ObjectId Produce() {
    const ObjectId id = ObjectId::Random();
    auto buf = producer_->Create(
        id, TensorMeta::Contiguous(DType::kF32, {1024}, Device::Cuda(0)));
    EXPECT_TRUE(buf.ok()) << buf.status();
    EXPECT_TRUE(producer_->Seal(id, kProducerStream).ok());
    EXPECT_TRUE(producer_->Release(id).ok());
    return id;
  }

  uint64_t Referenced() {
    auto st = producer_->Stats();
    EXPECT_TRUE(st.ok()) << st.status();
    return st.ok() ? st->referenced_objects() : 0;
  }

  // Waits (up to 2 s) for the consumer's deferred releases to be collected
  // and the store to see `want` referenced objects; the count seen last.
  uint64_t SettleTo(uint64_t want) {
    uint64_t n = Referenced();
    for (int i = 0; i < 200 && n != want; ++i) {
      (void)consumer_->Get(ObjectId::Random());  // collects releases
      absl::SleepFor(absl::Milliseconds(10));
      n = Referenced();
    }
    return n;
  }

  std::shared_ptr<gpu::FakeCudaIpc> cuda_;
  std::unique_ptr<StoreServiceThread> store_;
  std::unique_ptr<StoreClient> producer_, consumer_;  // go before store_
};

TEST_F(DeviceStreamsTest, AReleaseWaitsForEveryStreamThatReadTheObject) {
  const ObjectId id = Produce();
  // Read on stream A, then again on stream B while the first is held.
  auto a = consumer_->Get(id, absl::ZeroDuration(), kStreamA);
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = consumer_->Get(id, absl::ZeroDuration(), kStreamB);
  ASSERT_TRUE(b.ok()) << b.status();
  // Stream A's kernel still runs; stream B is idle.
  cuda_->SetStreamBusy(kStreamA, true);
  ASSERT_TRUE(consumer_->Release(id).ok());
  ASSERT_TRUE(consumer_->Release(id).ok());
  ASSERT_TRUE(producer_->Delete(id).ok());
  // The reference stays while A may read the block.
  EXPECT_EQ(SettleTo(0), 1u)
      << "the reference was dropped while stream A's work was pending";
  auto other = producer_->Create(
      ObjectId::Random(),
      TensorMeta::Contiguous(DType::kF32, {1024}, Device::Cuda(0)));
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_NE(other->data, a->data) << "the block was reused while being read";
  ASSERT_TRUE(producer_->Abort(other->id).ok());
  // A finishes: the reference goes.
  cuda_->SetStreamBusy(kStreamA, false);
  EXPECT_EQ(SettleTo(0), 0u);
}

TEST_F(DeviceStreamsTest, TheLastStreamBusyAloneAlsoHoldsTheReference) {
  const ObjectId id = Produce();
  auto a = consumer_->Get(id, absl::ZeroDuration(), kStreamA);
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = consumer_->Get(id, absl::ZeroDuration(), kStreamB);
  ASSERT_TRUE(b.ok()) << b.status();
  cuda_->SetStreamBusy(kStreamB, true);
  ASSERT_TRUE(consumer_->Release(id).ok());
  ASSERT_TRUE(consumer_->Release(id).ok());
  EXPECT_EQ(SettleTo(0), 1u);
  cuda_->SetStreamBusy(kStreamB, false);
  EXPECT_EQ(SettleTo(0), 0u);
  ASSERT_TRUE(producer_->Delete(id).ok());
}

TEST_F(DeviceStreamsTest, OneStreamReleasesAsSoonAsItsWorkIsDone) {
  const ObjectId id = Produce();
  auto a = consumer_->Get(id, absl::ZeroDuration(), kStreamA);
  ASSERT_TRUE(a.ok()) << a.status();
  cuda_->SetStreamBusy(kStreamB, true);  // a stream that never read it
  ASSERT_TRUE(consumer_->Release(id).ok());
  EXPECT_EQ(SettleTo(0), 0u);
  ASSERT_TRUE(producer_->Delete(id).ok());
}

}  // namespace
}  // namespace shoal::shm
