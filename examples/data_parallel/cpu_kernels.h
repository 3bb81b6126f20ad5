// The CPU path's numerical kernels: single-threaded, row-major, float32.
// The matrix products use register tiles of 16-float vectors (GCC vector
// extensions) and are compiled for x86-64-v4 (AVX-512), v3 (AVX2 + FMA) and
// baseline x86-64, picked at load time, like collectives/reduce_kernels. For a
// given machine every call is deterministic, so ranks that feed the same bytes
// get the same bytes.
#ifndef SHOAL_EXAMPLES_DATA_PARALLEL_CPU_KERNELS_H_
#define SHOAL_EXAMPLES_DATA_PARALLEL_CPU_KERNELS_H_

#include <cstdint>

namespace shoal::dp {

// C (m × n, row stride ldc) = A · B, where A's element (i, p) is
// a[i * a_rs + p * a_cs] (so a transposed A costs nothing) and B is k × n
// with row stride ldb.
void GemmNN(int m, int n, int k, const float* a, int64_t a_rs, int64_t a_cs,
            const float* b, int64_t ldb, float* c, int64_t ldc);

// C (m × n) = A · Bᵀ, with A m × k (row stride lda) and B n × k (row stride
// ldb): every element is a dot product of two contiguous rows.
void GemmNT(int m, int n, int k, const float* a, int64_t lda, const float* b,
            int64_t ldb, float* c, int64_t ldc);

// z (m × n, contiguous) += bias (per column), then ReLU if `relu`.
void BiasActivation(float* z, int m, int n, const float* bias, bool relu);

// d[i] = a[i] > 0 ? d[i] : 0 (the ReLU's derivative, from its output).
void ReluBackward(float* d, const float* a, int64_t count);

// out[j] = sum over rows i of d[i * n + j] (rows added in order).
void ColumnSum(const float* d, int m, int n, float* out);

// Mean squared error of out (m × n, contiguous) against y (m × n, row stride
// ldy); writes its gradient d(loss)/d(out) = 2 (out - y) / (m n) to dout and
// returns the loss.
float MseLossAndGrad(const float* out, int m, int n, const float* y,
                     int64_t ldy, float* dout);

// SGD with momentum, as torch.optim.SGD: v = mu v + g; p -= lr v.
void SgdMomentum(float* p, const float* g, float* v, int64_t count, float lr,
                 float mu);

// Which clone the kernels run, e.g. "x86-64-v4 (AVX-512)".
const char* KernelIsa();

}  // namespace shoal::dp

#endif  // SHOAL_EXAMPLES_DATA_PARALLEL_CPU_KERNELS_H_
