// NcclCommunicator's threading contract (nccl_communicator.h), without a GPU:
// the CUDA runtime and NCCL are fakes
// (collectives/nccl/nccl_communicator_testing.h). The fake NCCL records a
// violation whenever two threads are inside NCCL calls on one communicator at
// once, or a call reaches a communicator that was aborted or destroyed (or a
// null one); the fake CUDA streams finish their work at a set time, and a
// stream can be held so that its work never finishes. What is checked:
//   - Synchronize on one thread waits for its own stream's work while other
//     threads enqueue and synchronise other streams (one shared event made a
//     call from another thread move the point it waited for);
//   - an abort from another thread (a Synchronize timing out) never frees
//     the communicator under an enqueue in progress, and every later call
//     fails with FailedPrecondition;
//   - Test from a completer thread beside enqueues;
//   - a Communicator whose NCCL communicator could not be made returns that
//     error at every later CUDA-buffer call, without making it again (its
//     rendezvous key could hold a stale id, and ranks would wait on each
//     other until the timeout).
// ThreadSanitizer runs it too (tools/test), which checks the same contract
// for data races.
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/mutex.h"
#include "collectives/communicator.h"
#include "collectives/nccl/nccl_communicator.h"
#include "collectives/reduce_op.h"
#include "collectives/rendezvous/in_memory_rendezvous.h"
#include "gtest/gtest.h"
#include "ipc/tensor_meta.h"

#if defined(SHOAL_WITH_CUDA)
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "collectives/nccl/nccl_communicator_testing.h"
#include "gpu/device_pointer.h"
#include "gpu/nccl_api.h"

// NCCL's communicator is an opaque struct; the fake defines it.
struct ncclComm {
  std::atomic<int> in_call{0};
  std::atomic<bool> gone{false};
};

