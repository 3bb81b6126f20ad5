// NcclCommunicator on one rank (world 1, which NCCL allows on one GPU; Create
// does not touch the rendezvous then). Without a GPU the GPU tests skip with
// the reason; in a build without CUDA Create says "built without CUDA".
#include "collectives/nccl/nccl_communicator.h"

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "collectives/reduce_op.h"
#include "collectives/rendezvous/in_memory_rendezvous.h"
#include "gpu/gpu_info.h"
#include "gtest/gtest.h"
#include "ipc/tensor_meta.h"

#if defined(SHOAL_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace shoal::collectives {
namespace {

// A rendezvous of this process alone: Create with world 1 never calls it.
std::unique_ptr<Rendezvous> LocalRendezvous() {
  return std::make_unique<InMemoryRendezvous>();
}

#if !defined(SHOAL_WITH_CUDA)

TEST(NcclCommunicatorTest, BuiltWithoutCuda) {
  std::unique_ptr<Rendezvous> kv = LocalRendezvous();
  ASSERT_NE(kv, nullptr);
  auto c = NcclCommunicator::Create(*kv, "stub", 0, 1, 0);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(c.status().message().find("built without CUDA"), std::string::npos)
      << c.status();
}

#else  // SHOAL_WITH_CUDA

// "" when a GPU is visible, else why the GPU tests skip.
std::string NoGpuReason() {
  absl::StatusOr<int> n = gpu::CudaDeviceCount();
  if (!n.ok()) return absl::StrCat("CudaDeviceCount: ", n.status().ToString());
  if (*n == 0) return "no GPU visible (CudaDeviceCount() == 0)";
  return "";
}

#define SKIP_WITHOUT_GPU()                         \
  do {                                             \
    const std::string reason_ = NoGpuReason();     \
    if (!reason_.empty()) GTEST_SKIP() << reason_; \
  } while (0)

#define ASSERT_CUDA(call) ASSERT_EQ((call), cudaSuccess) << #call

TEST(NcclCommunicatorTest, ArgumentsAreCheckedBeforeTheGpu) {
  std::unique_ptr<Rendezvous> kv = LocalRendezvous();
  ASSERT_NE(kv, nullptr);
  for (auto [rank, world] : {std::pair{1, 1}, {-1, 2}, {0, 0}}) {
    auto c = NcclCommunicator::Create(*kv, "args", rank, world, 0);
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument)
        << c.status();
  }
}

TEST(NcclCommunicatorTest, NoGpuIsFailedPrecondition) {
  absl::StatusOr<int> n = gpu::CudaDeviceCount();
  ASSERT_TRUE(n.ok()) << n.status();
  if (*n > 0) GTEST_SKIP() << *n << " GPU(s) visible: tested elsewhere";
  std::unique_ptr<Rendezvous> kv = LocalRendezvous();
  ASSERT_NE(kv, nullptr);
  auto c = NcclCommunicator::Create(*kv, "nogpu", 0, 1, 0);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(c.status().message().find("no GPU"), std::string::npos)
      << c.status();
  std::printf("no GPU: %s\n", c.status().ToString().c_str());
}

// Device memory freed at scope exit.
struct DeviceBuffer {
  explicit DeviceBuffer(size_t n) : bytes(n) {
    if (cudaMalloc(&ptr, n == 0 ? 1 : n) != cudaSuccess) ptr = nullptr;
  }
  ~DeviceBuffer() {
    if (ptr != nullptr) cudaFree(ptr);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* ptr = nullptr;
  size_t bytes;
};

// Small integers, exact in f32 and bf16 (and through sum/avg over one rank).
std::vector<char> Pattern(DType dtype, int64_t count) {
  std::vector<char> host(count * DTypeSize(dtype));
  for (int64_t i = 0; i < count; ++i) {
    const float v = static_cast<float>(i % 97) - 48.0f;
    if (dtype == DType::kF32) {
      std::memcpy(host.data() + i * 4, &v, 4);
    } else {  // bf16: the upper half of the f32
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      const uint16_t half = static_cast<uint16_t>(bits >> 16);
      std::memcpy(host.data() + i * 2, &half, 2);
    }
  }
  return host;
}

class OneRankTest
    : public ::testing::TestWithParam<std::tuple<DType, int64_t> > {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_GPU();
    kv_ = LocalRendezvous();
    ASSERT_NE(kv_, nullptr);
    auto c = NcclCommunicator::Create(*kv_, "one-rank", 0, 1, 0);
    ASSERT_TRUE(c.ok()) << c.status();
    comm_ = std::move(*c);
    EXPECT_EQ(comm_->rank(), 0);
    EXPECT_EQ(comm_->size(), 1);
    EXPECT_NE(comm_->stream(), nullptr);
  }

