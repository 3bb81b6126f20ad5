// The GPU path's matrix products as cuBLAS calls. cuBLAS is column-major and
// our matrices are row-major; a row-major r × c matrix is the column-major
// c × r matrix with the same bytes, so each product is issued as its
// transpose (Zᵀ = Wᵀ · Inᵀ, ...). Kept apart from the CUDA code so that a test
// can check the mapping against the CPU path on a machine without a GPU.
#ifndef SHOAL_EXAMPLES_DATA_PARALLEL_GEMM_MAPPING_H_
#define SHOAL_EXAMPLES_DATA_PARALLEL_GEMM_MAPPING_H_

namespace shoal::dp {

// The arguments of cublasSgemm(handle, transa, transb, m, n, k, &1, a, lda,
// b, ldb, &0, c, ldc): C (m × n, column-major) = op(A) · op(B).
struct ColMajorGemm {
  bool trans_a = false, trans_b = false;
  int m = 0, n = 0, k = 0;
  const float* a = nullptr;
  int lda = 0;
  const float* b = nullptr;
  int ldb = 0;
  float* c = nullptr;
  int ldc = 0;
};

// z (batch × out) = x (batch × in, row stride ld_x) · w (in × out).
ColMajorGemm ForwardProduct(int batch, int in, int out, const float* x,
                            int ld_x, const float* w, float* z);

// dw (in × out) = xᵀ · dz, with dz batch × out.
ColMajorGemm WeightGradProduct(int batch, int in, int out, const float* x,
                               int ld_x, const float* dz, float* dw);

// dx (batch × in) = dz · wᵀ.
ColMajorGemm InputGradProduct(int batch, int in, int out, const float* dz,
                              const float* w, float* dx);

}  // namespace shoal::dp

#endif  // SHOAL_EXAMPLES_DATA_PARALLEL_GEMM_MAPPING_H_
