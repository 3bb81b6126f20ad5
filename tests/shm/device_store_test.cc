// Device objects' bookkeeping, without a GPU: a real store service (on a
// thread) and real clients, with the CUDA calls faked (gpu/fake_cuda_ipc.h:
// "device memory" is host memory, handles name fake allocations). What is
// checked is what the store decides: which chunk and offset an object gets,
// when a process opens and closes a chunk's handle, that events are recorded
// at Seal and waited on at Get, that a released block is reused only after
// the releasing process's work on it finished, and who keeps the memory
// alive. The real CUDA path is tests/gpu/gpu_store_test.cc (needs a GPU).
#include <unistd.h>

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gpu/fake_cuda_ipc.h"
#include "gtest/gtest.h"
#include "shm/store_client.h"
#include "shm/store_service_thread.h"

namespace shoal::shm {
namespace {

constexpr uint64_t kMiB = 1 << 20;
void* const kStream = reinterpret_cast<void*>(0x5);  // any non-null stream

class DeviceStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(std::make_shared<gpu::FakeCudaIpc>(2)); }
  void TearDown() override { Stop(); }

  void Start(std::shared_ptr<gpu::FakeCudaIpc> cuda,
             uint64_t device_limit = ~0ull) {
    cuda_ = std::move(cuda);
    StoreOptions o;
    o.job_id = absl::StrCat("devtest", getpid(), "x", counter_++);
    o.store_bytes = 64 * kMiB;
    o.prefault_ahead_bytes = 0;
    o.cuda = cuda_;
    o.device.chunk_bytes = 16 * kMiB;
    o.device.limit_bytes = device_limit;
    auto store = StoreServiceThread::Start(o);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    producer_ = Connect("producer", cuda_);
    consumer_ = Connect("consumer", cuda_);
  }

  void Stop() {
    producer_.reset();
    consumer_.reset();
    store_.reset();
  }

