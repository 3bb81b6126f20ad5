#include "examples/data_parallel/cpu_kernels.h"

#include <algorithm>
#include <cstring>

// Helpers are forced inline so that they are compiled with the instruction
// set of the multiversioned function they land in.
#define DP_INLINE inline __attribute__((always_inline))
// Clones by x86-64 level: v4 has AVX-512, v3 AVX2 with FMA (plain "avx2"
// would leave FMA out). ThreadSanitizer builds get the portable code only: an
// ifunc resolver runs during relocation, before the TSan runtime is up (as in
// collectives/reduce_kernels).
#if defined(__x86_64__) && !defined(__SANITIZE_THREAD__)
#define DP_MULTIVERSION \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define DP_MULTIVERSION
#endif

namespace shoal::dp {
namespace {

// 16 floats: one AVX-512 register, two AVX2 ones, four SSE ones.
typedef float V16 __attribute__((vector_size(64), aligned(4)));
constexpr int kV = 16;

DP_INLINE V16 Load(const float* p) {
  V16 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
DP_INLINE void Store(float* p, V16 v) { std::memcpy(p, &v, sizeof(v)); }

typedef float V8 __attribute__((vector_size(32), aligned(4)));
typedef float V4 __attribute__((vector_size(16), aligned(4)));

// The sum of the 16 lanes by halving (16 -> 8 -> 4 -> 1): a few vector adds
// instead of a chain of 15 dependent scalar ones, which would cost as much
// as the dot product itself for k ~ 1000. Always the same order.
DP_INLINE float HorizontalSum(V16 v) {
  V8 lo, hi;
  std::memcpy(&lo, &v, sizeof(lo));
  std::memcpy(&hi, reinterpret_cast<const char*>(&v) + sizeof(lo), sizeof(hi));
  const V8 s8 = lo + hi;
  V4 a, b;
  std::memcpy(&a, &s8, sizeof(a));
  std::memcpy(&b, reinterpret_cast<const char*>(&s8) + sizeof(a), sizeof(b));
  const V4 s4 = a + b;
  return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}

// A's k dimension is walked in blocks this long, so the panel of B a
// micro-tile streams (kKc rows × 64 columns = 64 KiB) stays in L2.
constexpr int kKc = 256;
// Rows of B per block in GemmNT (32 rows of 1024 floats: 128 KiB).
constexpr int kNb = 32;

// C[MR × NV·16] (+)= A[MR × kc] · B[kc × NV·16]: MR × NV accumulators held in
// registers; per k, NV loads of B, MR broadcasts of A, MR·NV FMAs.
template <int MR, int NV>
DP_INLINE void TileNN(int kc, const float* a, int64_t a_rs, int64_t a_cs,
                      const float* b, int64_t ldb, float* c, int64_t ldc,
                      bool add) {
  V16 acc[MR][NV];
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NV; ++j) {
      acc[i][j] = add ? Load(c + i * ldc + j * kV) : V16{};
    }
  }
  for (int p = 0; p < kc; ++p) {
    V16 bv[NV];
    for (int j = 0; j < NV; ++j) bv[j] = Load(b + p * ldb + j * kV);
    for (int i = 0; i < MR; ++i) {
      const float av = a[i * a_rs + p * a_cs];
      for (int j = 0; j < NV; ++j) acc[i][j] += av * bv[j];
    }
  }
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NV; ++j) Store(c + i * ldc + j * kV, acc[i][j]);
  }
}

// Columns [n0, n0 + NV·16) of C for every row, MR rows at a time.
template <int NV>
DP_INLINE void ColumnsNN(int m, int kc, const float* a, int64_t a_rs,
                         int64_t a_cs, const float* b, int64_t ldb, float* c,
                         int64_t ldc, bool add) {
  int i = 0;
  for (; i + 4 <= m; i += 4) {
    TileNN<4, NV>(kc, a + i * a_rs, a_rs, a_cs, b, ldb, c + i * ldc, ldc, add);
  }
  for (; i < m; ++i) {
    TileNN<1, NV>(kc, a + i * a_rs, a_rs, a_cs, b, ldb, c + i * ldc, ldc, add);
  }
}

// C[MR × NR] = A[MR × k] · B[NR × k]ᵀ: vector accumulators along k, summed
// across lanes at the end (always in the same order).
template <int MR, int NR>
DP_INLINE void TileNT(int k, const float* a, int64_t lda, const float* b,
                      int64_t ldb, float* c, int64_t ldc) {
  V16 acc[MR][NR] = {};
  int p = 0;
  for (; p + kV <= k; p += kV) {
    V16 av[MR], bv[NR];
    for (int i = 0; i < MR; ++i) av[i] = Load(a + i * lda + p);
    for (int j = 0; j < NR; ++j) bv[j] = Load(b + j * ldb + p);
    for (int i = 0; i < MR; ++i) {
      for (int j = 0; j < NR; ++j) acc[i][j] += av[i] * bv[j];
    }
  }
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NR; ++j) {
      float s = HorizontalSum(acc[i][j]);
      for (int q = p; q < k; ++q) s += a[i * lda + q] * b[j * ldb + q];
      c[i * ldc + j] = s;
    }
  }
}

