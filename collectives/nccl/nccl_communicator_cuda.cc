// nccl_communicator.h with CUDA and NCCL.
//
// Every NCCL call goes through Impl::Finish: with a non-blocking communicator
// a call may answer ncclInProgress, and then no other NCCL call on the
// communicator is allowed until ncclCommGetAsyncError stops answering
// ncclInProgress (NCCL's rule for non-blocking communicators). An error in that
// state, or a deadline passing, aborts the communicator.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/mutex.h"
#include "base/status_macros.h"
#include "collectives/nccl/nccl_communicator.h"
#include "collectives/nccl/nccl_communicator_testing.h"
#include "gpu/cuda_check.h"
#include "gpu/gpu_info.h"
#include "gpu/nccl_api.h"

namespace shoal::collectives {
namespace {

using gpu::CudaStatus;
using gpu::NcclApi;
using gpu::NcclStatus;

// The hooks a test installed (SetNcclHooksForTesting), or null: the real
// CUDA runtime and the NCCL that LoadNccl() loads.
std::atomic<const NcclTestingHooks*> testing_hooks{nullptr};

// The CUDA runtime calls this file makes.
const NcclCudaCalls& Cuda() {
  static const NcclCudaCalls real = {
      .GetDeviceCount = &cudaGetDeviceCount,
      .GetDevice = &cudaGetDevice,
      .SetDevice = &cudaSetDevice,
      .StreamCreateWithFlags = &cudaStreamCreateWithFlags,
      .StreamDestroy = &cudaStreamDestroy,
      .StreamQuery = &cudaStreamQuery,
      .EventCreateWithFlags = &cudaEventCreateWithFlags,
      .EventDestroy = &cudaEventDestroy,
      .EventRecord = &cudaEventRecord,
      .EventQuery = &cudaEventQuery,
  };
  const NcclTestingHooks* h = testing_hooks.load(std::memory_order_acquire);
  return h != nullptr ? h->cuda : real;
}

// GPUs this process sees: gpu::CudaDeviceCount (which tells a driver too old
// for the runtime from no GPU), or the hooks' count.
absl::StatusOr<int> DeviceCount() {
  const NcclTestingHooks* h = testing_hooks.load(std::memory_order_acquire);
  if (h == nullptr) return gpu::CudaDeviceCount();
  int n = 0;
  SHOAL_CUDA_CHECK(h->cuda.GetDeviceCount(&n));
  return n;
}

absl::StatusOr<const NcclApi*> LoadNcclApi() {
  const NcclTestingHooks* h = testing_hooks.load(std::memory_order_acquire);
  if (h != nullptr) return h->nccl;
  return gpu::LoadNccl();
}

// How long a poll loop sleeps between checks once a few yields did not help.
constexpr absl::Duration kPollInterval = absl::Microseconds(50);
// Polls that only yield the CPU before the loop starts sleeping: most enqueues
// in progress finish within microseconds.
constexpr int kSpinPolls = 64;

void PollPause(int iteration) {
  if (iteration < kSpinPolls) {
    std::this_thread::yield();
  } else {
    absl::SleepFor(kPollInterval);
  }
}

// The one place where shoal's DType and ReduceOp meet NCCL's enums.
absl::StatusOr<ncclDataType_t> ToNccl(const char* what, DType dtype) {
  switch (dtype) {
    case DType::kF16:
      return ncclFloat16;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kF32:
      return ncclFloat32;
    case DType::kF64:
      return ncclFloat64;
    case DType::kI32:
      return ncclInt32;
    case DType::kI64:
      return ncclInt64;
    default:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(what, ": NCCL takes f16, bf16, f32, f64, i32 or i64, not ",
                   IsValidDType(static_cast<uint32_t>(dtype))
                       ? std::string(DTypeName(dtype))
                       : absl::StrCat("dtype ", static_cast<int>(dtype))));
}

absl::StatusOr<ncclRedOp_t> ToNccl(const char* what, collectives::ReduceOp op) {
  switch (op) {
    case collectives::ReduceOp::kSum:
      return ncclSum;
    case collectives::ReduceOp::kProd:
      return ncclProd;
    case collectives::ReduceOp::kMin:
      return ncclMin;
    case collectives::ReduceOp::kMax:
      return ncclMax;
    case collectives::ReduceOp::kAvg:
      return ncclAvg;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(what, ": unknown ReduceOp ", static_cast<int>(op)));
}

absl::Status CheckBuffer(const char* what, const char* name, const void* ptr,
                         int64_t count) {
  if (count < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": negative count ", count));
  }
  if (ptr == nullptr && count > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": `", name, "` is null with count ", count));
  }
  return absl::OkStatus();
}

