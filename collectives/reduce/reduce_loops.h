// Internal to the reduce_kernels library: the multiversioned loops, entered
// once ReduceN and DivideInPlace (reduce_kernels.cc) have checked the
// arguments. Not part of the public API.
#ifndef SHOAL_COLLECTIVES_REDUCE_REDUCE_LOOPS_H_
#define SHOAL_COLLECTIVES_REDUCE_REDUCE_LOOPS_H_

#include <cstdint>

#include "collectives/reduce/reduce_kernels.h"
#include "collectives/reduce_op.h"
#include "ipc/tensor_meta.h"

namespace shoal::collectives {
namespace reduce_internal {

// ReduceN's work for arguments it has checked: kAvg sums, and the result is
// divided by `divisor` unless it is 1. False, with nothing done, for a dtype
// that is not reducible.
bool ReduceChecked(DType dtype, ReduceOp op, const void* const* in, int n,
                   void* out, int64_t count, int divisor);

// DivideInPlace's work for arguments it has checked. False, with nothing done,
// for a dtype that is not reducible.
bool DivideChecked(DType dtype, void* data, int64_t count, int divisor);

}  // namespace reduce_internal
}  // namespace shoal::collectives

#endif  // SHOAL_COLLECTIVES_REDUCE_REDUCE_LOOPS_H_