  // Fills `out` with 0xff, runs `op`, synchronises, and checks that `out`
  // holds `expected`.
  template <typename Op>
  void Check(const char* name, const DeviceBuffer& out,
             const std::vector<char>& expected, Op op) {
    SCOPED_TRACE(name);
    ASSERT_CUDA(cudaMemsetAsync(out.ptr, 0xff, out.bytes,
                                static_cast<cudaStream_t>(comm_->stream())));
    const absl::Status st = op();
    ASSERT_TRUE(st.ok()) << st;
    absl::Status s = comm_->Synchronize(nullptr, absl::Seconds(60));
    ASSERT_TRUE(s.ok()) << s;
    std::vector<char> got(out.bytes);
    ASSERT_CUDA(
        cudaMemcpy(got.data(), out.ptr, out.bytes, cudaMemcpyDeviceToHost));
    ASSERT_EQ(got.size(), expected.size());
    const size_t esize = DTypeSize(std::get<0>(GetParam()));
    for (size_t i = 0; i < got.size(); i += esize) {
      ASSERT_EQ(std::memcmp(got.data() + i, expected.data() + i, esize), 0)
          << "first difference at element " << i / esize;
    }
  }

  std::unique_ptr<Rendezvous> kv_;
  std::unique_ptr<NcclCommunicator> comm_;
};

TEST_P(OneRankTest, CollectivesAreTheIdentity) {
  const DType dtype = std::get<0>(GetParam());
  const int64_t count = std::get<1>(GetParam());
  const std::vector<char> host = Pattern(dtype, count);
  DeviceBuffer in(host.size()), out(host.size());
  ASSERT_NE(in.ptr, nullptr);
  ASSERT_NE(out.ptr, nullptr);
  ASSERT_CUDA(
      cudaMemcpy(in.ptr, host.data(), host.size(), cudaMemcpyHostToDevice));
  // From pageable memory the copy may still be in flight, and the
  // communicator's stream is non-blocking: it would not wait for it.
  ASSERT_CUDA(cudaDeviceSynchronize());
  NcclCommunicator& c = *comm_;
  const void* src = in.ptr;
  void* dst = out.ptr;
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin,
                      ReduceOp::kMax, ReduceOp::kAvg}) {
    Check(absl::StrCat("all_reduce ", ReduceOpName(op)).c_str(), out, host,
          [&] { return c.AllReduce(src, dst, count, dtype, op); });
  }
  Check("broadcast", out, host,
        [&] { return c.Broadcast(src, dst, count, dtype, 0); });
  Check("reduce", out, host,
        [&] { return c.Reduce(src, dst, count, dtype, ReduceOp::kSum, 0); });
  Check("all_gather", out, host,
        [&] { return c.AllGather(src, dst, count, dtype); });
  Check("reduce_scatter", out, host, [&] {
    return c.ReduceScatter(src, dst, count, dtype, ReduceOp::kSum);
  });
  Check("all_to_all", out, host,
        [&] { return c.AllToAll(src, dst, count, dtype); });

  // In place: `in` keeps its values.
  ASSERT_TRUE(c.AllReduce(in.ptr, in.ptr, count, dtype, ReduceOp::kSum).ok());
  ASSERT_TRUE(c.Synchronize().ok());
  std::vector<char> got(host.size());
  ASSERT_CUDA(
      cudaMemcpy(got.data(), in.ptr, got.size(), cudaMemcpyDeviceToHost));
  EXPECT_EQ(got, host);
  EXPECT_FALSE(c.aborted());
}

INSTANTIATE_TEST_SUITE_P(
    Sizes, OneRankTest,
    ::testing::Combine(::testing::Values(DType::kF32, DType::kBF16),
                       ::testing::Values(int64_t{1}, int64_t{1000},
                                         int64_t{1} << 20)),
    [](const auto& info) {
      return absl::StrCat(DTypeName(std::get<0>(info.param)), "_",
                          std::get<1>(info.param));
    });

std::unique_ptr<NcclCommunicator> OneRank(Rendezvous& kv,
                                          const std::string& name,
                                          NcclOptions options = {}) {
  auto c = NcclCommunicator::Create(kv, name, 0, 1, 0, options);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(*c) : nullptr;
}

TEST(NcclCommunicatorTest, BadArgumentsDoNotAbort) {
  SKIP_WITHOUT_GPU();
  std::unique_ptr<Rendezvous> kv = LocalRendezvous();
  ASSERT_NE(kv, nullptr);
  std::unique_ptr<NcclCommunicator> c = OneRank(*kv, "bad-args");
  ASSERT_NE(c, nullptr);
  DeviceBuffer buf(64);
  ASSERT_NE(buf.ptr, nullptr);
  const std::vector<absl::Status> bad = {
      c->AllReduce(buf.ptr, buf.ptr, 4, DType::kU8, ReduceOp::kSum),
      c->AllReduce(buf.ptr, buf.ptr, 4, DType::kF32, static_cast<ReduceOp>(9)),
      c->AllReduce(buf.ptr, buf.ptr, -1, DType::kF32, ReduceOp::kSum),
      c->AllReduce(nullptr, buf.ptr, 4, DType::kF32, ReduceOp::kSum),
      c->Broadcast(buf.ptr, buf.ptr, 4, DType::kF32, 1),
      c->Reduce(buf.ptr, buf.ptr, 4, DType::kF32, ReduceOp::kSum, -1),
      c->Send(buf.ptr, 4, DType::kF32, 1),
      c->Recv(buf.ptr, 4, DType::kF32, 2),
  };
  for (const absl::Status& s : bad) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  }
  EXPECT_FALSE(c->aborted());
  EXPECT_TRUE(
      c->AllReduce(buf.ptr, buf.ptr, 16, DType::kI64, ReduceOp::kMax).ok());
  EXPECT_TRUE(c->Synchronize().ok());
}