  std::unique_ptr<StoreClient> Connect(const std::string& name,
                                       std::shared_ptr<gpu::CudaIpc> cuda) {
    StoreClientOptions o;
    o.cuda = std::move(cuda);
    auto c = store_->Connect(name, o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }

  static TensorMeta OnGpu(int64_t floats, int device = 0) {
    return TensorMeta::Contiguous(DType::kF32, {floats}, Device::Cuda(device));
  }

  // Creates, fills with `value`, seals on kStream, releases; returns the id.
  ObjectId Produce(int64_t floats, float value, int device = 0) {
    ObjectId id = ObjectId::Random();
    auto buf = producer_->Create(id, OnGpu(floats, device));
    EXPECT_TRUE(buf.ok()) << buf.status();
    if (!buf.ok()) return id;
    std::vector<float> host(floats, value);
    std::memcpy(buf->data, host.data(), buf->nbytes);  // fake device memory
    EXPECT_TRUE(producer_->Seal(id, kStream).ok());
    EXPECT_TRUE(producer_->Release(id).ok());
    return id;
  }

  uint64_t Referenced() {
    auto st = consumer_->Stats();
    EXPECT_TRUE(st.ok());
    return st.ok() ? st->referenced_objects() : 0;
  }

  static int counter_;
  std::shared_ptr<gpu::FakeCudaIpc> cuda_;
  std::unique_ptr<StoreServiceThread> store_;
  std::unique_ptr<StoreClient> producer_, consumer_;  // go before store_
};

int DeviceStoreTest::counter_ = 0;

TEST_F(DeviceStoreTest, ProducerWritesConsumerReadsTheSameMemoryInOrder) {
  const int records = cuda_->records();
  ObjectId id = Produce(1024, 2.5f);
  EXPECT_EQ(cuda_->records(), records + 1);  // the event, at Seal
  const int waits = cuda_->stream_waits();
  auto view = consumer_->Get(id, absl::ZeroDuration(), kStream);
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(cuda_->stream_waits(), waits + 1);  // the consumer's stream waits
  EXPECT_EQ(view->meta.device, Device::Cuda(0));
  EXPECT_EQ(view->nbytes, 4096u);
  float first = 0;
  std::memcpy(&first, view->data, 4);
  EXPECT_EQ(first, 2.5f);
  EXPECT_EQ(cuda_->allocations(), 1);  // one chunk, made by the store
  ASSERT_TRUE(consumer_->Release(id).ok());
}

TEST_F(DeviceStoreTest, AChunkIsOpenedOncePerProcessWhileReferenced) {
  ObjectId a = Produce(256, 1), b = Produce(256, 2);  // same chunk
  const int opens = cuda_->mem_opens(), open_now = cuda_->open_mappings();
  auto va = consumer_->Get(a);
  ASSERT_TRUE(va.ok()) << va.status();
  EXPECT_EQ(cuda_->mem_opens(), opens + 1);
  auto vb = consumer_->Get(b);  // cached: no open
  ASSERT_TRUE(vb.ok()) << vb.status();
  auto va2 = consumer_->Get(a);
  ASSERT_TRUE(va2.ok());
  EXPECT_EQ(cuda_->mem_opens(), opens + 1);
  EXPECT_EQ(va2->data, va->data);
  EXPECT_EQ(vb->data, va->data + 1024);  // offsets inside the chunk
  ASSERT_TRUE(consumer_->Release(a).ok());
  ASSERT_TRUE(consumer_->Release(b).ok());
  EXPECT_EQ(cuda_->open_mappings(), open_now + 1);  // a is still held
  ASSERT_TRUE(consumer_->Release(a).ok());
  EXPECT_EQ(cuda_->open_mappings(), open_now);  // last reference: closed
  ASSERT_TRUE(consumer_->Get(a).ok());
  EXPECT_EQ(cuda_->mem_opens(), opens + 2);  // opened again
  ASSERT_TRUE(consumer_->Release(a).ok());
}

TEST_F(DeviceStoreTest, ABlockIsReusedOnlyAfterTheReleasingWorkFinished) {
  ObjectId id = Produce(1024, 1);
  auto view = consumer_->Get(id, absl::ZeroDuration(), kStream);
  ASSERT_TRUE(view.ok());
  const uint8_t* block = view->data;
  // The consumer's stream still has work queued when it releases.
  cuda_->SetStreamsBusy(true);
  ASSERT_TRUE(consumer_->Release(id).ok());
  ASSERT_TRUE(producer_->Delete(id).ok());
  EXPECT_EQ(Referenced(), 1u);  // the release waits
  auto other = producer_->Create(ObjectId::Random(), OnGpu(1024));
  ASSERT_TRUE(other.ok());
  EXPECT_NE(other->data, block);  // not handed out while possibly read
  ASSERT_TRUE(producer_->Abort(other->id).ok());
  // The work finishes; the consumer's next store call drops the reference,
  // and the store frees the block.
  cuda_->SetStreamsBusy(false);
  (void)consumer_->Get(ObjectId::Random());
  for (int i = 0; i < 100 && Referenced() != 0; ++i)
    absl::SleepFor(absl::Milliseconds(10));
  EXPECT_EQ(Referenced(), 0u);
  ObjectId next = ObjectId::Random();
  bool reused = false;
  for (int i = 0; i < 100 && !reused; ++i) {
    auto again = producer_->Create(next, OnGpu(1024));
    ASSERT_TRUE(again.ok()) << again.status();
    reused = again->data == block;
    ASSERT_TRUE(producer_->Abort(next).ok());
    if (!reused) absl::SleepFor(absl::Milliseconds(10));  // the reclaim hint
  }
  EXPECT_TRUE(reused);
}

TEST_F(DeviceStoreTest, TheStoreKeepsTheMemoryAfterTheProducerLeaves) {
  ObjectId id = Produce(4096, 7);
  producer_.reset();  // the producer's process would exit here
  auto view = consumer_->Get(id);
  ASSERT_TRUE(view.ok()) << view.status();
  float last = 0;
  std::memcpy(&last, view->data + view->nbytes - 4, 4);
  EXPECT_EQ(last, 7.0f);
  EXPECT_EQ(cuda_->allocations(), 1);
  ASSERT_TRUE(consumer_->Release(id).ok());
}

TEST_F(DeviceStoreTest, StatsShowEachGpusArenaAndTheDeviceTraffic) {
  auto before = consumer_->Stats();
  ASSERT_TRUE(before.ok());
  EXPECT_EQ(before->devices_size(), 0);  // no arena before a device object
  ObjectId id = Produce(1024, 1.0f);
  auto view = consumer_->Get(id, absl::ZeroDuration(), kStream);
  ASSERT_TRUE(view.ok()) << view.status();
  auto st = consumer_->Stats();
  ASSERT_TRUE(st.ok());
  ASSERT_EQ(st->devices_size(), 1);
  EXPECT_EQ(st->devices(0).ordinal(), 0u);
  EXPECT_EQ(st->devices(0).capacity_bytes(), 16 * kMiB);  // one chunk
  EXPECT_GE(st->devices(0).used_bytes(), 4096u);
  EXPECT_EQ(st->creates() - before->creates(), 1u);
  EXPECT_EQ(st->created_bytes() - before->created_bytes(), 4096u);
  EXPECT_EQ(st->gets() - before->gets(), 1u);
  EXPECT_EQ(st->get_bytes() - before->get_bytes(), 4096u);
  ASSERT_TRUE(consumer_->Release(id).ok());
}

TEST_F(DeviceStoreTest, ADisconnectedConsumersReferencesAreReleased) {
  ObjectId id = Produce(1024, 1);
  ASSERT_TRUE(consumer_->Get(id).ok());
  EXPECT_EQ(Referenced(), 1u);
  consumer_.reset();  // without releasing
  consumer_ = Connect("consumer2", cuda_);
  for (int i = 0; i < 100 && Referenced() != 0; ++i)
    absl::SleepFor(absl::Milliseconds(10));
  EXPECT_EQ(Referenced(), 0u);
  EXPECT_TRUE(producer_->Delete(id).ok());
}

TEST_F(DeviceStoreTest, PutFromHostAndCopyToHostRoundTrip) {
  std::vector<float> in(300000);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i);
  ObjectId id = ObjectId::Random();
  ASSERT_TRUE(producer_->Put(id, OnGpu(in.size()), in.data()).ok());
  ASSERT_TRUE(producer_->Release(id).ok());
  std::vector<float> out(in.size());
  ASSERT_TRUE(consumer_->CopyToHost(id, out.data(), out.size() * 4).ok());
  EXPECT_EQ(out, in);
  EXPECT_FALSE(consumer_->CopyToHost(id, out.data(), 4).ok());  // wrong size
}

