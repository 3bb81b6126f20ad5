// The collectives tests' data and reference results, shared by the
// in-process tests (collectives/shm/shm_test_support.h) and the process probe
// under `shoal launch` (tests/collectives/coll_probe.cc), so both check the
// kernels against one definition of what a reduction must give.
#ifndef SHOAL_COLLECTIVES_REFERENCE_DATA_H_
#define SHOAL_COLLECTIVES_REFERENCE_DATA_H_

#include <cstdint>
#include <vector>

#include "collectives/reduce_op.h"
#include "ipc/tensor_meta.h"

namespace shoal::collectives::testing {

// Element i of `rank`'s input: small integers (for kProd: -1, 1 or 2), so
// that sums and products over four ranks are exact in every reducible dtype.
double Value(int rank, int64_t i, ReduceOp op);
// The reduction over `world` ranks of Value(r, i, op), as `dtype` holds it
// (the kernels' rounding and integer division included).
double Expected(DType dtype, ReduceOp op, int world, int64_t i);

void StoreElement(DType dtype, void* base, int64_t i, double v);
double LoadElement(DType dtype, const void* base, int64_t i);

// `count` elements Value(rank, i + shift, op), i = 0.., followed by `spare`
// guard bytes of 0xee.
std::vector<uint8_t> Fill(DType dtype, int rank, int64_t count, ReduceOp op,
                          int64_t shift = 0, int64_t spare = 8);
// `bytes` bytes that differ per rank, per block and per position.
std::vector<uint8_t> Pattern(int rank, int block, int64_t bytes);

}  // namespace shoal::collectives::testing

#endif  // SHOAL_COLLECTIVES_REFERENCE_DATA_H_