namespace shoal::collectives {
namespace {

// ---- what the fakes saw ---------------------------------------------------

Mutex violations_mu;
std::vector<std::string> violations ABSL_GUARDED_BY(violations_mu);

void Violation(std::string what) {
  MutexLock lock(&violations_mu);
  violations.push_back(std::move(what));
}

std::vector<std::string> TakeViolations() {
  MutexLock lock(&violations_mu);
  std::vector<std::string> v;
  v.swap(violations);
  return v;
}

// ---- fake CUDA: streams finish their work at a set time --------------------

struct FakeStream {
  Mutex mu;
  absl::Time done_at ABSL_GUARDED_BY(mu) = absl::InfinitePast();
  bool held ABSL_GUARDED_BY(mu) = false;  // its work never finishes
  absl::Duration op_time ABSL_GUARDED_BY(mu) = absl::ZeroDuration();
};

struct FakeEvent {
  Mutex mu;
  absl::Time done_at ABSL_GUARDED_BY(mu) = absl::InfinitePast();
};

FakeStream* default_stream = new FakeStream;

FakeStream* StreamOf(cudaStream_t s) {
  return s == nullptr ? default_stream : reinterpret_cast<FakeStream*>(s);
}

// Work enqueued on `s` now: it finishes op_time after the stream's last.
void Enqueue(cudaStream_t s) {
  FakeStream* f = StreamOf(s);
  MutexLock lock(&f->mu);
  f->done_at = std::max(f->done_at, absl::Now()) + f->op_time;
}

// Whether the work enqueued on `s` so far finished.
bool StreamDone(cudaStream_t s) {
  FakeStream* f = StreamOf(s);
  MutexLock lock(&f->mu);
  return !f->held && absl::Now() >= f->done_at;
}

cudaError_t FakeGetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}
cudaError_t FakeGetDevice(int* d) {
  *d = 0;
  return cudaSuccess;
}
cudaError_t FakeSetDevice(int d) {
  return d == 0 ? cudaSuccess : cudaErrorInvalidDevice;
}
cudaError_t FakeStreamCreateWithFlags(cudaStream_t* s, unsigned int) {
  *s = reinterpret_cast<cudaStream_t>(new FakeStream);
  return cudaSuccess;
}
cudaError_t FakeStreamDestroy(cudaStream_t s) {
  delete StreamOf(s);
  return cudaSuccess;
}
cudaError_t FakeStreamQuery(cudaStream_t s) {
  return StreamDone(s) ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t FakeEventCreateWithFlags(cudaEvent_t* e, unsigned int) {
  *e = reinterpret_cast<cudaEvent_t>(new FakeEvent);
  return cudaSuccess;
}
cudaError_t FakeEventDestroy(cudaEvent_t e) {
  delete reinterpret_cast<FakeEvent*>(e);
  return cudaSuccess;
}
cudaError_t FakeEventRecord(cudaEvent_t e, cudaStream_t s) {
  FakeStream* f = StreamOf(s);
  absl::Time at;
  {
    MutexLock lock(&f->mu);
    at = f->held ? absl::InfiniteFuture() : f->done_at;
  }
  auto* ev = reinterpret_cast<FakeEvent*>(e);
  MutexLock lock(&ev->mu);
  ev->done_at = at;
  return cudaSuccess;
}
cudaError_t FakeEventQuery(cudaEvent_t e) {
  auto* ev = reinterpret_cast<FakeEvent*>(e);
  MutexLock lock(&ev->mu);
  return absl::Now() >= ev->done_at ? cudaSuccess : cudaErrorNotReady;
}

// ---- fake NCCL ------------------------------------------------------------

// One NCCL call on `comm` in progress, for as long as the object lives; the
// small sleep widens the window in which another thread could overlap it.
class InCall {
 public:
  InCall(ncclComm_t comm, const char* what) : comm_(comm) {
    if (comm_ == nullptr) {
      Violation(absl::StrCat(what, " with a null communicator"));
      return;
    }
    if (comm_->gone.load()) {
      Violation(absl::StrCat(what, " on an aborted or destroyed communicator"));
    }
    if (comm_->in_call.fetch_add(1) != 0) {
      Violation(absl::StrCat(what, " while another thread is in NCCL"));
    }
    absl::SleepFor(absl::Microseconds(20));
  }
  ~InCall() {
    if (comm_ != nullptr) comm_->in_call.fetch_sub(1);
  }

 private:
  ncclComm_t comm_;
};

ncclResult_t FakeGetVersion(int* v) {
  *v = 22800;
  return ncclSuccess;
}
const char* FakeGetErrorString(ncclResult_t) { return "fake NCCL error"; }
const char* FakeGetLastError(ncclComm_t) { return ""; }
ncclResult_t FakeGetUniqueId(ncclUniqueId* id) {
  std::memset(id, 7, sizeof(*id));
  return ncclSuccess;
}
std::atomic<int> inits{0};
std::atomic<bool> fail_inits{false};  // as NCCL refusing two ranks on a GPU

ncclResult_t FakeCommInitRankConfig(ncclComm_t* comm, int, ncclUniqueId, int,
                                    ncclConfig_t*) {
  inits.fetch_add(1);
  if (fail_inits.load()) {
    *comm = nullptr;
    return ncclInvalidUsage;
  }
  // Kept for the test's life, after an abort too, to recognise a use of it.
  static Mutex mu;
  static auto* comms = new std::vector<std::unique_ptr<ncclComm>>;
  MutexLock lock(&mu);
  comms->push_back(std::make_unique<ncclComm>());
  *comm = comms->back().get();
  return ncclSuccess;
}
ncclResult_t FakeCommFinalize(ncclComm_t comm) {
  InCall c(comm, "ncclCommFinalize");
  return ncclSuccess;
}
ncclResult_t FakeCommDestroy(ncclComm_t comm) {
  InCall c(comm, "ncclCommDestroy");
  if (comm != nullptr) comm->gone = true;
  return ncclSuccess;
}
ncclResult_t FakeCommAbort(ncclComm_t comm) {
  InCall c(comm, "ncclCommAbort");
  if (comm != nullptr) comm->gone = true;
  return ncclSuccess;
}
ncclResult_t FakeCommGetAsyncError(ncclComm_t comm, ncclResult_t* state) {
  InCall c(comm, "ncclCommGetAsyncError");
  *state = ncclSuccess;
  return ncclSuccess;
}
ncclResult_t FakeAllReduce(const void*, void*, size_t, ncclDataType_t,
                           ncclRedOp_t, ncclComm_t comm, cudaStream_t s) {
  InCall c(comm, "ncclAllReduce");
  Enqueue(s);
  return ncclSuccess;
}
ncclResult_t FakeBroadcast(const void*, void*, size_t, ncclDataType_t, int,
                           ncclComm_t comm, cudaStream_t s) {
  InCall c(comm, "ncclBroadcast");
  Enqueue(s);
  return ncclSuccess;
}
ncclResult_t FakeReduce(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t,
                        int, ncclComm_t comm, cudaStream_t s) {
  InCall c(comm, "ncclReduce");
  Enqueue(s);
  return ncclSuccess;
}
ncclResult_t FakeAllGather(const void*, void*, size_t, ncclDataType_t,
                           ncclComm_t comm, cudaStream_t s) {
  InCall c(comm, "ncclAllGather");
  Enqueue(s);
  return ncclSuccess;
}
ncclResult_t FakeReduceScatter(const void*, void*, size_t, ncclDataType_t,
                               ncclRedOp_t, ncclComm_t comm, cudaStream_t s) {
  InCall c(comm, "ncclReduceScatter");
  Enqueue(s);
  return ncclSuccess;
}
ncclResult_t FakeSend(const void*, size_t, ncclDataType_t, int, ncclComm_t comm,
                      cudaStream_t s) {
  InCall c(comm, "ncclSend");
  Enqueue(s);
  return ncclSuccess;
}
ncclResult_t FakeRecv(void*, size_t, ncclDataType_t, int, ncclComm_t comm,
                      cudaStream_t s) {
  InCall c(comm, "ncclRecv");
  Enqueue(s);
  return ncclSuccess;
}
ncclResult_t FakeGroupStart() { return ncclSuccess; }
ncclResult_t FakeGroupEnd() { return ncclSuccess; }

const gpu::NcclApi* FakeNccl() {
  static const gpu::NcclApi api = [] {
    gpu::NcclApi a;
    a.GetVersion = &FakeGetVersion;
    a.GetErrorString = &FakeGetErrorString;
    a.GetLastError = &FakeGetLastError;
    a.GetUniqueId = &FakeGetUniqueId;
    a.CommInitRankConfig = &FakeCommInitRankConfig;
    a.CommFinalize = &FakeCommFinalize;
    a.CommDestroy = &FakeCommDestroy;
    a.CommAbort = &FakeCommAbort;
    a.CommGetAsyncError = &FakeCommGetAsyncError;
    a.AllReduce = &FakeAllReduce;
    a.Broadcast = &FakeBroadcast;
    a.Reduce = &FakeReduce;
    a.AllGather = &FakeAllGather;
    a.ReduceScatter = &FakeReduceScatter;
    a.Send = &FakeSend;
    a.Recv = &FakeRecv;
    a.GroupStart = &FakeGroupStart;
    a.GroupEnd = &FakeGroupEnd;
    return a;
  }();
  return &api;
}

const NcclTestingHooks kHooks = {
    .nccl = FakeNccl(),
    .cuda =
        {
            .GetDeviceCount = &FakeGetDeviceCount,
            .GetDevice = &FakeGetDevice,
            .SetDevice = &FakeSetDevice,
            .StreamCreateWithFlags = &FakeStreamCreateWithFlags,
            .StreamDestroy = &FakeStreamDestroy,
            .StreamQuery = &FakeStreamQuery,
            .EventCreateWithFlags = &FakeEventCreateWithFlags,
            .EventDestroy = &FakeEventDestroy,
            .EventRecord = &FakeEventRecord,
            .EventQuery = &FakeEventQuery,
        },
};

// A fake stream whose every operation takes `op_time`.
struct TestStream {
  explicit TestStream(absl::Duration op_time) {
    FakeStreamCreateWithFlags(&s, 0);
    FakeStream* f = StreamOf(s);
    MutexLock lock(&f->mu);
    f->op_time = op_time;
  }
  ~TestStream() { FakeStreamDestroy(s); }
  void Hold() {
    FakeStream* f = StreamOf(s);
    MutexLock lock(&f->mu);
    f->held = true;
  }
  cudaStream_t s = nullptr;
};

// A buffer that is never touched (the fake moves no data).
char buffer[64];

class NcclThreadsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetNcclHooksForTesting(&kHooks);
    TakeViolations();
  }
  void TearDown() override {
    std::vector<std::string> v = TakeViolations();
    EXPECT_TRUE(v.empty()) << v.size() << " violation(s), the first: "
                           << (v.empty() ? "" : v.front());
    SetNcclHooksForTesting(nullptr);
  }

