// Element-wise reduction kernels of the shared-memory collectives (all_reduce,
// reduce, reduce_scatter among the processes of one node): the inner loop that
// combines the ranks' buffers.
//
// Speed: the loops are written so that the compiler vectorises them, and the
// hot functions are compiled three times (AVX-512F, AVX2 and baseline x86-64)
// with GCC's target_clones; the dynamic loader picks the best one for the CPU
// the program runs on, so binaries stay portable. f16 is converted with the
// F16C / AVX-512F instructions where the CPU has them (multiversioned the
// same way). Each element of each input is read once and each element of
// `out` written once: f32/f64/i32/i64 combine up to four inputs per pass and
// fold further ones into an L1-resident block of `out`; f16/bf16 go through
// small f32 blocks on the stack.
//
// Semantics (the same on every CPU, whichever clone runs):
//  - Elements are combined strictly in input order,
//    (((in[0] op in[1]) op in[2]) ...), so float results are deterministic.
//  - Integers: sum, prod and avg's sum wrap around (two's complement); avg
//    divides the wrapped sum, truncating toward zero.
//  - Floats: min and max propagate NaN: if any input element is NaN the
//    result is NaN (which NaN, and so its payload, is unspecified). Otherwise
//    the result is the least (greatest) input; among inputs that compare equal
//    (-0 and +0) the one with the lowest index wins.
//  - f16 and bf16 are widened to f32, combined (and for avg divided) in f32,
//    and rounded to 16 bits once at the end, to nearest even. Intermediate
//    results are never rounded to 16 bits.
//  - The kernels assume the default floating-point environment (round to
//    nearest even; no flush-to-zero or denormals-are-zero).
#ifndef SHOAL_COLLECTIVES_REDUCE_REDUCE_KERNELS_H_
#define SHOAL_COLLECTIVES_REDUCE_REDUCE_KERNELS_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "collectives/reduce_op.h"
#include "ipc/tensor_meta.h"

namespace shoal::collectives {

// The most inputs one ReduceN call combines.
inline constexpr int kMaxReduceInputs = 64;

// Bytes per element of the reducible dtypes (f16, bf16, f32, f64, i32, i64);
// 0 for every other dtype.
size_t ReducibleSize(DType t);
// True for f16, bf16, f32, f64, i32 and i64.
bool IsReducible(DType t);

// out[i] = op(in[0][i], in[1][i], ..., in[n-1][i]) for 0 <= i < count, with
// 1 <= n <= kMaxReduceInputs. `out` may be in[0] (in place) but must not
// overlap any other input (out == in[k] for k > 0 is rejected; partial
// overlaps are the caller's bug). The pointers must be aligned for the dtype.
//
// For kAvg the sum is divided by `avg_divisor`, normally the number of ranks,
// which differs from n when a caller reduces in stages (ints: integer division
// truncating toward zero). For the other ops `avg_divisor` is ignored.
//
// Errors (InvalidArgument): a dtype that is not reducible, an unknown op,
// n < 1 or n > kMaxReduceInputs, count < 0, avg_divisor <= 0 for kAvg, a null
// pointer when count > 0, out == in[k] for some k > 0.
absl::Status ReduceN(DType dtype, ReduceOp op, const void* const* in, int n,
                     void* out, int64_t count, int avg_divisor);

// data[i] = data[i] / divisor for 0 <= i < count (a kAvg done as a kSum
// first): ints truncate toward zero; f16/bf16 divide in f32 and round once.
// Errors (InvalidArgument): a dtype that is not reducible, count < 0,
// divisor <= 0, data == nullptr when count > 0.
absl::Status DivideInPlace(DType dtype, void* data, int64_t count, int divisor);

// IEEE binary16 and bfloat16 <-> f32. Exact for every normal, subnormal, zero
// (with its sign) and infinity; NaN stays NaN with its sign, quieted, keeping
// the top payload bits (as the F16C instructions do). f32 -> f16/bf16 rounds
// to nearest, ties to even, overflowing to infinity.
float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);
float BF16ToFloat(uint16_t b);
uint16_t FloatToBF16(float f);

}  // namespace shoal::collectives

#endif  // SHOAL_COLLECTIVES_REDUCE_REDUCE_KERNELS_H_
