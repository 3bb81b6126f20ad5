// The few CUDA kernels the GPU path needs besides cuBLAS's matrix products,
// compiled by nvcc (see BUILD.bazel). Each enqueues on `stream` and returns
// the launch error. Every reduction runs in a fixed order (no atomics), so
// results are the same on every run and every rank.
#ifndef SHOAL_EXAMPLES_DATA_PARALLEL_GPU_KERNELS_H_
#define SHOAL_EXAMPLES_DATA_PARALLEL_GPU_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace shoal::dp::cuda {

// z (m × n) += bias per column, then ReLU if `relu`.
cudaError_t BiasActivation(float* z, int m, int n, const float* bias, bool relu,
                           cudaStream_t stream);

// d[i] = a[i] > 0 ? d[i] : 0.
cudaError_t ReluBackward(float* d, const float* a, int64_t count,
                         cudaStream_t stream);

// out[j] = sum over rows of d (m × n), rows added in order.
cudaError_t ColumnSum(const float* d, int m, int n, float* out,
                      cudaStream_t stream);

// dout = 2 (out - y) / (m n); *loss = mean((out - y)²). y has row stride
// ldy. One block, a fixed-shape tree for the sum.
cudaError_t MseLossAndGrad(const float* out, int m, int n, const float* y,
                           int64_t ldy, float* dout, float* loss,
                           cudaStream_t stream);

// v = mu v + g; p -= lr v.
cudaError_t SgdMomentum(float* p, const float* g, float* v, int64_t count,
                        float lr, float mu, cudaStream_t stream);

}  // namespace shoal::dp::cuda

#endif  // SHOAL_EXAMPLES_DATA_PARALLEL_GPU_KERNELS_H_
