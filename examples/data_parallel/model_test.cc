#include "examples/data_parallel/model.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace shoal::dp {
namespace {

TEST(ParamLayoutTest, LastLayerFirstAndContiguous) {
  ModelSpec spec{.d_in = 5, .hidden = 7, .layers = 3, .d_out = 3};
  ParamLayout layout(spec);
  // Layer 2 (7 -> 3) first, then layer 1 (7 -> 7), then layer 0 (5 -> 7).
  EXPECT_EQ(layout.layer(2).w, 0);
  EXPECT_EQ(layout.layer(2).b, 21);
  EXPECT_EQ(layout.layer(2).end, 24);
  EXPECT_EQ(layout.layer(1).w, 24);
  EXPECT_EQ(layout.layer(1).end, 24 + 49 + 7);
  EXPECT_EQ(layout.layer(0).w, 80);
  EXPECT_EQ(layout.layer(0).end, 80 + 35 + 7);
  EXPECT_EQ(layout.params(), 122);
  EXPECT_EQ(layout.loss_index(), 122);
  EXPECT_EQ(layout.grad_elems(), 123);
}

TEST(ModelSpecTest, Validates) {
  EXPECT_TRUE(ModelSpec{}.Validate().ok());
  EXPECT_FALSE(ModelSpec{.layers = 4}.Validate().ok());
  EXPECT_FALSE(ModelSpec{.hidden = 0}.Validate().ok());
  EXPECT_EQ(ModelSpec{}.ToString(), "128-1024-1024-32");
  EXPECT_EQ(
      (ModelSpec{.d_in = 4, .hidden = 8, .layers = 2, .d_out = 2}.ToString()),
      "4-8-2");
}

TEST(InitialParamsTest, DeterministicBoundedAndZeroBiases) {
  ModelSpec spec{.d_in = 16, .hidden = 32, .layers = 3, .d_out = 4};
  const std::vector<float> a = InitialParams(spec, 7);
  EXPECT_EQ(a, InitialParams(spec, 7));
  EXPECT_NE(a, InitialParams(spec, 8));
  ParamLayout layout(spec);
  for (int l = 0; l < 3; ++l) {
    const float bound = std::sqrt((l == 2 ? 3.0f : 6.0f) / spec.in(l));
    for (int64_t i = layout.layer(l).w; i < layout.layer(l).b; ++i) {
      ASSERT_LE(std::abs(a[i]), bound);
    }
    for (int64_t i = layout.layer(l).b; i < layout.layer(l).end; ++i) {
      ASSERT_EQ(a[i], 0.0f);
    }
  }
}

TEST(DatasetTest, DeterministicWithUnitScaleTargets) {
  ModelSpec spec{.d_in = 32, .hidden = 64, .layers = 3, .d_out = 8};
  const int64_t n = 4096, ld = 40;
  std::vector<float> a(n * ld), b(n * ld);
  GenerateDataset(spec, n, 3, absl::MakeSpan(a));
  GenerateDataset(spec, n, 3, absl::MakeSpan(b));
  EXPECT_EQ(a, b);
  double x2 = 0, y2 = 0;
  for (int64_t r = 0; r < n; ++r) {
    for (int j = 0; j < 32; ++j) {
      ASSERT_GE(a[r * ld + j], -1.0f);
      ASSERT_LT(a[r * ld + j], 1.0f);
      x2 += a[r * ld + j] * a[r * ld + j];
    }
    for (int j = 32; j < 40; ++j) y2 += a[r * ld + j] * a[r * ld + j];
  }
  EXPECT_NEAR(x2 / (n * 32), 1.0 / 3, 0.01);  // uniform in [-1, 1)
  // The targets' scale is set so a model starts with a loss near 1.
  EXPECT_GT(y2 / (n * 8), 0.3);
  EXPECT_LT(y2 / (n * 8), 3.0);
}

TEST(HashFloatsTest, SeesEveryBit) {
  std::vector<float> v(1001, 0.5f);
  const uint64_t h = HashFloats(v.data(), 1001);
  EXPECT_EQ(h, HashFloats(v.data(), 1001));
  for (int i : {0, 7, 500, 999, 1000}) {
    std::vector<float> w = v;
    w[i] = std::nextafter(w[i], 1.0f);
    EXPECT_NE(HashFloats(w.data(), 1001), h) << i;
  }
  EXPECT_NE(HashFloats(v.data(), 1000), h);
}

}  // namespace
}  // namespace shoal::dp
