#include "examples/data_parallel/model.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace shoal::dp {

absl::Status ModelSpec::Validate() const {
  if (layers < 2 || layers > 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("--layers must be 2 or 3, not ", layers));
  }
  // Sizes stay modest so that every product of two of them fits an int.
  for (auto [name, v] : {std::pair<const char*, int>{"d_in", d_in},
                         {"hidden", hidden},
                         {"d_out", d_out},
                         {"teacher_hidden", teacher_hidden}}) {
    if (v < 1 || v > 65536) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " must be in 1..65536, not ", v));
    }
  }
  return absl::OkStatus();
}

int ModelSpec::in(int l) const { return l == 0 ? d_in : hidden; }
int ModelSpec::out(int l) const { return l == layers - 1 ? d_out : hidden; }

std::string ModelSpec::ToString() const {
  std::string s = absl::StrCat(d_in);
  for (int l = 0; l < layers; ++l) absl::StrAppend(&s, "-", out(l));
  return s;
}

ParamLayout::ParamLayout(const ModelSpec& spec) : layers_(spec.layers) {
  int64_t at = 0;
  for (int l = spec.layers - 1; l >= 0; --l) {
    LayerSlice& s = layers_[l];
    s.w = at;
    at += int64_t{spec.in(l)} * spec.out(l);
    s.b = at;
    at += spec.out(l);
    s.end = at;
  }
  params_ = at;
}

uint64_t Rng::Next() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

float Rng::Symmetric() {
  return static_cast<float>(static_cast<int64_t>(Next() >> 40) - (1 << 23)) *
         (1.0f / (1 << 23));
}

std::vector<float> InitialParams(const ModelSpec& spec, uint64_t seed) {
  ParamLayout layout(spec);
  std::vector<float> p(layout.params(), 0.0f);
  Rng rng(seed);
  for (int l = 0; l < spec.layers; ++l) {
    const bool output = l == spec.layers - 1;
    const float bound = std::sqrt((output ? 3.0f : 6.0f) / spec.in(l));
    const int64_t n = int64_t{spec.in(l)} * spec.out(l);
    float* w = p.data() + layout.layer(l).w;
    for (int64_t i = 0; i < n; ++i) w[i] = bound * rng.Symmetric();
  }
  return p;
}

void GenerateDataset(const ModelSpec& spec, int64_t n, uint64_t seed,
                     absl::Span<float> rows) {
  const int d_in = spec.d_in, d_out = spec.d_out, th = spec.teacher_hidden;
  const int64_t ld = d_in + d_out;
  // The teacher's weights, laid out so that the inner loops run along
  // contiguous rows (axpy form, which the compiler vectorises).
  Rng teacher(seed ^ 0x7eac4e7ull);
  std::vector<float> u(int64_t{d_in} * th), c(th), v(int64_t{th} * d_out);
  const float u_scale = 3.0f / std::sqrt(static_cast<float>(d_in));
  for (float& x : u) x = u_scale * teacher.Symmetric();
  for (float& x : c) x = 0.5f * teacher.Symmetric();
  // tanh of a roughly unit-variance input has variance ~0.39.
  const float v_scale = std::sqrt(3.0f / (0.39f * th));
  for (float& x : v) x = v_scale * teacher.Symmetric();

  Rng inputs(seed);
  std::vector<float> h(th);
  for (int64_t r = 0; r < n; ++r) {
    float* x = rows.data() + r * ld;
    float* y = x + d_in;
    for (int i = 0; i < d_in; ++i) x[i] = inputs.Symmetric();
    std::memcpy(h.data(), c.data(), th * sizeof(float));
    for (int i = 0; i < d_in; ++i) {
      const float xi = x[i];
      const float* ui = u.data() + int64_t{i} * th;
      for (int j = 0; j < th; ++j) h[j] += xi * ui[j];
    }
    for (int j = 0; j < th; ++j) h[j] = std::tanh(h[j]);
    std::memset(y, 0, d_out * sizeof(float));
    for (int j = 0; j < th; ++j) {
      const float hj = h[j];
      const float* vj = v.data() + int64_t{j} * d_out;
      for (int k = 0; k < d_out; ++k) y[k] += hj * vj[k];
    }
  }
}

uint64_t HashFloats(const float* data, int64_t n) {
  // Four independent lanes of multiply-xorshift over 64-bit words (fast
  // enough to run every few steps on megabytes), folded at the end.
  const auto* bytes = reinterpret_cast<const unsigned char*>(data);
  const int64_t nbytes = n * static_cast<int64_t>(sizeof(float));
  uint64_t lane[4] = {0x243f6a8885a308d3ull, 0x13198a2e03707344ull,
                      0xa4093822299f31d0ull, 0x082efa98ec4e6c89ull};
  int64_t i = 0;
  for (; i + 32 <= nbytes; i += 32) {
    for (int k = 0; k < 4; ++k) {
      uint64_t w;
      std::memcpy(&w, bytes + i + 8 * k, 8);
      lane[k] = (lane[k] ^ w) * 0x9fb21c651e98df25ull;
      lane[k] ^= lane[k] >> 29;
    }
  }
  uint64_t h = static_cast<uint64_t>(nbytes);
  for (int k = 0; k < 4; ++k) h = (h ^ lane[k]) * 0xff51afd7ed558ccdull;
  for (; i < nbytes; ++i) h = (h ^ bytes[i]) * 0x100000001b3ull;
  return h ^ (h >> 33);
}

}  // namespace shoal::dp