TEST_F(DeviceStoreTest, AnObjectOnAGpuTheProcessDoesNotSeeIsRefused) {
  ObjectId id = Produce(256, 1, /*device=*/1);
  // A consumer that sees only the first GPU.
  auto narrow = Connect("narrow", std::make_shared<gpu::FakeCudaIpc>(1));
  auto view = narrow->Get(id);
  ASSERT_FALSE(view.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(view.status())) << view.status();
  EXPECT_NE(view.status().message().find("does not see"), std::string::npos);
  EXPECT_EQ(Referenced(), 0u);  // the failed get left no reference
  // A process that sees it names it by its own ordinal (here the same).
  auto same = consumer_->Get(id);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->meta.device, Device::Cuda(1));
  ASSERT_TRUE(consumer_->Release(id).ok());
}

TEST_F(DeviceStoreTest, FullDeviceArenasEvictUnreferencedObjectsFirst) {
  Stop();
  Start(std::make_shared<gpu::FakeCudaIpc>(1), /*device_limit=*/32 * kMiB);
  std::vector<ObjectId> ids;
  for (int i = 0; i < 6; ++i) ids.push_back(Produce(kMiB, i));  // 4 MiB each
  auto held = consumer_->Get(ids[0]);  // oldest, but referenced
  ASSERT_TRUE(held.ok());
  for (int i = 0; i < 4; ++i) ids.push_back(Produce(kMiB, 10 + i));
  auto st = consumer_->Stats();
  ASSERT_TRUE(st.ok());
  EXPECT_GT(st->evictions(), 0u);
  EXPECT_TRUE(*consumer_->Contains(ids[0]));   // referenced: kept
  EXPECT_FALSE(*consumer_->Contains(ids[1]));  // least recently used: gone
  EXPECT_TRUE(*consumer_->Contains(ids.back()));
  EXPECT_LE(cuda_->allocated_bytes(), 32 * kMiB);
  // Everything referenced: a new object does not fit.
  std::vector<ObjectBuffer> all;
  for (const ObjectId& id : ids) {
    auto v = consumer_->Get(id);
    if (v.ok()) all.push_back(*v);
  }
  auto too_much = producer_->Create(ObjectId::Random(), OnGpu(4 * kMiB));
  ASSERT_FALSE(too_much.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(too_much.status()))
      << too_much.status();
  for (const ObjectBuffer& v : all) ASSERT_TRUE(consumer_->Release(v.id).ok());
  ASSERT_TRUE(consumer_->Release(ids[0]).ok());
}

