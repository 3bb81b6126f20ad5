// CudaIpc over the CUDA runtime.
#include <cuda_runtime_api.h>

#include <array>
#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"
#include "base/mutex.h"
#include "base/status_macros.h"
#include "gpu/cuda_check.h"
#include "gpu/cuda_ipc.h"
#include "gpu/gpu_info.h"

namespace shoal::gpu {
namespace {

// Makes `ordinal` current for a scope and restores the caller's device: the
// store's calls must not change which device the program works on.
class DeviceScope {
 public:
  static absl::StatusOr<DeviceScope> Enter(int ordinal) {
    int previous = 0;
    SHOAL_CUDA_CHECK(cudaGetDevice(&previous));
    if (previous != ordinal) SHOAL_CUDA_CHECK(cudaSetDevice(ordinal));
    return DeviceScope(previous, ordinal);
  }
  DeviceScope(DeviceScope&& o) noexcept
      : previous_(o.previous_), current_(o.current_) {
    o.previous_ = o.current_ = -1;
  }
  ~DeviceScope() {
    if (previous_ >= 0 && previous_ != current_) cudaSetDevice(previous_);
  }

 private:
  DeviceScope(int previous, int current)
      : previous_(previous), current_(current) {}
  int previous_, current_;
};

// Pinned host buffers for staged copies: two per device, so that one is being
// filled (or drained) by the CPU while the other's DMA runs. Per device
// because an event belongs to the device current at its creation and may
// only be recorded on that device's streams; the memory is allocated
// portable (pinned for every device's context) all the same.
constexpr uint64_t kStagingBytes = 8 << 20;

class RealCudaIpc : public CudaIpc {
 public:
  ~RealCudaIpc() override {
    MutexLock lock(&mu_);
    int previous = -1;
    if (!staging_.empty()) cudaGetDevice(&previous);
    for (auto& [ordinal, pair] : staging_) {
      cudaSetDevice(ordinal);
      for (Staging& s : pair) {
        if (s.event != nullptr) cudaEventDestroy(s.event);
        if (s.host != nullptr) cudaFreeHost(s.host);
      }
    }
    if (previous >= 0) cudaSetDevice(previous);
  }

  // CudaDeviceCount: a driver older than the runtime is an error, not 0.
  absl::StatusOr<int> DeviceCount() override { return CudaDeviceCount(); }

  absl::StatusOr<GpuUuid> DeviceUuid(int ordinal) override {
    SHOAL_ASSIGN_OR_RETURN(int n, DeviceCount());
    if (ordinal < 0 || ordinal >= n) {
      return absl::InvalidArgumentError(
          absl::StrCat("CUDA device ", ordinal, " out of range (", n, ")"));
    }
    cudaDeviceProp prop;
    SHOAL_CUDA_CHECK(cudaGetDeviceProperties(&prop, ordinal));
    GpuUuid u;
    std::memcpy(u.bytes.data(), prop.uuid.bytes, u.bytes.size());
    return u;
  }

  absl::StatusOr<ExportedAllocation> Allocate(int ordinal,
                                              uint64_t bytes) override {
    SHOAL_ASSIGN_OR_RETURN(DeviceScope scope, DeviceScope::Enter(ordinal));
    ExportedAllocation a;
    const cudaError_t err = cudaMalloc(&a.base, bytes);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      return absl::ResourceExhaustedError(absl::StrCat(
          "cudaMalloc of ", bytes, " bytes on device ", ordinal, " failed"));
    }
    SHOAL_CUDA_CHECK(err);
    cudaIpcMemHandle_t h;
    const cudaError_t herr = cudaIpcGetMemHandle(&h, a.base);
    if (herr != cudaSuccess) {
      cudaFree(a.base);
      return CudaStatus(herr, "cudaIpcGetMemHandle", __FILE__, __LINE__);
    }
    static_assert(sizeof(h) == sizeof(a.handle.bytes));
    std::memcpy(a.handle.bytes.data(), &h, sizeof(h));
    return a;
  }

  absl::Status Free(int ordinal, void* base) override {
    SHOAL_ASSIGN_OR_RETURN(DeviceScope scope, DeviceScope::Enter(ordinal));
    SHOAL_CUDA_CHECK(cudaFree(base));
    return absl::OkStatus();
  }