absl::Status CheckRank(const char* what, const char* name, int r, int size) {
  if (r < 0 || r >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", name, " ", r,
                     " is not a rank of a communicator of ", size));
  }
  return absl::OkStatus();
}

// Makes `device` current on the calling thread and restores the previous one
// when it goes out of scope.
class ScopedDevice {
 public:
  ScopedDevice() = default;
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;
  ~ScopedDevice() {
    if (previous_ >= 0) Cuda().SetDevice(previous_);
  }

  absl::Status Enter(int device) {
    int current = -1;
    SHOAL_CUDA_CHECK(Cuda().GetDevice(&current));
    if (current != device) {
      SHOAL_CUDA_CHECK(Cuda().SetDevice(device));
      previous_ = current;
    }
    return absl::OkStatus();
  }

 private:
  int previous_ = -1;
};

// NCCL's entry points. REQUIRES: LoadNcclApi() succeeded (CheckCreateArgs
// checks it before anything else calls NCCL).
const NcclApi& Nccl() { return **LoadNcclApi(); }

std::string NcclErrorText(ncclResult_t res, ncclComm_t comm) {
  std::string text = Nccl().GetErrorString(res);
  const char* last = Nccl().GetLastError(comm);
  if (last != nullptr && last[0] != '\0') absl::StrAppend(&text, ": ", last);
  return text;
}

// NcclCommunicator::Create's checks of its arguments, the GPU included.
absl::Status CheckCreateArgs(const std::string& comm_name, int rank, int world,
                             int device) {
  if (world < 1 || rank < 0 || rank >= world) {
    return absl::InvalidArgumentError(absl::StrCat(
        "NcclCommunicator::Create: rank ", rank, " of world ", world));
  }
  if (comm_name.empty()) {
    return absl::InvalidArgumentError(
        "NcclCommunicator::Create: empty comm_name");
  }
  // NCCL is loaded here, at the first communicator, not at program start.
  if (absl::StatusOr<const NcclApi*> api = LoadNcclApi(); !api.ok()) {
    return api.status();
  }
  absl::StatusOr<int> devices = DeviceCount();
  if (!devices.ok()) return devices.status();
  if (*devices == 0) {
    return absl::FailedPreconditionError(
        "NcclCommunicator::Create: no GPU visible to this process");
  }
  if (device < 0 || device >= *devices) {
    return absl::InvalidArgumentError(
        absl::StrCat("NcclCommunicator::Create: device ", device, " but ",
                     *devices, " GPU(s) visible"));
  }
  return absl::OkStatus();
}

// The communicator's unique id: rank 0 makes it and (with other ranks)
// publishes it under `key`; the other ranks read it there, waiting until
// `deadline` (`timeout` is only for the message).
absl::StatusOr<ncclUniqueId> ShareUniqueId(Rendezvous& rendezvous,
                                           const std::string& key,
                                           const std::string& comm_name,
                                           int rank, int world,
                                           absl::Time deadline,
                                           absl::Duration timeout) {
  ncclUniqueId id;
  if (rank == 0) {
    SHOAL_NCCL_CHECK(Nccl().GetUniqueId(&id));
    if (world > 1) {
      absl::Status s = rendezvous.Set(
          key,
          absl::string_view(reinterpret_cast<const char*>(&id), sizeof(id)));
      if (!s.ok()) return s;
    }
    return id;
  }
  absl::StatusOr<std::string> value = rendezvous.Get(
      key, std::max(deadline - absl::Now(), absl::ZeroDuration()));
  if (!value.ok()) {
    if (value.status().code() == absl::StatusCode::kDeadlineExceeded) {
      return absl::DeadlineExceededError(absl::StrCat(
          "NcclCommunicator::Create: rank 0 did not publish the NCCL id of '",
          comm_name, "' (key '", key, "') within ",
          absl::FormatDuration(timeout)));
    }
    return value.status();
  }
  if (value->size() != sizeof(id)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "NcclCommunicator::Create: key '", key, "' holds ", value->size(),
        " bytes, not an ncclUniqueId (", sizeof(id), ")"));
  }
  std::memcpy(&id, value->data(), sizeof(id));
  return id;
}

}  // namespace