TEST_F(DeviceStoreTest, AbortWaitsForTheProducersWorkThenFrees) {
  ObjectId id = ObjectId::Random();
  auto buf = producer_->Create(id, OnGpu(1024));
  ASSERT_TRUE(buf.ok());
  const uint8_t* block = buf->data;
  ASSERT_TRUE(producer_->Abort(id).ok());
  EXPECT_EQ(cuda_->pending_marks(), 0);
  auto again = producer_->Create(ObjectId::Random(), OnGpu(1024));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->data, block);  // freed at once, after the wait
  ASSERT_TRUE(producer_->Abort(again->id).ok());
}

// Device objects are charged to their store account as host objects are: the
// reserved bytes (rounded up to 256), from Create until freed; a create the
// account refuses allocates nothing on the GPU.
TEST_F(DeviceStoreTest, DeviceObjectsAreChargedToTheirAccount) {
  constexpr uint32_t kAccount = 5;
  const CreateOptions in{kAccount};
  ASSERT_TRUE(producer_->SetAccountLimit(kAccount, 8192).ok());
  ObjectId a = ObjectId::Random(), b = ObjectId::Random();
  auto buf = producer_->Create(a, OnGpu(1000), in);  // 4000 bytes
  ASSERT_TRUE(buf.ok()) << buf.status();
  EXPECT_EQ(*producer_->AccountUsage(kAccount), 4096u);
  const int allocations = cuda_->allocations();
  const uint64_t objects = consumer_->Stats()->objects();
  auto refused = producer_->Create(b, OnGpu(1025), in);  // 4100 → 4352
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(IsAccountLimitError(refused.status())) << refused.status();
  EXPECT_EQ(cuda_->allocations(), allocations);
  EXPECT_EQ(consumer_->Stats()->objects(), objects);
  ASSERT_TRUE(producer_->Create(b, OnGpu(1024), in).ok());
  EXPECT_EQ(*producer_->AccountUsage(kAccount), 8192u);
  // Sealed and handed to another client: still charged.
  ASSERT_TRUE(producer_->Seal(a, kStream).ok());
  ASSERT_TRUE(producer_->Transfer(a, consumer_->client_slot()).ok());
  EXPECT_EQ(*producer_->AccountUsage(kAccount), 8192u);
  // Aborted: uncharged at once; deleted and released: uncharged once the
  // releasing stream's work is done (the fake's streams are idle).
  ASSERT_TRUE(producer_->Abort(b).ok());
  EXPECT_EQ(*producer_->AccountUsage(kAccount), 4096u);
  ASSERT_TRUE(consumer_->Delete(a).ok());
  ASSERT_TRUE(consumer_->Release(a).ok());
  for (int i = 0; i < 100 && *producer_->AccountUsage(kAccount) != 0; ++i) {
    (void)consumer_->Stats();  // a later call collects the deferred release
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(*producer_->AccountUsage(kAccount), 0u);
}

TEST_F(DeviceStoreTest, AnEvictedDeviceObjectIsUncharged) {
  Stop();
  Start(std::make_shared<gpu::FakeCudaIpc>(1), /*device_limit=*/32 * kMiB);
  constexpr uint32_t kAccount = 5;
  ASSERT_TRUE(producer_->SetAccountLimit(kAccount, 64 * kMiB).ok());
  ObjectId id = ObjectId::Random();
  ASSERT_TRUE(producer_->Create(id, OnGpu(kMiB), CreateOptions{kAccount}).ok());
  ASSERT_TRUE(producer_->Seal(id, kStream).ok());
  ASSERT_TRUE(producer_->Release(id).ok());
  EXPECT_EQ(*producer_->AccountUsage(kAccount), 4 * kMiB);
  for (int i = 0; i < 8; ++i) Produce(kMiB, i);  // 32 MiB more: evicts
  EXPECT_FALSE(*consumer_->Contains(id));
  EXPECT_EQ(*producer_->AccountUsage(kAccount), 0u);
}

}  // namespace
}  // namespace shoal::shm