  absl::StatusOr<ExportedEvent> CreateEvent(int ordinal) override {
    SHOAL_ASSIGN_OR_RETURN(DeviceScope scope, DeviceScope::Enter(ordinal));
    cudaEvent_t e;
    SHOAL_CUDA_CHECK(cudaEventCreateWithFlags(
        &e, cudaEventInterprocess | cudaEventDisableTiming));
    cudaIpcEventHandle_t h;
    const cudaError_t err = cudaIpcGetEventHandle(&h, e);
    if (err != cudaSuccess) {
      cudaEventDestroy(e);
      return CudaStatus(err, "cudaIpcGetEventHandle", __FILE__, __LINE__);
    }
    ExportedEvent out;
    out.event = e;
    static_assert(sizeof(h) == sizeof(out.handle.bytes));
    std::memcpy(out.handle.bytes.data(), &h, sizeof(h));
    return out;
  }

  absl::Status DestroyEvent(int ordinal, void* event) override {
    SHOAL_ASSIGN_OR_RETURN(DeviceScope scope, DeviceScope::Enter(ordinal));
    SHOAL_CUDA_CHECK(cudaEventDestroy(static_cast<cudaEvent_t>(event)));
    return absl::OkStatus();
  }

  absl::StatusOr<void*> OpenMemHandle(int ordinal,
                                      const IpcMemHandle& handle) override {
    SHOAL_ASSIGN_OR_RETURN(DeviceScope scope, DeviceScope::Enter(ordinal));
    cudaIpcMemHandle_t h;
    std::memcpy(&h, handle.bytes.data(), sizeof(h));
    void* p = nullptr;
    SHOAL_CUDA_CHECK(
        cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess));
    return p;
  }

  absl::Status CloseMemHandle(int ordinal, void* base) override {
    SHOAL_ASSIGN_OR_RETURN(DeviceScope scope, DeviceScope::Enter(ordinal));
    SHOAL_CUDA_CHECK(cudaIpcCloseMemHandle(base));
    return absl::OkStatus();
  }

  absl::StatusOr<void*> OpenEventHandle(int ordinal,
                                        const IpcEventHandle& handle) override {
    SHOAL_ASSIGN_OR_RETURN(DeviceScope scope, DeviceScope::Enter(ordinal));
    cudaIpcEventHandle_t h;
    std::memcpy(&h, handle.bytes.data(), sizeof(h));
    cudaEvent_t e;
    SHOAL_CUDA_CHECK(cudaIpcOpenEventHandle(&e, h));
    return static_cast<void*>(e);
  }

  absl::Status CloseEvent(int ordinal, void* event) override {
    return DestroyEvent(ordinal, event);
  }