// The communicator's state. Every NCCL call on `comm`, the abort among them,
// is made under `mu`, so no thread ever calls NCCL with a communicator
// another thread is using or has freed; waiting for work on a stream
// (Synchronize, Test) happens outside it.
struct NcclCommunicator::Impl {
  Mutex mu;
  ncclComm_t comm ABSL_GUARDED_BY(mu) = nullptr;
  // Made by Create before the object is shared, destroyed by the destructor
  // after it is not: constant in between.
  cudaStream_t stream = nullptr;
  std::atomic<bool>* aborted = nullptr;  // the owner's flag
  std::string abort_reason ABSL_GUARDED_BY(mu);
  // Events no Synchronize uses now. Each Synchronize records one of its own,
  // so that a call from another thread never moves the point it waits for.
  std::vector<cudaEvent_t> free_events ABSL_GUARDED_BY(mu);

  cudaStream_t StreamOr(void* s) const {
    return s != nullptr ? static_cast<cudaStream_t>(s) : stream;
  }

  absl::Status CheckUsable(const char* what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (aborted->load(std::memory_order_acquire)) {
      return absl::FailedPreconditionError(absl::StrCat(
          what, ": the NCCL communicator was aborted (", abort_reason, ")"));
    }
    return absl::OkStatus();
  }

  absl::Status CheckUsableNow(const char* what) ABSL_LOCKS_EXCLUDED(mu) {
    MutexLock lock(&mu);
    return CheckUsable(what);
  }

  // Aborts the communicator (blocking: NCCL runs destroy and abort jobs
  // synchronously even for non-blocking communicators) and returns `status`.
  // The first reason is kept when it was aborted already.
  absl::Status Abort(absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (comm != nullptr) {
      Nccl().CommAbort(comm);
      comm = nullptr;
    }
    if (!aborted->load(std::memory_order_relaxed)) {
      abort_reason = std::string(status.message());
      aborted->store(true, std::memory_order_release);
    }
    return status;
  }

  absl::Status AbortNow(absl::Status status) ABSL_LOCKS_EXCLUDED(mu) {
    MutexLock lock(&mu);
    return Abort(std::move(status));
  }

  // Polls the communicator's state until it leaves ncclInProgress. Returns
  // the final state (ncclSuccess or the error), or DeadlineExceeded.
  absl::StatusOr<ncclResult_t> PollState(absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    for (int i = 0;; ++i) {
      ncclResult_t state = ncclSuccess;
      SHOAL_NCCL_CHECK(Nccl().CommGetAsyncError(comm, &state));
      if (state != ncclInProgress) return state;
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError("still in progress");
      }
      PollPause(i);
    }
  }

  // Completes an NCCL call on the communicator that answered `res`: waits out
  // ncclInProgress; an asynchronous error or the deadline aborts. An error
  // returned by the call itself with the communicator healthy (bad arguments)
  // is returned without aborting.
  absl::Status Finish(const char* call, ncclResult_t res, absl::Time deadline,
                      const char* file, int line)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (res == ncclSuccess) return absl::OkStatus();
    absl::StatusOr<ncclResult_t> state = PollState(deadline);
    if (!state.ok()) {
      if (state.status().code() == absl::StatusCode::kDeadlineExceeded) {
        return Abort(absl::DeadlineExceededError(
            absl::StrCat(call,
                         ": NCCL did not finish within the deadline; the "
                         "communicator was aborted")));
      }
      return Abort(absl::UnavailableError(
          absl::StrCat(call, ": ", state.status().message(),
                       "; the communicator was aborted")));
    }
    if (*state != ncclSuccess) {
      return Abort(absl::UnavailableError(
          absl::StrCat(call, ": ", NcclErrorText(*state, comm),
                       "; the communicator was aborted")));
    }
    if (res != ncclInProgress) return NcclStatus(res, call, file, line);
    return absl::OkStatus();
  }

  // Enqueues one operation (`call` makes the NCCL calls) on `s` (nullptr: the
  // communicator's stream) with `device` current, and finishes it, holding
  // the lock throughout.
  absl::Status Run(
      const char* what, int device, void* s, absl::Duration timeout,
      absl::FunctionRef<ncclResult_t(ncclComm_t, cudaStream_t)> call)
      ABSL_LOCKS_EXCLUDED(mu) {
    const absl::Time deadline = absl::Now() + timeout;
    MutexLock lock(&mu);
    SHOAL_RETURN_IF_ERROR(CheckUsable(what));
    ScopedDevice scoped;
    SHOAL_RETURN_IF_ERROR(scoped.Enter(device));
    return Finish(what, call(comm, StreamOr(s)), deadline, __FILE__, __LINE__);
  }

  // Checks for an asynchronous NCCL error without waiting; aborts on one.
  absl::Status CheckAsync(const char* what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t res = Nccl().CommGetAsyncError(comm, &state);
    if (res != ncclSuccess) state = res;
    if (state != ncclSuccess && state != ncclInProgress) {
      return Abort(absl::UnavailableError(
          absl::StrCat(what, ": NCCL error: ", NcclErrorText(state, comm),
                       "; the communicator was aborted")));
    }
    return absl::OkStatus();
  }

  // An event for one Synchronize: a free one, or a new one (made on the
  // current device, which must be the communicator's).
  absl::StatusOr<cudaEvent_t> TakeEvent() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (!free_events.empty()) {
      cudaEvent_t e = free_events.back();
      free_events.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    SHOAL_CUDA_CHECK(Cuda().EventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
  }

  void GiveEvent(cudaEvent_t e) ABSL_LOCKS_EXCLUDED(mu) {
    MutexLock lock(&mu);
    free_events.push_back(e);
  }
};

