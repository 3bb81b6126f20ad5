#include "examples/data_parallel/cpu_kernels.h"

#include <cmath>
#include <vector>

#include "examples/data_parallel/model.h"
#include "gtest/gtest.h"

namespace shoal::dp {
namespace {

std::vector<float> Random(int64_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = rng.Symmetric();
  return v;
}

// Sizes around the tiles (4 rows, 16/64 columns, 256-deep panels).
struct Dims {
  int m, n, k;
};
const Dims kDims[] = {{1, 1, 1},    {4, 64, 16},   {7, 37, 300},
                      {9, 130, 17}, {64, 96, 513}, {3, 15, 5}};

TEST(GemmTest, NNMatchesTheReferenceWithStridedA) {
  for (const Dims& d : kDims) {
    // A is stored transposed with a padded stride: A(i, p) = at[p * s + i].
    const int s = d.m + 3;
    std::vector<float> at = Random(int64_t{d.k} * s, 1),
                       b = Random(int64_t{d.k} * (d.n + 1), 2);
    std::vector<float> c(int64_t{d.m} * (d.n + 2), 42.0f);
    GemmNN(d.m, d.n, d.k, at.data(), 1, s, b.data(), d.n + 1, c.data(),
           d.n + 2);
    for (int i = 0; i < d.m; ++i) {
      for (int j = 0; j < d.n; ++j) {
        double ref = 0;
        for (int p = 0; p < d.k; ++p)
          ref += double{at[p * s + i]} * b[p * (d.n + 1) + j];
        ASSERT_NEAR(c[i * (d.n + 2) + j], ref, 1e-4 * std::sqrt(d.k))
            << d.m << "x" << d.n << "x" << d.k << " at " << i << "," << j;
      }
      ASSERT_EQ(c[i * (d.n + 2) + d.n], 42.0f);  // padding untouched
    }
  }
}

TEST(GemmTest, NTMatchesTheReference) {
  for (const Dims& d : kDims) {
    std::vector<float> a = Random(int64_t{d.m} * d.k, 3),
                       b = Random(int64_t{d.n} * d.k, 4), c(int64_t{d.m} * d.n);
    GemmNT(d.m, d.n, d.k, a.data(), d.k, b.data(), d.k, c.data(), d.n);
    for (int i = 0; i < d.m; ++i) {
      for (int j = 0; j < d.n; ++j) {
        double ref = 0;
        for (int p = 0; p < d.k; ++p)
          ref += double{a[i * d.k + p]} * b[j * d.k + p];
        ASSERT_NEAR(c[i * d.n + j], ref, 1e-4 * std::sqrt(d.k));
      }
    }
  }
}

TEST(GemmTest, Deterministic) {
  std::vector<float> a = Random(64 * 300, 5), b = Random(300 * 130, 6);
  std::vector<float> c1(64 * 130), c2(64 * 130);
  GemmNN(64, 130, 300, a.data(), 300, 1, b.data(), 130, c1.data(), 130);
  GemmNN(64, 130, 300, a.data(), 300, 1, b.data(), 130, c2.data(), 130);
  EXPECT_EQ(c1, c2);
}

TEST(ElementwiseTest, BiasReluColumnSumMseSgd) {
  std::vector<float> z = {1, -2, 3, -4, 5, -6};  // 2 x 3
  const float bias[3] = {0.5f, 1.0f, -10.0f};
  std::vector<float> lin = z;
  BiasActivation(lin.data(), 2, 3, bias, false);
  EXPECT_EQ(lin, (std::vector<float>{1.5f, -1, -7, -3.5f, 6, -16}));
  BiasActivation(z.data(), 2, 3, bias, true);
  EXPECT_EQ(z, (std::vector<float>{1.5f, 0, 0, 0, 6, 0}));

  std::vector<float> d = {1, 2, 3, 4, 5, 6};
  ReluBackward(d.data(), z.data(), 6);
  EXPECT_EQ(d, (std::vector<float>{1, 0, 0, 0, 5, 0}));

  float sums[3];
  const float m[6] = {1, 2, 3, 4, 5, 6};
  ColumnSum(m, 2, 3, sums);
  EXPECT_EQ(sums[0], 5);
  EXPECT_EQ(sums[2], 9);

  // y rows have stride 4 (as in the data set: x then y).
  const float out[4] = {1, 2, 3, 4}, y[8] = {0, 2, 9, 9, 1, 6, 9, 9};
  float dout[4];
  EXPECT_FLOAT_EQ(MseLossAndGrad(out, 2, 2, y, 4, dout),
                  (1 + 0 + 4 + 4) / 4.0f);
  EXPECT_FLOAT_EQ(dout[0], 0.5f);   // 2 * (1 - 0) / 4
  EXPECT_FLOAT_EQ(dout[3], -1.0f);  // 2 * (4 - 6) / 4

  float p[2] = {1, 1}, g[2] = {1, -1}, v[2] = {0.5f, 0};
  SgdMomentum(p, g, v, 2, 0.1f, 0.9f);
  EXPECT_FLOAT_EQ(v[0], 1.45f);
  EXPECT_FLOAT_EQ(p[0], 1 - 0.145f);
  EXPECT_FLOAT_EQ(p[1], 1.1f);
}

}  // namespace
}  // namespace shoal::dp