  std::unique_ptr<NcclCommunicator> OneRank(const std::string& name) {
    InMemoryRendezvous kv;
    auto c = NcclCommunicator::Create(kv, name, 0, 1, 0);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }
};

absl::Status AllReduceOn(NcclCommunicator& c, cudaStream_t s) {
  return c.AllReduce(buffer, buffer, 4, DType::kF32, ReduceOp::kSum, s);
}

TEST_F(NcclThreadsTest, SynchronizeWaitsForItsOwnStreamWhileOthersSynchronize) {
  std::unique_ptr<NcclCommunicator> c = OneRank("own-stream");
  ASSERT_NE(c, nullptr);
  TestStream slow(absl::Milliseconds(15)), fast(absl::ZeroDuration());
  std::atomic<bool> stop{false};
  std::atomic<int> early{0}, fast_rounds{0};
  std::thread other([&] {
    while (!stop.load()) {
      EXPECT_TRUE(AllReduceOn(*c, fast.s).ok());
      EXPECT_TRUE(c->Synchronize(fast.s, absl::Seconds(30)).ok());
      fast_rounds.fetch_add(1);
    }
  });
  for (int i = 0; i < 12; ++i) {
    ASSERT_TRUE(AllReduceOn(*c, slow.s).ok());
    absl::Status s = c->Synchronize(slow.s, absl::Seconds(30));
    ASSERT_TRUE(s.ok()) << s;
    // Returned: the slow stream's work must be done.
    if (!StreamDone(slow.s)) early.fetch_add(1);
  }
  stop = true;
  other.join();
  EXPECT_EQ(early.load(), 0)
      << "Synchronize returned before its stream's work finished";
  EXPECT_GT(fast_rounds.load(), 0);
  EXPECT_FALSE(c->aborted());
}

