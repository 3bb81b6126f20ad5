// The CPU backend: one thread, the kernels of cpu_kernels.h, activations in
// buffers allocated once. The batch's inputs and targets are read where the
// store mapped them (row stride d_in + d_out), never copied.
#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "examples/data_parallel/backend.h"
#include "examples/data_parallel/cpu_kernels.h"

namespace shoal::dp {
namespace {

class CpuBackend : public Backend {
 public:
  CpuBackend(const ModelSpec& spec, const Shard& shard, DataView data,
             absl::Span<const float> initial_params)
      : spec_(spec),
        layout_(spec),
        shard_(shard),
        data_(data),
        params_(initial_params.begin(), initial_params.end()),
        grads_(layout_.grad_elems(), 0.0f),
        velocity_(layout_.params(), 0.0f),
        acts_(spec.layers) {
    const int64_t m = shard.batch;
    for (int l = 0; l < spec.layers; ++l) acts_[l].resize(m * spec.out(l));
    int widest = spec.d_in;
    for (int l = 0; l < spec.layers; ++l)
      widest = std::max(widest, spec.out(l));
    dz_.resize(m * widest);
    da_.resize(m * widest);
  }

  std::string Describe() const override {
    return absl::StrCat("cpu (", KernelIsa(), ")");
  }
  bool on_device() const override { return false; }
  float* params() override { return params_.data(); }
  float* grads() override { return grads_.data(); }

  absl::Status ForwardBackward(
      int64_t step,
      const std::function<absl::Status(int)>& grads_ready) override {
    const int m = shard_.batch;
    const int64_t ld = spec_.d_in + spec_.d_out;
    const float* x = data_.rows + shard_.FirstRow(step) * ld;
    const float* y = x + spec_.d_in;
    const int last = spec_.layers - 1;

    // Forward: acts_[l] = act(input · W_l + b_l).
    for (int l = 0; l <= last; ++l) {
      const float* in = l == 0 ? x : acts_[l - 1].data();
      const int64_t ld_in = l == 0 ? ld : spec_.in(l);
      const LayerSlice& s = layout_.layer(l);
      GemmNN(m, spec_.out(l), spec_.in(l), in, ld_in, 1, &params_[s.w],
             spec_.out(l), acts_[l].data(), spec_.out(l));
      BiasActivation(acts_[l].data(), m, spec_.out(l), &params_[s.b],
                     /*relu=*/l < last);
    }
    grads_[layout_.loss_index()] =
        MseLossAndGrad(acts_[last].data(), m, spec_.d_out, y, ld, dz_.data());

    // Backward, last layer first. Each layer's weight gradient is computed
    // before the gradient it passes down, so its bucket can be posted while
    // the rest of backward runs.
    for (int l = last; l >= 0; --l) {
      const float* in = l == 0 ? x : acts_[l - 1].data();
      const int64_t ld_in = l == 0 ? ld : spec_.in(l);
      const LayerSlice& s = layout_.layer(l);
      const int n_in = spec_.in(l), n_out = spec_.out(l);
      // dW = inputᵀ · dz: A(i, p) = input[p][i].
      GemmNN(n_in, n_out, m, in, 1, ld_in, dz_.data(), n_out, &grads_[s.w],
             n_out);
      ColumnSum(dz_.data(), m, n_out, &grads_[s.b]);
      if (absl::Status st = grads_ready(l); !st.ok()) return st;
      if (l == 0) break;
      // da = dz · Wᵀ, then through the ReLU of layer l-1.
      GemmNT(m, n_in, n_out, dz_.data(), n_out, &params_[s.w], n_out,
             da_.data(), n_in);
      ReluBackward(da_.data(), acts_[l - 1].data(), int64_t{m} * n_in);
      std::swap(dz_, da_);
    }
    return absl::OkStatus();
  }

  absl::StatusOr<void*> StreamAfterGrads() override { return nullptr; }

  absl::Status Update(float lr, float momentum) override {
    SgdMomentum(params_.data(), grads_.data(), velocity_.data(),
                layout_.params(), lr, momentum);
    return absl::OkStatus();
  }

  absl::StatusOr<float> Loss() override { return grads_[layout_.loss_index()]; }

  absl::Status CopyParamsToHost(absl::Span<float> out) override {
    std::copy(params_.begin(), params_.end(), out.begin());
    return absl::OkStatus();
  }

 private:
  const ModelSpec spec_;
  const ParamLayout layout_;
  const Shard shard_;
  const DataView data_;
  std::vector<float> params_, grads_, velocity_;
  // acts_[l]: layer l's output (after its ReLU), batch × out(l).
  std::vector<std::vector<float>> acts_;
  // The gradient flowing down (w.r.t. the current layer's pre-activation)
  // and scratch for the next one.
  std::vector<float> dz_, da_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> MakeCpuBackend(
    const ModelSpec& spec, const Shard& shard, DataView data,
    absl::Span<const float> initial_params) {
  if (initial_params.size() !=
      static_cast<size_t>(ParamLayout(spec).params())) {
    return absl::InvalidArgumentError("initial parameters of the wrong size");
  }
  return std::make_unique<CpuBackend>(spec, shard, data, initial_params);
}

}  // namespace shoal::dp
