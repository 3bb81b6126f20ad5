// The model of the data-parallel example: an MLP (ReLU between layers, a
// linear output) trained with MSE against a fixed random "teacher" network,
// on a synthetic data set generated deterministically from a seed.
//
// Everything a rank needs to agree on with the others lives here: the layer
// sizes, where each parameter sits in the flat parameter and gradient
// buffers, the initial parameters and the data set. All of it is a pure
// function of the spec and the seeds, so every rank (and a 1-rank run)
// computes the same bytes.
#ifndef SHOAL_EXAMPLES_DATA_PARALLEL_MODEL_H_
#define SHOAL_EXAMPLES_DATA_PARALLEL_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace shoal::dp {

struct ModelSpec {
  // Input features. Default 128.
  int d_in = 128;
  // Width of every hidden layer. Default 1024.
  int hidden = 1024;
  // Linear layers (2 or 3: one or two hidden layers). Default 3.
  int layers = 3;
  // Outputs (regression targets). Default 32.
  int d_out = 32;
  // Hidden width of the teacher network that makes the targets. Default 64.
  int teacher_hidden = 64;

  // Checks the sizes. Errors: InvalidArgument.
  absl::Status Validate() const;
  // Input and output width of layer l.
  int in(int l) const;
  int out(int l) const;
  std::string ToString() const;  // "128-1024-1024-32"
};

// Where layer l's weight W (in × out, row-major) and bias b (out) sit in the
// flat buffers. The layout is last layer first, so the gradients backward
// produces first form a growing prefix: a bucket of the all-reduce can start
// as soon as the prefix covers it.
struct LayerSlice {
  int64_t w = 0;    // element offset of W
  int64_t b = 0;    // element offset of b
  int64_t end = 0;  // one past b: the prefix complete once layer l is done
};

class ParamLayout {
 public:
  explicit ParamLayout(const ModelSpec& spec);
  const LayerSlice& layer(int l) const { return layers_[l]; }
  // Parameters (elements).
  int64_t params() const { return params_; }
  // The gradient buffer holds the parameters' gradients and, after them, one
  // float with this rank's mean loss: reducing it with the last bucket gives
  // every rank the global loss without a separate collective.
  int64_t loss_index() const { return params_; }
  int64_t grad_elems() const { return params_ + 1; }

 private:
  std::vector<LayerSlice> layers_;
  int64_t params_ = 0;
};

// splitmix64: small, fast, and the same everywhere.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next();
  // Uniform in [-1, 1), 24 random bits.
  float Symmetric();

 private:
  uint64_t state_;
};

// The student's initial parameters: W uniform in ±sqrt(6 / in) (He, for
// ReLU), ±sqrt(3 / in) for the linear output layer, biases zero.
std::vector<float> InitialParams(const ModelSpec& spec, uint64_t seed);

// Fills `rows` (n rows of d_in + d_out floats: x then y) with the data set:
// x uniform in [-1, 1), y = teacher(x) = V · tanh(U · x + c), whose weights
// come from `seed` and are scaled so that y has about unit variance.
// REQUIRES: rows.size() == n * (d_in + d_out).
void GenerateDataset(const ModelSpec& spec, int64_t n, uint64_t seed,
                     absl::Span<float> rows);

// A 64-bit hash of `n` floats' bytes, for checking that ranks hold
// bit-identical parameters.
uint64_t HashFloats(const float* data, int64_t n);

}  // namespace shoal::dp

#endif  // SHOAL_EXAMPLES_DATA_PARALLEL_MODEL_H_