  absl::Status RecordEvent(int ordinal, void* event, void* stream) override {
    SHOAL_ASSIGN_OR_RETURN(DeviceScope scope, DeviceScope::Enter(ordinal));
    SHOAL_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event),
                                     static_cast<cudaStream_t>(stream)));
    return absl::OkStatus();
  }

  absl::Status StreamWaitEvent(int ordinal, void* stream,
                               void* event) override {
    SHOAL_ASSIGN_OR_RETURN(DeviceScope scope, DeviceScope::Enter(ordinal));
    SHOAL_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream),
                                         static_cast<cudaEvent_t>(event), 0));
    return absl::OkStatus();
  }

  absl::StatusOr<void*> MarkStream(int ordinal, void* stream) override {
    SHOAL_ASSIGN_OR_RETURN(DeviceScope scope, DeviceScope::Enter(ordinal));
    cudaEvent_t e;
    SHOAL_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    const cudaError_t err =
        cudaEventRecord(e, static_cast<cudaStream_t>(stream));
    if (err != cudaSuccess) {
      cudaEventDestroy(e);
      return CudaStatus(err, "cudaEventRecord", __FILE__, __LINE__);
    }
    return static_cast<void*>(e);
  }

  absl::StatusOr<bool> EventDone(int ordinal, void* event) override {
    (void)ordinal;  // cudaEventQuery needs no current device
    const cudaError_t err = cudaEventQuery(static_cast<cudaEvent_t>(event));
    if (err == cudaErrorNotReady) {
      cudaGetLastError();
      return false;
    }
    SHOAL_CUDA_CHECK(err);
    return true;
  }

  absl::Status WaitEvent(int ordinal, void* event) override {
    (void)ordinal;
    SHOAL_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event)));
    return absl::OkStatus();
  }

  absl::Status CopyToDevice(int ordinal, void* dst, const void* src,
                            uint64_t bytes, void* stream)
      ABSL_LOCKS_EXCLUDED(mu_) override {
    SHOAL_ASSIGN_OR_RETURN(DeviceScope scope, DeviceScope::Enter(ordinal));
    MutexLock lock(&mu_);
    SHOAL_ASSIGN_OR_RETURN(StagingPair * staging, EnsureStaging(ordinal));
    auto* d = static_cast<uint8_t*>(dst);
    const auto* s = static_cast<const uint8_t*>(src);
    const auto st = static_cast<cudaStream_t>(stream);
    for (uint64_t off = 0, k = 0; off < bytes; off += kStagingBytes, ++k) {
      Staging& buf = (*staging)[k % 2];
      const uint64_t n = std::min(kStagingBytes, bytes - off);
      // The buffer's previous DMA must be done before it is refilled.
      SHOAL_CUDA_CHECK(cudaEventSynchronize(buf.event));
      std::memcpy(buf.host, s + off, n);
      SHOAL_CUDA_CHECK(
          cudaMemcpyAsync(d + off, buf.host, n, cudaMemcpyHostToDevice, st));
      SHOAL_CUDA_CHECK(cudaEventRecord(buf.event, st));
    }
    for (Staging& buf : *staging) {
      SHOAL_CUDA_CHECK(cudaEventSynchronize(buf.event));
    }
    return absl::OkStatus();
  }

  absl::Status CopyToHost(int ordinal, void* dst, const void* src,
                          uint64_t bytes, void* stream)
      ABSL_LOCKS_EXCLUDED(mu_) override {
    SHOAL_ASSIGN_OR_RETURN(DeviceScope scope, DeviceScope::Enter(ordinal));
    MutexLock lock(&mu_);
    SHOAL_ASSIGN_OR_RETURN(StagingPair * staging, EnsureStaging(ordinal));
    auto* d = static_cast<uint8_t*>(dst);
    const auto* s = static_cast<const uint8_t*>(src);
    const auto st = static_cast<cudaStream_t>(stream);
    // Chunk k's DMA runs while chunk k-1 is copied out of its buffer.
    uint64_t pending_off = 0, pending_n = 0;
    int pending = -1;
    for (uint64_t off = 0, k = 0; off < bytes; off += kStagingBytes, ++k) {
      Staging& buf = (*staging)[k % 2];
      const uint64_t n = std::min(kStagingBytes, bytes - off);
      SHOAL_CUDA_CHECK(
          cudaMemcpyAsync(buf.host, s + off, n, cudaMemcpyDeviceToHost, st));
      SHOAL_CUDA_CHECK(cudaEventRecord(buf.event, st));
      if (pending >= 0) {
        SHOAL_RETURN_IF_ERROR(
            Drain((*staging)[pending], d + pending_off, pending_n));
      }
      pending = static_cast<int>(k % 2);
      pending_off = off;
      pending_n = n;
    }
    if (pending >= 0) {
      SHOAL_RETURN_IF_ERROR(
          Drain((*staging)[pending], d + pending_off, pending_n));
    }
    return absl::OkStatus();
  }

 private:
  struct Staging {
    void* host = nullptr;
    cudaEvent_t event = nullptr;
  };

  using StagingPair = std::array<Staging, 2>;

  // The staging pair of device `ordinal`, made on first use.
  // REQUIRES: `ordinal` is the current device (its events are made there).
  absl::StatusOr<StagingPair*> EnsureStaging(int ordinal)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    StagingPair& pair = staging_[ordinal];
    for (Staging& s : pair) {
      if (s.host != nullptr) continue;
      SHOAL_CUDA_CHECK(
          cudaHostAlloc(&s.host, kStagingBytes, cudaHostAllocPortable));
      SHOAL_CUDA_CHECK(
          cudaEventCreateWithFlags(&s.event, cudaEventDisableTiming));
      // Recorded once, so the first wait on it returns at once.
      SHOAL_CUDA_CHECK(cudaEventRecord(s.event, nullptr));
    }
    return &pair;
  }

  absl::Status Drain(Staging& buf, uint8_t* dst, uint64_t n)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    SHOAL_CUDA_CHECK(cudaEventSynchronize(buf.event));
    std::memcpy(dst, buf.host, n);
    return absl::OkStatus();
  }

  Mutex mu_;
  // By device ordinal; std::map keeps a pair's address while others are
  // added.
  std::map<int, StagingPair> staging_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<CudaIpc> MakeCudaIpc() {
  return std::make_unique<RealCudaIpc>();
}

}  // namespace shoal::gpu
