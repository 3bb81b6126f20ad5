#include "examples/data_parallel/gemm_mapping.h"

namespace shoal::dp {

// In column-major terms: x is X (in × batch, ld ld_x), w is W (out × in, ld
// out), z is Z (out × batch, ld out); row-major z = x · w is Z = W · X.
ColMajorGemm ForwardProduct(int batch, int in, int out, const float* x,
                            int ld_x, const float* w, float* z) {
  return {false, false, out, batch, in, w, out, x, ld_x, z, out};
}

// dw row-major (in × out) is DW (out × in) = DZ (out × batch) · Xᵀ.
ColMajorGemm WeightGradProduct(int batch, int in, int out, const float* x,
                               int ld_x, const float* dz, float* dw) {
  return {false, true, out, in, batch, dz, out, x, ld_x, dw, out};
}

// dx row-major (batch × in) is DX (in × batch) = Wᵀ (in × out) · DZ.
ColMajorGemm InputGradProduct(int batch, int in, int out, const float* dz,
                              const float* w, float* dx) {
  return {true, false, in, batch, out, w, out, dz, out, dx, in};
}

}  // namespace shoal::dp
