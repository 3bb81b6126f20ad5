#include "examples/data_parallel/gpu_kernels.h"

namespace shoal::dp::cuda {
namespace {

constexpr int kThreads = 256;

int Blocks(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 65535 ? b : 65535);
}

__global__ void BiasActivationKernel(float* z, int64_t count, int n,
                                     const float* bias, bool relu) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float v = z[i] + bias[i % n];
    z[i] = relu ? fmaxf(v, 0.0f) : v;
  }
}

__global__ void ReluBackwardKernel(float* d, const float* a, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    d[i] = a[i] > 0.0f ? d[i] : 0.0f;
  }
}

__global__ void ColumnSumKernel(const float* d, int m, int n, float* out) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= n) return;
  float s = 0.0f;
  for (int i = 0; i < m; ++i) s += d[int64_t{i} * n + j];
  out[j] = s;
}

__global__ void MseKernel(const float* out, int m, int n, const float* y,
                          int64_t ldy, float* dout, float* loss) {
  __shared__ double partial[kThreads];
  const int64_t count = int64_t{m} * n;
  const float scale = 2.0f / static_cast<float>(count);
  double s = 0.0;
  for (int64_t k = threadIdx.x; k < count; k += kThreads) {
    const int64_t i = k / n, j = k % n;
    const float e = out[k] - y[i * ldy + j];
    dout[k] = scale * e;
    s += static_cast<double>(e) * e;
  }
  partial[threadIdx.x] = s;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) partial[threadIdx.x] += partial[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) *loss = static_cast<float>(partial[0] / count);
}

__global__ void SgdKernel(float* p, const float* g, float* v, int64_t count,
                          float lr, float mu) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float vi = mu * v[i] + g[i];
    v[i] = vi;
    p[i] -= lr * vi;
  }
}

}  // namespace

cudaError_t BiasActivation(float* z, int m, int n, const float* bias, bool relu,
                           cudaStream_t stream) {
  const int64_t count = int64_t{m} * n;
  BiasActivationKernel<<<Blocks(count), kThreads, 0, stream>>>(z, count, n,
                                                               bias, relu);
  return cudaGetLastError();
}

cudaError_t ReluBackward(float* d, const float* a, int64_t count,
                         cudaStream_t stream) {
  ReluBackwardKernel<<<Blocks(count), kThreads, 0, stream>>>(d, a, count);
  return cudaGetLastError();
}

cudaError_t ColumnSum(const float* d, int m, int n, float* out,
                      cudaStream_t stream) {
  ColumnSumKernel<<<Blocks(n), kThreads, 0, stream>>>(d, m, n, out);
  return cudaGetLastError();
}

cudaError_t MseLossAndGrad(const float* out, int m, int n, const float* y,
                           int64_t ldy, float* dout, float* loss,
                           cudaStream_t stream) {
  MseKernel<<<1, kThreads, 0, stream>>>(out, m, n, y, ldy, dout, loss);
  return cudaGetLastError();
}

cudaError_t SgdMomentum(float* p, const float* g, float* v, int64_t count,
                        float lr, float mu, cudaStream_t stream) {
  SgdKernel<<<Blocks(count), kThreads, 0, stream>>>(p, g, v, count, lr, mu);
  return cudaGetLastError();
}

}  // namespace shoal::dp::cuda
