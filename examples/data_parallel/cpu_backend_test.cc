// The CPU backend's gradients: against finite differences, in the order and
// prefix GradSync relies on, and split across "ranks" (the data-parallel
// identity: the mean of the shards' gradients is the full batch's gradient).
#include <cmath>
#include <vector>

#include "examples/data_parallel/backend.h"
#include "examples/data_parallel/model.h"
#include "gtest/gtest.h"

namespace shoal::dp {
namespace {

const ModelSpec kSpec{.d_in = 5, .hidden = 9, .layers = 3, .d_out = 3};
constexpr int64_t kSamples = 64;

std::vector<float> Data() {
  std::vector<float> rows(kSamples * (kSpec.d_in + kSpec.d_out));
  GenerateDataset(kSpec, kSamples, 11, absl::MakeSpan(rows));
  return rows;
}

std::unique_ptr<Backend> Make(const std::vector<float>& rows,
                              const std::vector<float>& params, Shard shard) {
  auto b = MakeCpuBackend(kSpec, shard, {rows.data(), kSamples}, params);
  EXPECT_TRUE(b.ok()) << b.status();
  return *std::move(b);
}

float LossAt(const std::vector<float>& rows, const std::vector<float>& params,
             Shard shard) {
  auto b = Make(rows, params, shard);
  EXPECT_TRUE(b->ForwardBackward(0, [](int) { return absl::OkStatus(); }).ok());
  return *b->Loss();
}

TEST(CpuBackendTest, GradientsMatchFiniteDifferences) {
  const std::vector<float> rows = Data();
  std::vector<float> params = InitialParams(kSpec, 5);
  // Non-zero biases, so their gradients are exercised from a generic point.
  ParamLayout layout(kSpec);
  for (int l = 0; l < 3; ++l) {
    for (int64_t i = layout.layer(l).b; i < layout.layer(l).end; ++i) {
      params[i] = 0.1f * static_cast<float>(i % 5) - 0.2f;
    }
  }
  const Shard shard{0, 1, 8, kSamples / 8};
  auto b = Make(rows, params, shard);
  ASSERT_TRUE(b->ForwardBackward(0, [](int) { return absl::OkStatus(); }).ok());
  const std::vector<float> grads(b->grads(), b->grads() + layout.params());
  int checked = 0;
  for (int64_t i = 0; i < layout.params(); i += 3) {
    const float eps = 1e-2f;
    std::vector<float> p = params;
    p[i] = params[i] + eps;
    const double up = LossAt(rows, p, shard);
    p[i] = params[i] - eps;
    const double down = LossAt(rows, p, shard);
    const double numeric = (up - down) / (2 * eps);
    EXPECT_NEAR(grads[i], numeric, 2e-3 + 2e-2 * std::abs(numeric))
        << "parameter " << i;
    ++checked;
  }
  EXPECT_GT(checked, 50);
}

TEST(CpuBackendTest, LayersReportedLastFirstWithTheirPrefixFinal) {
  const std::vector<float> rows = Data();
  const std::vector<float> params = InitialParams(kSpec, 5);
  ParamLayout layout(kSpec);
  auto b = Make(rows, params, {0, 1, 16, kSamples / 16});
  std::vector<int> order;
  std::vector<std::vector<float>> prefixes;
  ASSERT_TRUE(b->ForwardBackward(3, [&](int l) {
                 order.push_back(l);
                 prefixes.emplace_back(b->grads(),
                                       b->grads() + layout.layer(l).end);
                 return absl::OkStatus();
               }).ok());
  EXPECT_EQ(order, (std::vector<int>{2, 1, 0}));
  for (size_t k = 0; k < prefixes.size(); ++k) {
    for (size_t i = 0; i < prefixes[k].size(); ++i) {
      ASSERT_EQ(prefixes[k][i], b->grads()[i]) << "layer " << order[k];
    }
  }
}

TEST(CpuBackendTest, MeanOfShardGradientsIsTheFullBatchGradient) {
  const std::vector<float> rows = Data();
  const std::vector<float> params = InitialParams(kSpec, 5);
  ParamLayout layout(kSpec);
  const int64_t step = 1;  // not the first global batch
  auto full = Make(rows, params, {0, 1, 16, kSamples / 16});
  auto r0 = Make(rows, params, {0, 2, 8, kSamples / 16});
  auto r1 = Make(rows, params, {1, 2, 8, kSamples / 16});
  auto none = [](int) { return absl::OkStatus(); };
  ASSERT_TRUE(full->ForwardBackward(step, none).ok());
  ASSERT_TRUE(r0->ForwardBackward(step, none).ok());
  ASSERT_TRUE(r1->ForwardBackward(step, none).ok());
  for (int64_t i = 0; i < layout.grad_elems(); ++i) {  // loss included
    const float mean = (r0->grads()[i] + r1->grads()[i]) / 2;
    ASSERT_NEAR(mean, full->grads()[i], 1e-5 + 1e-4 * std::abs(mean)) << i;
  }
}

TEST(CpuBackendTest, UpdateIsSgdWithMomentum) {
  const std::vector<float> rows = Data();
  const std::vector<float> params = InitialParams(kSpec, 5);
  ParamLayout layout(kSpec);
  auto b = Make(rows, params, {0, 1, 8, kSamples / 8});
  ASSERT_TRUE(b->ForwardBackward(0, [](int) { return absl::OkStatus(); }).ok());
  const std::vector<float> g(b->grads(), b->grads() + layout.params());
  ASSERT_TRUE(b->Update(0.1f, 0.9f).ok());
  ASSERT_TRUE(b->Update(0.1f, 0.9f).ok());  // same gradients: v = 1.9 g
  std::vector<float> out(layout.params());
  ASSERT_TRUE(b->CopyParamsToHost(absl::MakeSpan(out)).ok());
  for (int64_t i = 0; i < layout.params(); ++i) {
    ASSERT_NEAR(out[i], params[i] - 0.1f * (g[i] + (0.9f * g[i] + g[i])), 1e-6);
  }
}

}  // namespace
}  // namespace shoal::dp
