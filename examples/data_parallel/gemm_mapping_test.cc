// The cuBLAS argument mapping, run through a reference of cublasSgemm's
// column-major semantics on the CPU and compared with the CPU path's
// row-major kernels: a transposition mistake shows here, without a GPU.
#include "examples/data_parallel/gemm_mapping.h"

#include <cmath>
#include <vector>

#include "examples/data_parallel/cpu_kernels.h"
#include "examples/data_parallel/model.h"
#include "gtest/gtest.h"

namespace shoal::dp {
namespace {

// cublasSgemm with alpha 1, beta 0, as documented: C(i, j) = sum over p of
// op(A)(i, p) · op(B)(p, j), element (r, c) of a column-major X at
// x[r + c · ldx].
void ReferenceSgemm(const ColMajorGemm& g) {
  for (int i = 0; i < g.m; ++i) {
    for (int j = 0; j < g.n; ++j) {
      double s = 0;
      for (int p = 0; p < g.k; ++p) {
        const float a = g.trans_a ? g.a[p + i * g.lda] : g.a[i + p * g.lda];
        const float b = g.trans_b ? g.b[j + p * g.ldb] : g.b[p + j * g.ldb];
        s += double{a} * b;
      }
      g.c[i + j * g.ldc] = static_cast<float>(s);
    }
  }
}

std::vector<float> Random(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = rng.Symmetric();
  return v;
}

void ExpectNear(const std::vector<float>& a, const std::vector<float>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-4) << i;
}

constexpr int kBatch = 6, kIn = 5, kOut = 7, kLd = 9;  // x rows padded

TEST(GemmMappingTest, ForwardIsInputTimesWeights) {
  std::vector<float> x = Random(kBatch * kLd, 1), w = Random(kIn * kOut, 2);
  std::vector<float> gpu(kBatch * kOut), cpu(kBatch * kOut);
  ReferenceSgemm(
      ForwardProduct(kBatch, kIn, kOut, x.data(), kLd, w.data(), gpu.data()));
  GemmNN(kBatch, kOut, kIn, x.data(), kLd, 1, w.data(), kOut, cpu.data(), kOut);
  ExpectNear(gpu, cpu);
}

TEST(GemmMappingTest, WeightGradientIsInputTransposedTimesDz) {
  std::vector<float> x = Random(kBatch * kLd, 3), dz = Random(kBatch * kOut, 4);
  std::vector<float> gpu(kIn * kOut), cpu(kIn * kOut);
  ReferenceSgemm(WeightGradProduct(kBatch, kIn, kOut, x.data(), kLd, dz.data(),
                                   gpu.data()));
  GemmNN(kIn, kOut, kBatch, x.data(), 1, kLd, dz.data(), kOut, cpu.data(),
         kOut);
  ExpectNear(gpu, cpu);
}

TEST(GemmMappingTest, InputGradientIsDzTimesWeightsTransposed) {
  std::vector<float> dz = Random(kBatch * kOut, 5), w = Random(kIn * kOut, 6);
  std::vector<float> gpu(kBatch * kIn), cpu(kBatch * kIn);
  ReferenceSgemm(
      InputGradProduct(kBatch, kIn, kOut, dz.data(), w.data(), gpu.data()));
  GemmNT(kBatch, kIn, kOut, dz.data(), kOut, w.data(), kOut, cpu.data(), kIn);
  ExpectNear(gpu, cpu);
}

}  // namespace
}  // namespace shoal::dp