TEST(NcclCommunicatorTest, AnotherStreamAndTest) {
  SKIP_WITHOUT_GPU();
  std::unique_ptr<Rendezvous> kv = LocalRendezvous();
  ASSERT_NE(kv, nullptr);
  std::unique_ptr<NcclCommunicator> c = OneRank(*kv, "streams");
  ASSERT_NE(c, nullptr);
  cudaStream_t s = nullptr;
  ASSERT_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const int64_t n = int64_t{1} << 22;
  DeviceBuffer buf(n * 4);
  ASSERT_NE(buf.ptr, nullptr);
  ASSERT_CUDA(cudaMemsetAsync(buf.ptr, 0, buf.bytes, s));
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(
        c->AllReduce(buf.ptr, buf.ptr, n, DType::kF32, ReduceOp::kSum, s).ok());
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  bool done = false;
  while (!done && absl::Now() < deadline) {
    absl::StatusOr<bool> t = c->Test(s);
    ASSERT_TRUE(t.ok()) << t.status();
    done = *t;
  }
  EXPECT_TRUE(done);
  EXPECT_TRUE(c->Synchronize(s, absl::Seconds(10)).ok());
  ASSERT_CUDA(cudaStreamDestroy(s));
}

// Blocks the stream it is enqueued on until *flag becomes true.
void CUDART_CB BlockUntil(void* flag) {
  auto* f = static_cast<std::atomic<bool>*>(flag);
  while (!f->load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

// One rank cannot strand a peer, so the stream is held by a host function:
// Synchronize times out, aborts, and every later call fails fast.
TEST(NcclCommunicatorTest, SynchronizeTimeoutAborts) {
  SKIP_WITHOUT_GPU();
  std::unique_ptr<Rendezvous> kv = LocalRendezvous();
  ASSERT_NE(kv, nullptr);
  std::unique_ptr<NcclCommunicator> c = OneRank(*kv, "timeout");
  ASSERT_NE(c, nullptr);
  DeviceBuffer buf(4096);
  ASSERT_NE(buf.ptr, nullptr);
  ASSERT_TRUE(
      c->AllReduce(buf.ptr, buf.ptr, 1024, DType::kF32, ReduceOp::kSum).ok());
  ASSERT_TRUE(c->Synchronize().ok());

  std::atomic<bool> release{false};
  ASSERT_CUDA(cudaLaunchHostFunc(static_cast<cudaStream_t>(c->stream()),
                                 BlockUntil, &release));
  // The abort frees device memory, which waits for the host function: release
  // it from another thread.
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    release = true;
  });
  absl::StatusOr<bool> t = c->Test();
  EXPECT_TRUE(t.ok() && !*t) << t.status();
  const absl::Time start = absl::Now();
  absl::Status s = c->Synchronize(nullptr, absl::Milliseconds(100));
  const absl::Duration waited = absl::Now() - start;
  releaser.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_GE(waited, absl::Milliseconds(100));
  EXPECT_TRUE(c->aborted());
  std::printf("Synchronize: %s\n", s.ToString().c_str());
  absl::Status after =
      c->AllReduce(buf.ptr, buf.ptr, 1024, DType::kF32, ReduceOp::kSum);
  EXPECT_EQ(after.code(), absl::StatusCode::kFailedPrecondition) << after;
  EXPECT_EQ(c->Synchronize().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(c->Test().status().code(), absl::StatusCode::kFailedPrecondition);
  // The destructor of an aborted communicator only frees its stream.
}

TEST(NcclCommunicatorTest, DestroyWithPendingWork) {
  SKIP_WITHOUT_GPU();
  std::unique_ptr<Rendezvous> kv = LocalRendezvous();
  ASSERT_NE(kv, nullptr);
  DeviceBuffer buf(int64_t{1} << 24);
  ASSERT_NE(buf.ptr, nullptr);
  for (int round = 0; round < 3; ++round) {
    std::unique_ptr<NcclCommunicator> c = OneRank(*kv, "reused");
    ASSERT_NE(c, nullptr);
    ASSERT_TRUE(c->AllReduce(buf.ptr, buf.ptr, buf.bytes / 4, DType::kF32,
                             ReduceOp::kSum)
                    .ok());
    // No Synchronize: the destructor flushes (ncclCommFinalize) first.
  }
}

#endif  // SHOAL_WITH_CUDA

}  // namespace
}  // namespace shoal::collectives
