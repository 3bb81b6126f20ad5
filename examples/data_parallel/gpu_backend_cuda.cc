// The GPU backend: cuBLAS for the matrix products, gpu_kernels.cu for the
// rest, everything on one compute stream. Gradient buckets are all-reduced on
// a second stream that waits (through an event) for the gradients written so
// far, so NCCL runs while backward's later kernels do.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "examples/data_parallel/backend.h"
#include "examples/data_parallel/gemm_mapping.h"
#include "examples/data_parallel/gpu_kernels.h"

namespace shoal::dp {
namespace {

absl::Status CudaError(cudaError_t e, const char* call, int line) {
  return absl::InternalError(absl::StrCat(call, ": ", cudaGetErrorName(e), " (",
                                          cudaGetErrorString(e),
                                          ") at gpu_backend_cuda.cc:", line));
}

absl::Status CublasError(cublasStatus_t s, const char* call, int line) {
  return absl::InternalError(absl::StrCat(call, ": ", cublasGetStatusName(s),
                                          " at gpu_backend_cuda.cc:", line));
}

#define DP_CUDA(call)                                                       \
  do {                                                                      \
    const cudaError_t dp_err_ = (call);                                     \
    if (dp_err_ != cudaSuccess) return CudaError(dp_err_, #call, __LINE__); \
  } while (0)

#define DP_CUBLAS(call)                            \
  do {                                             \
    const cublasStatus_t dp_st_ = (call);          \
    if (dp_st_ != CUBLAS_STATUS_SUCCESS)           \
      return CublasError(dp_st_, #call, __LINE__); \
  } while (0)

constexpr float kOne = 1.0f, kZero = 0.0f;

class GpuBackend : public Backend {
 public:
  GpuBackend(const ModelSpec& spec, const Shard& shard, int device)
      : spec_(spec), layout_(spec), shard_(shard), device_(device) {}

  ~GpuBackend() override {
    cudaSetDevice(device_);
    if (compute_ != nullptr) cudaStreamSynchronize(compute_);
    if (comm_ != nullptr) cudaStreamSynchronize(comm_);
    for (void* p : allocations_) cudaFree(p);
    if (cublas_ != nullptr) cublasDestroy(cublas_);
    if (grads_done_ != nullptr) cudaEventDestroy(grads_done_);
    if (compute_ != nullptr) cudaStreamDestroy(compute_);
    if (comm_ != nullptr) cudaStreamDestroy(comm_);
  }

  absl::Status Init(DataView data, absl::Span<const float> initial) {
    DP_CUDA(cudaSetDevice(device_));
    cudaDeviceProp prop;
    DP_CUDA(cudaGetDeviceProperties(&prop, device_));
    name_ = prop.name;
    DP_CUDA(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking));
    DP_CUDA(cudaStreamCreateWithFlags(&comm_, cudaStreamNonBlocking));
    DP_CUDA(cudaEventCreateWithFlags(&grads_done_, cudaEventDisableTiming));
    DP_CUBLAS(cublasCreate(&cublas_));
    DP_CUBLAS(cublasSetStream(cublas_, compute_));
    // Plain FP32: the default math mode (TF32 would need
    // CUBLAS_TF32_TENSOR_OP_MATH), so the loss matches the CPU path's.
    DP_CUBLAS(cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH));

    const int64_t m = shard_.batch;
    SHOAL_RETURN_IF_ERROR(Alloc(&params_, layout_.params()));
    SHOAL_RETURN_IF_ERROR(Alloc(&grads_, layout_.grad_elems()));
    SHOAL_RETURN_IF_ERROR(Alloc(&velocity_, layout_.params()));
    acts_.resize(spec_.layers);
    int widest = spec_.d_in;
    for (int l = 0; l < spec_.layers; ++l) {
      SHOAL_RETURN_IF_ERROR(Alloc(&acts_[l], m * spec_.out(l)));
      widest = std::max(widest, spec_.out(l));
    }
    SHOAL_RETURN_IF_ERROR(Alloc(&dz_, m * widest));
    SHOAL_RETURN_IF_ERROR(Alloc(&da_, m * widest));
    DP_CUDA(cudaMemcpy(params_, initial.data(), initial.size() * sizeof(float),
                       cudaMemcpyHostToDevice));
    DP_CUDA(cudaMemset(velocity_, 0, layout_.params() * sizeof(float)));
    DP_CUDA(cudaMemset(grads_, 0, layout_.grad_elems() * sizeof(float)));

    // This rank's rows only, straight from the store's mapping: a batch of
    // `batch` rows out of every world × batch, one 2-D copy.
    const int64_t ld = spec_.d_in + spec_.d_out;
    const size_t row_bytes = ld * sizeof(float);
    SHOAL_RETURN_IF_ERROR(
        Alloc(&shard_rows_, shard_.batches_per_epoch * m * ld));
    DP_CUDA(cudaMemcpy2D(shard_rows_, m * row_bytes,
                         data.rows + int64_t{shard_.rank} * m * ld,
                         int64_t{shard_.world} * m * row_bytes, m * row_bytes,
                         shard_.batches_per_epoch, cudaMemcpyHostToDevice));
    // The copies and memsets above ran on the legacy default stream (from
    // pageable memory a copy may return before its DMA lands), and the
    // compute and communication streams are non-blocking: they do not wait
    // for it. Finish everything before the first kernel or collective.
    DP_CUDA(cudaDeviceSynchronize());
    return absl::OkStatus();
  }

  std::string Describe() const override {
    return absl::StrCat("cuda:", device_, " (", name_, ")");
  }
  bool on_device() const override { return true; }
  float* params() override { return params_; }
  float* grads() override { return grads_; }

  absl::Status ForwardBackward(
      int64_t step,
      const std::function<absl::Status(int)>& grads_ready) override {
    const int m = shard_.batch;
    const int ld = spec_.d_in + spec_.d_out;
    const float* x =
        shard_rows_ + (step % shard_.batches_per_epoch) * int64_t{m} * ld;
    const float* y = x + spec_.d_in;
    const int last = spec_.layers - 1;
    for (int l = 0; l <= last; ++l) {
      const float* in = l == 0 ? x : acts_[l - 1];
      const int ld_in = l == 0 ? ld : spec_.in(l);
      const int n_in = spec_.in(l), n_out = spec_.out(l);
      const LayerSlice& s = layout_.layer(l);
      SHOAL_RETURN_IF_ERROR(Sgemm(
          ForwardProduct(m, n_in, n_out, in, ld_in, params_ + s.w, acts_[l])));
      DP_CUDA(cuda::BiasActivation(acts_[l], m, n_out, params_ + s.b,
                                   /*relu=*/l < last, compute_));
    }
    DP_CUDA(cuda::MseLossAndGrad(acts_[last], m, spec_.d_out, y, ld, dz_,
                                 grads_ + layout_.loss_index(), compute_));
    for (int l = last; l >= 0; --l) {
      const float* in = l == 0 ? x : acts_[l - 1];
      const int ld_in = l == 0 ? ld : spec_.in(l);
      const int n_in = spec_.in(l), n_out = spec_.out(l);
      const LayerSlice& s = layout_.layer(l);
      SHOAL_RETURN_IF_ERROR(Sgemm(
          WeightGradProduct(m, n_in, n_out, in, ld_in, dz_, grads_ + s.w)));
      DP_CUDA(cuda::ColumnSum(dz_, m, n_out, grads_ + s.b, compute_));
      if (absl::Status st = grads_ready(l); !st.ok()) return st;
      if (l == 0) break;
      SHOAL_RETURN_IF_ERROR(
          Sgemm(InputGradProduct(m, n_in, n_out, dz_, params_ + s.w, da_)));
      DP_CUDA(
          cuda::ReluBackward(da_, acts_[l - 1], int64_t{m} * n_in, compute_));
      std::swap(dz_, da_);
    }
    return absl::OkStatus();
  }

  absl::StatusOr<void*> StreamAfterGrads() override {
    DP_CUDA(cudaEventRecord(grads_done_, compute_));
    DP_CUDA(cudaStreamWaitEvent(comm_, grads_done_, 0));
    return static_cast<void*>(comm_);
  }

  absl::Status Update(float lr, float momentum) override {
    // The all-reduces finished before this (GradSync::Finish waited for the
    // communication stream), so the compute stream sees their results.
    DP_CUDA(cuda::SgdMomentum(params_, grads_, velocity_, layout_.params(), lr,
                              momentum, compute_));
    return absl::OkStatus();
  }

  absl::StatusOr<float> Loss() override {
    float loss = 0;
    DP_CUDA(cudaMemcpyAsync(&loss, grads_ + layout_.loss_index(), sizeof(float),
                            cudaMemcpyDeviceToHost, compute_));
    DP_CUDA(cudaStreamSynchronize(compute_));
    return loss;
  }

  absl::Status CopyParamsToHost(absl::Span<float> out) override {
    DP_CUDA(cudaMemcpyAsync(out.data(), params_, out.size() * sizeof(float),
                            cudaMemcpyDeviceToHost, compute_));
    DP_CUDA(cudaStreamSynchronize(compute_));
    return absl::OkStatus();
  }

 private:
  absl::Status Sgemm(const ColMajorGemm& g) {
    DP_CUBLAS(cublasSgemm(cublas_, g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                          g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, g.m, g.n, g.k,
                          &kOne, g.a, g.lda, g.b, g.ldb, &kZero, g.c, g.ldc));
    return absl::OkStatus();
  }

  absl::Status Alloc(float** p, int64_t elems) {
    void* raw = nullptr;
    DP_CUDA(cudaMalloc(&raw, std::max<int64_t>(elems, 1) * sizeof(float)));
    allocations_.push_back(raw);
    *p = static_cast<float*>(raw);
    return absl::OkStatus();
  }

  const ModelSpec spec_;
  const ParamLayout layout_;
  const Shard shard_;
  const int device_;
  std::string name_;
  cudaStream_t compute_ = nullptr, comm_ = nullptr;
  cudaEvent_t grads_done_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  std::vector<void*> allocations_;
  float *params_ = nullptr, *grads_ = nullptr, *velocity_ = nullptr;
  std::vector<float*> acts_;
  float *dz_ = nullptr, *da_ = nullptr, *shard_rows_ = nullptr;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> MakeGpuBackend(
    const ModelSpec& spec, const Shard& shard, DataView data,
    absl::Span<const float> initial_params, int device) {
  if (initial_params.size() !=
      static_cast<size_t>(ParamLayout(spec).params())) {
    return absl::InvalidArgumentError("initial parameters of the wrong size");
  }
  auto backend = std::make_unique<GpuBackend>(spec, shard, device);
  if (absl::Status s = backend->Init(data, initial_params); !s.ok()) return s;
  return backend;
}

}  // namespace shoal::dp