template <int MR>
DP_INLINE void RowsNT(int n, int k, const float* a, int64_t lda, const float* b,
                      int64_t ldb, float* c, int64_t ldc) {
  int j = 0;
  for (; j + 4 <= n; j += 4) {
    TileNT<MR, 4>(k, a, lda, b + j * ldb, ldb, c + j, ldc);
  }
  for (; j < n; ++j) TileNT<MR, 1>(k, a, lda, b + j * ldb, ldb, c + j, ldc);
}

}  // namespace

DP_MULTIVERSION
void GemmNN(int m, int n, int k, const float* a, int64_t a_rs, int64_t a_cs,
            const float* b, int64_t ldb, float* c, int64_t ldc) {
  if (k == 0) {
    for (int i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, 0.0f);
    return;
  }
  for (int p0 = 0; p0 < k; p0 += kKc) {
    const int kc = std::min(kKc, k - p0);
    const bool add = p0 > 0;
    const float* ap = a + p0 * a_cs;
    const float* bp = b + p0 * ldb;
    int j = 0;
    for (; j + 4 * kV <= n; j += 4 * kV) {
      ColumnsNN<4>(m, kc, ap, a_rs, a_cs, bp + j, ldb, c + j, ldc, add);
    }
    for (; j + kV <= n; j += kV) {
      ColumnsNN<1>(m, kc, ap, a_rs, a_cs, bp + j, ldb, c + j, ldc, add);
    }
    for (; j < n; ++j) {  // the last n % 16 columns
      for (int i = 0; i < m; ++i) {
        float s = add ? c[i * ldc + j] : 0.0f;
        for (int p = 0; p < kc; ++p)
          s += ap[i * a_rs + p * a_cs] * bp[p * ldb + j];
        c[i * ldc + j] = s;
      }
    }
  }
}

DP_MULTIVERSION
void GemmNT(int m, int n, int k, const float* a, int64_t lda, const float* b,
            int64_t ldb, float* c, int64_t ldc) {
  // B is walked in blocks of kNb rows, each reused by every row of A while
  // it sits in L2; walking all of B per row block would stream it from
  // memory m / 4 times.
  for (int j0 = 0; j0 < n; j0 += kNb) {
    const int nb = std::min(kNb, n - j0);
    const float* bj = b + j0 * ldb;
    int i = 0;
    for (; i + 4 <= m; i += 4) {
      RowsNT<4>(nb, k, a + i * lda, lda, bj, ldb, c + i * ldc + j0, ldc);
    }
    for (; i < m; ++i) {
      RowsNT<1>(nb, k, a + i * lda, lda, bj, ldb, c + i * ldc + j0, ldc);
    }
  }
}

DP_MULTIVERSION
void BiasActivation(float* z, int m, int n, const float* bias, bool relu) {
  for (int i = 0; i < m; ++i) {
    float* row = z + int64_t{i} * n;
    if (relu) {
      for (int j = 0; j < n; ++j) row[j] = std::max(row[j] + bias[j], 0.0f);
    } else {
      for (int j = 0; j < n; ++j) row[j] += bias[j];
    }
  }
}

DP_MULTIVERSION
void ReluBackward(float* d, const float* a, int64_t count) {
  for (int64_t i = 0; i < count; ++i) d[i] = a[i] > 0.0f ? d[i] : 0.0f;
}

DP_MULTIVERSION
void ColumnSum(const float* d, int m, int n, float* out) {
  std::fill(out, out + n, 0.0f);
  for (int i = 0; i < m; ++i) {
    const float* row = d + int64_t{i} * n;
    for (int j = 0; j < n; ++j) out[j] += row[j];
  }
}

float MseLossAndGrad(const float* out, int m, int n, const float* y,
                     int64_t ldy, float* dout) {
  const float scale = 2.0f / (static_cast<float>(m) * n);
  double sum = 0.0;
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      const float e = out[int64_t{i} * n + j] - y[i * ldy + j];
      sum += static_cast<double>(e) * e;
      dout[int64_t{i} * n + j] = scale * e;
    }
  }
  return static_cast<float>(sum / (static_cast<double>(m) * n));
}

DP_MULTIVERSION
void SgdMomentum(float* p, const float* g, float* v, int64_t count, float lr,
                 float mu) {
  for (int64_t i = 0; i < count; ++i) {
    v[i] = mu * v[i] + g[i];
    p[i] -= lr * v[i];
  }
}

const char* KernelIsa() {
#if defined(__x86_64__) && !defined(__SANITIZE_THREAD__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("x86-64-v4")) return "x86-64-v4 (AVX-512)";
  if (__builtin_cpu_supports("x86-64-v3")) return "x86-64-v3 (AVX2, FMA)";
#endif
  return "x86-64";
}

}  // namespace shoal::dp