#define SHOAL_NCCL_FINISH(impl, call, deadline) \
  (impl).Finish(#call, (call), (deadline), __FILE__, __LINE__)

NcclCommunicator::NcclCommunicator(int rank, int size, int device,
                                   NcclOptions options)
    : rank_(rank),
      size_(size),
      device_(device),
      options_(std::move(options)),
      impl_(std::make_unique<Impl>()) {
  impl_->aborted = &aborted_;
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(
    Rendezvous& rendezvous, const std::string& comm_name, int rank, int world,
    int device, NcclOptions options) {
  const absl::Time deadline = absl::Now() + options.timeout;
  SHOAL_RETURN_IF_ERROR(CheckCreateArgs(comm_name, rank, world, device));
  SHOAL_CUDA_CHECK(Cuda().SetDevice(device));

  // The unique id: made here for one rank, else through the KV store.
  const std::string key = options.key_prefix + comm_name;
  absl::StatusOr<ncclUniqueId> id = ShareUniqueId(
      rendezvous, key, comm_name, rank, world, deadline, options.timeout);
  if (!id.ok()) return id.status();

  std::unique_ptr<NcclCommunicator> c(
      new NcclCommunicator(rank, world, device, std::move(options)));
  Impl& impl = *c->impl_;

  {
    // No other thread sees `c` yet; the lock is for the annotations.
    MutexLock lock(&impl.mu);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    config.commName = comm_name.c_str();
    const ncclResult_t res =
        Nccl().CommInitRankConfig(&impl.comm, world, *id, rank, &config);
    if (impl.comm == nullptr) {
      return NcclStatus(res == ncclSuccess ? ncclInternalError : res,
                        "ncclCommInitRankConfig", __FILE__, __LINE__);
    }
    absl::Status s = impl.Finish("ncclCommInitRankConfig", res, deadline,
                                 __FILE__, __LINE__);
    if (!s.ok()) {
      if (!c->aborted()) impl.Abort(s).IgnoreError();
      if (s.code() == absl::StatusCode::kDeadlineExceeded) {
        return absl::DeadlineExceededError(
            absl::StrCat("NcclCommunicator::Create: '", comm_name, "' (rank ",
                         rank, " of ", world, ") did not initialise within ",
                         absl::FormatDuration(c->options_.timeout),
                         " (did every rank call Create?)"));
      }
      return s;
    }
  }
  // Every rank joined, so every rank read the id: clean up.
  if (rank == 0 && world > 1) rendezvous.Delete(key).IgnoreError();

  SHOAL_CUDA_CHECK(
      Cuda().StreamCreateWithFlags(&impl.stream, cudaStreamNonBlocking));
  return c;
}

NcclCommunicator::~NcclCommunicator() {
  if (impl_ == nullptr) return;
  ScopedDevice device;
  device.Enter(device_).IgnoreError();
  MutexLock lock(&impl_->mu);
  if (impl_->comm != nullptr && !aborted()) {
    const absl::Time deadline = absl::Now() + options_.timeout;
    absl::Status s =
        SHOAL_NCCL_FINISH(*impl_, Nccl().CommFinalize(impl_->comm), deadline);
    if (s.ok()) {
      Nccl().CommDestroy(impl_->comm);
      impl_->comm = nullptr;
    } else if (!aborted()) {
      impl_->Abort(s).IgnoreError();
    }
  }
  if (impl_->comm != nullptr) {
    Nccl().CommAbort(impl_->comm);
    impl_->comm = nullptr;
  }
  for (cudaEvent_t e : impl_->free_events) Cuda().EventDestroy(e);
  impl_->free_events.clear();
  if (impl_->stream != nullptr) Cuda().StreamDestroy(impl_->stream);
}

void* NcclCommunicator::stream() const { return impl_->stream; }

absl::Status NcclCommunicator::AllReduce(const void* in, void* out,
                                         int64_t count, DType dtype,
                                         collectives::ReduceOp op,
                                         void* stream) {
  constexpr const char* kWhat = "NcclCommunicator::AllReduce";
  SHOAL_RETURN_IF_ERROR(impl_->CheckUsableNow(kWhat));
  SHOAL_ASSIGN_OR_RETURN(const ncclDataType_t type, ToNccl(kWhat, dtype));
  SHOAL_ASSIGN_OR_RETURN(const ncclRedOp_t red, ToNccl(kWhat, op));
  SHOAL_RETURN_IF_ERROR(CheckBuffer(kWhat, "in", in, count));
  SHOAL_RETURN_IF_ERROR(CheckBuffer(kWhat, "out", out, count));
  return impl_->Run(kWhat, device_, stream, options_.timeout,
                    [&](ncclComm_t comm, cudaStream_t s) {
                      return Nccl().AllReduce(in, out, count, type, red, comm,
                                              s);
                    });
}

absl::Status NcclCommunicator::Broadcast(const void* in, void* out,
                                         int64_t count, DType dtype, int root,
                                         void* stream) {
  constexpr const char* kWhat = "NcclCommunicator::Broadcast";
  SHOAL_RETURN_IF_ERROR(impl_->CheckUsableNow(kWhat));
  SHOAL_ASSIGN_OR_RETURN(const ncclDataType_t type, ToNccl(kWhat, dtype));
  SHOAL_RETURN_IF_ERROR(CheckRank(kWhat, "root", root, size_));
  if (rank_ == root) SHOAL_RETURN_IF_ERROR(CheckBuffer(kWhat, "in", in, count));
  SHOAL_RETURN_IF_ERROR(CheckBuffer(kWhat, "out", out, count));
  return impl_->Run(kWhat, device_, stream, options_.timeout,
                    [&](ncclComm_t comm, cudaStream_t s) {
                      return Nccl().Broadcast(in, out, count, type, root, comm,
                                              s);
                    });
}

absl::Status NcclCommunicator::Reduce(const void* in, void* out, int64_t count,
                                      DType dtype, collectives::ReduceOp op,
                                      int root, void* stream) {
  constexpr const char* kWhat = "NcclCommunicator::Reduce";
  SHOAL_RETURN_IF_ERROR(impl_->CheckUsableNow(kWhat));
  SHOAL_ASSIGN_OR_RETURN(const ncclDataType_t type, ToNccl(kWhat, dtype));
  SHOAL_ASSIGN_OR_RETURN(const ncclRedOp_t red, ToNccl(kWhat, op));
  SHOAL_RETURN_IF_ERROR(CheckRank(kWhat, "root", root, size_));
  SHOAL_RETURN_IF_ERROR(CheckBuffer(kWhat, "in", in, count));
  if (rank_ == root) {
    SHOAL_RETURN_IF_ERROR(CheckBuffer(kWhat, "out", out, count));
  }
  return impl_->Run(kWhat, device_, stream, options_.timeout,
                    [&](ncclComm_t comm, cudaStream_t s) {
                      return Nccl().Reduce(in, out, count, type, red, root,
                                           comm, s);
                    });
}

absl::Status NcclCommunicator::AllGather(const void* in, void* out,
                                         int64_t count_per_rank, DType dtype,
                                         void* stream) {
  constexpr const char* kWhat = "NcclCommunicator::AllGather";
  SHOAL_RETURN_IF_ERROR(impl_->CheckUsableNow(kWhat));
  SHOAL_ASSIGN_OR_RETURN(const ncclDataType_t type, ToNccl(kWhat, dtype));
  SHOAL_RETURN_IF_ERROR(CheckBuffer(kWhat, "in", in, count_per_rank));
  SHOAL_RETURN_IF_ERROR(CheckBuffer(kWhat, "out", out, count_per_rank));
  return impl_->Run(kWhat, device_, stream, options_.timeout,
                    [&](ncclComm_t comm, cudaStream_t s) {
                      return Nccl().AllGather(in, out, count_per_rank, type,
                                              comm, s);
                    });
}

absl::Status NcclCommunicator::ReduceScatter(const void* in, void* out,
                                             int64_t count_per_rank,
                                             DType dtype,
                                             collectives::ReduceOp op,
                                             void* stream) {
  constexpr const char* kWhat = "NcclCommunicator::ReduceScatter";
  SHOAL_RETURN_IF_ERROR(impl_->CheckUsableNow(kWhat));
  SHOAL_ASSIGN_OR_RETURN(const ncclDataType_t type, ToNccl(kWhat, dtype));
  SHOAL_ASSIGN_OR_RETURN(const ncclRedOp_t red, ToNccl(kWhat, op));
  SHOAL_RETURN_IF_ERROR(CheckBuffer(kWhat, "in", in, count_per_rank));
  SHOAL_RETURN_IF_ERROR(CheckBuffer(kWhat, "out", out, count_per_rank));
  return impl_->Run(kWhat, device_, stream, options_.timeout,
                    [&](ncclComm_t comm, cudaStream_t s) {
                      return Nccl().ReduceScatter(in, out, count_per_rank, type,
                                                  red, comm, s);
                    });
}

absl::Status NcclCommunicator::AllToAll(const void* in, void* out,
                                        int64_t count_per_rank, DType dtype,
                                        void* stream) {
  constexpr const char* kWhat = "NcclCommunicator::AllToAll";
  SHOAL_RETURN_IF_ERROR(impl_->CheckUsableNow(kWhat));
  SHOAL_ASSIGN_OR_RETURN(const ncclDataType_t type, ToNccl(kWhat, dtype));
  SHOAL_RETURN_IF_ERROR(CheckBuffer(kWhat, "in", in, count_per_rank));
  SHOAL_RETURN_IF_ERROR(CheckBuffer(kWhat, "out", out, count_per_rank));
  if (in == out && count_per_rank > 0) {
    if (size_ > 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(kWhat, ": in-place (in == out) is not supported"));
    }
    return absl::OkStatus();  // one rank, in place: nothing moves
  }
  const size_t block = static_cast<size_t>(count_per_rank) * DTypeSize(dtype);
  const char* src = static_cast<const char*>(in);
  char* dst = static_cast<char*>(out);
  const int size = size_;
  return impl_->Run(
      kWhat, device_, stream, options_.timeout,
      [&](ncclComm_t comm, cudaStream_t s) {
        ncclResult_t first = Nccl().GroupStart();
        if (first != ncclSuccess) return first;
        for (int r = 0; r < size; ++r) {
          ncclResult_t res =
              Nccl().Send(src + r * block, count_per_rank, type, r, comm, s);
          if (first == ncclSuccess) first = res;
          res = Nccl().Recv(dst + r * block, count_per_rank, type, r, comm, s);
          if (first == ncclSuccess) first = res;
        }
        // Always closes the group, even after a failed call.
        const ncclResult_t end = Nccl().GroupEnd();
        return first != ncclSuccess && first != ncclInProgress ? first : end;
      });
}

absl::Status NcclCommunicator::Send(const void* buf, int64_t count, DType dtype,
                                    int peer, void* stream) {
  constexpr const char* kWhat = "NcclCommunicator::Send";
  SHOAL_RETURN_IF_ERROR(impl_->CheckUsableNow(kWhat));
  SHOAL_ASSIGN_OR_RETURN(const ncclDataType_t type, ToNccl(kWhat, dtype));
  SHOAL_RETURN_IF_ERROR(CheckRank(kWhat, "peer", peer, size_));
  SHOAL_RETURN_IF_ERROR(CheckBuffer(kWhat, "buf", buf, count));
  return impl_->Run(kWhat, device_, stream, options_.timeout,
                    [&](ncclComm_t comm, cudaStream_t s) {
                      return Nccl().Send(buf, count, type, peer, comm, s);
                    });
}

absl::Status NcclCommunicator::Recv(void* buf, int64_t count, DType dtype,
                                    int peer, void* stream) {
  constexpr const char* kWhat = "NcclCommunicator::Recv";
  SHOAL_RETURN_IF_ERROR(impl_->CheckUsableNow(kWhat));
  SHOAL_ASSIGN_OR_RETURN(const ncclDataType_t type, ToNccl(kWhat, dtype));
  SHOAL_RETURN_IF_ERROR(CheckRank(kWhat, "peer", peer, size_));
  SHOAL_RETURN_IF_ERROR(CheckBuffer(kWhat, "buf", buf, count));
  return impl_->Run(kWhat, device_, stream, options_.timeout,
                    [&](ncclComm_t comm, cudaStream_t s) {
                      return Nccl().Recv(buf, count, type, peer, comm, s);
                    });
}

absl::Status NcclCommunicator::Synchronize(
    void* stream, std::optional<absl::Duration> timeout) {
  constexpr const char* kWhat = "NcclCommunicator::Synchronize";
  const absl::Duration limit = timeout.value_or(options_.timeout);
  const absl::Time deadline = absl::Now() + limit;
  ScopedDevice device;
  cudaEvent_t event = nullptr;
  {
    MutexLock lock(&impl_->mu);
    SHOAL_RETURN_IF_ERROR(impl_->CheckUsable(kWhat));
    SHOAL_RETURN_IF_ERROR(device.Enter(device_));
    SHOAL_ASSIGN_OR_RETURN(event, impl_->TakeEvent());
    // This call's own event marks "everything enqueued on the stream so
    // far": work enqueued later, by this thread or another, and other
    // threads' Synchronize calls do not move it.
    const cudaError_t err = Cuda().EventRecord(event, impl_->StreamOr(stream));
    if (err != cudaSuccess) {
      impl_->free_events.push_back(event);
      return CudaStatus(err, "cudaEventRecord", __FILE__, __LINE__);
    }
  }
  absl::Status result = WaitForEvent(kWhat, event, deadline, limit);
  impl_->GiveEvent(event);
  return result;
}

absl::Status NcclCommunicator::WaitForEvent(const char* what, void* e,
                                            absl::Time deadline,
                                            absl::Duration limit) {
  const auto event = static_cast<cudaEvent_t>(e);
  for (int i = 0;; ++i) {
    {
      // Another thread's abort, or NCCL's asynchronous error, ends the wait.
      MutexLock lock(&impl_->mu);
      SHOAL_RETURN_IF_ERROR(impl_->CheckUsable(what));
      SHOAL_RETURN_IF_ERROR(impl_->CheckAsync(what));
    }
    const cudaError_t q = Cuda().EventQuery(event);
    if (q == cudaSuccess) return absl::OkStatus();
    if (q != cudaErrorNotReady) {
      return impl_->AbortNow(
          CudaStatus(q, "cudaEventQuery", __FILE__, __LINE__));
    }
    if (absl::Now() >= deadline) {
      return impl_->AbortNow(absl::DeadlineExceededError(absl::StrCat(
          what, ": the operations on the stream did not finish within ",
          absl::FormatDuration(limit),
          " (a rank missing from a collective?); the NCCL communicator "
          "was aborted")));
    }
    PollPause(i);
  }
}

absl::StatusOr<bool> NcclCommunicator::Test(void* stream) {
  constexpr const char* kWhat = "NcclCommunicator::Test";
  {
    MutexLock lock(&impl_->mu);
    SHOAL_RETURN_IF_ERROR(impl_->CheckUsable(kWhat));
    SHOAL_RETURN_IF_ERROR(impl_->CheckAsync(kWhat));
  }
  const cudaError_t q = Cuda().StreamQuery(impl_->StreamOr(stream));
  if (q == cudaSuccess) return true;
  if (q == cudaErrorNotReady) return false;
  return impl_->AbortNow(CudaStatus(q, "cudaStreamQuery", __FILE__, __LINE__));
}

void SetNcclHooksForTesting(const NcclTestingHooks* hooks) {
  testing_hooks.store(hooks, std::memory_order_release);
}

}  // namespace shoal::collectives