TEST_F(NcclThreadsTest, AnAbortFromAnotherThreadNeverFreesACommunicatorInUse) {
  for (int round = 0; round < 8; ++round) {
    std::unique_ptr<NcclCommunicator> c =
        OneRank(absl::StrCat("abort-", round));
    ASSERT_NE(c, nullptr);
    TestStream hung(absl::ZeroDuration()), busy(absl::ZeroDuration());
    ASSERT_TRUE(AllReduceOn(*c, hung.s).ok());
    hung.Hold();
    std::atomic<bool> started{false};
    absl::Status enqueue_end;
    int enqueued = 0;
    std::thread issuer([&] {
      started = true;
      // Enqueues until the abort from the other thread stops it.
      for (;;) {
        absl::Status s = AllReduceOn(*c, busy.s);
        if (!s.ok()) {
          enqueue_end = s;
          break;
        }
        ++enqueued;
        if (enqueued > 100000) break;
      }
    });
    while (!started.load()) std::this_thread::yield();
    // The completer's wait on the hung stream times out and aborts.
    absl::Status sync = c->Synchronize(hung.s, absl::Milliseconds(5));
    issuer.join();
    EXPECT_EQ(sync.code(), absl::StatusCode::kDeadlineExceeded) << sync;
    EXPECT_TRUE(c->aborted());
    EXPECT_EQ(enqueue_end.code(), absl::StatusCode::kFailedPrecondition)
        << enqueue_end << " after " << enqueued << " enqueues";
    EXPECT_EQ(AllReduceOn(*c, busy.s).code(),
              absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(c->Synchronize(busy.s).code(),
              absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(c->Test(busy.s).status().code(),
              absl::StatusCode::kFailedPrecondition);
  }
}

TEST_F(NcclThreadsTest, TestFromACompleterThreadBesideEnqueues) {
  std::unique_ptr<NcclCommunicator> c = OneRank("completer");
  ASSERT_NE(c, nullptr);
  TestStream s(absl::Microseconds(200));
  std::atomic<bool> stop{false};
  std::atomic<int> done{0};
  std::thread completer([&] {
    while (!stop.load()) {
      absl::StatusOr<bool> t = c->Test(s.s);
      ASSERT_TRUE(t.ok()) << t.status();
      if (*t) done.fetch_add(1);
    }
  });
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(c->Broadcast(buffer, buffer, 4, DType::kF32, 0, s.s).ok());
    ASSERT_TRUE(c->AllGather(buffer, buffer, 1, DType::kF32, s.s).ok());
  }
  ASSERT_TRUE(c->Synchronize(s.s, absl::Seconds(30)).ok());
  stop = true;
  completer.join();
  EXPECT_TRUE(StreamDone(s.s));
  EXPECT_FALSE(c->aborted());
}

// Every buffer is a "device" buffer of device 0.
int AllOnDevice0(const void*) { return 0; }

TEST_F(NcclThreadsTest, ACommunicatorWhoseNcclFailedDoesNotMakeItAgain) {
  gpu::SetDeviceOfPointerForTesting(&AllOnDevice0);
  fail_inits = true;
  const int before = inits.load();
  {
    auto c = Communicator::CreateWithRendezvous(
        std::make_shared<InMemoryRendezvous>(),
        absl::StrCat("ncclfail", ::getpid()), 0, 1);
    ASSERT_TRUE(c.ok()) << c.status();
    absl::Status first =
        (*c)->AllReduce(buffer, buffer, 4, DType::kF32, ReduceOp::kSum);
    EXPECT_FALSE(first.ok());
    const absl::Time t0 = absl::Now();
    absl::Status second =
        (*c)->AllReduce(buffer, buffer, 4, DType::kF32, ReduceOp::kSum);
    absl::Status third = (*c)->Broadcast(buffer, buffer, 4, DType::kF32, 0);
    EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
    EXPECT_EQ(second, first);
    EXPECT_EQ(third, first);
    EXPECT_EQ(inits.load() - before, 1)
        << "the NCCL communicator was made again after it failed";
  }
  fail_inits = false;
  gpu::SetDeviceOfPointerForTesting(nullptr);
}

}  // namespace
}  // namespace shoal::collectives

#else  // !SHOAL_WITH_CUDA

TEST(NcclThreadsTest, BuiltWithoutCuda) {
  GTEST_SKIP() << "built without CUDA: no NcclCommunicator to test";
}

#endif  // SHOAL_WITH_CUDA
