// The checks of ReduceN and DivideInPlace; the loops they run once the
// arguments are known good are in reduce_loops.cc.
#include "collectives/reduce/reduce_kernels.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "collectives/reduce/reduce_loops.h"

namespace shoal::collectives {
namespace {

absl::Status NotReducible(absl::string_view what, DType dtype) {
  return absl::InvalidArgumentError(
      absl::StrCat(what, ": dtype ", DTypeName(dtype),
                   " is not reducible (f16, bf16, f32, f64, i32 and i64 are)"));
}

}  // namespace

size_t ReducibleSize(DType t) {
  switch (t) {
    case DType::kF16:
    case DType::kBF16:
      return 2;
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kF64:
    case DType::kI64:
      return 8;
    default:
      return 0;
  }
}

bool IsReducible(DType t) { return ReducibleSize(t) != 0; }

absl::Status ReduceN(DType dtype, ReduceOp op, const void* const* in, int n,
                     void* out, int64_t count, int avg_divisor) {
  const size_t size = ReducibleSize(dtype);
  if (size == 0) return NotReducible("ReduceN", dtype);
  if (static_cast<int>(op) >= kNumReduceOps) {
    return absl::InvalidArgumentError(
        absl::StrCat("ReduceN: unknown reduction ", static_cast<int>(op)));
  }
  if (n < 1 || n > kMaxReduceInputs) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ReduceN: ", n, " inputs (1 to ", kMaxReduceInputs, " allowed)"));
  }
  if (count < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ReduceN: negative count ", count));
  }
  const bool avg = op == ReduceOp::kAvg;
  if (avg && avg_divisor <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ReduceN: avg divisor ", avg_divisor, " (must be > 0)"));
  }
  if (count == 0) return absl::OkStatus();
  if (in == nullptr || out == nullptr) {
    return absl::InvalidArgumentError("ReduceN: null buffer");
  }
  for (int k = 0; k < n; ++k) {
    if (in[k] == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("ReduceN: input ", k, " is null"));
    }
    if (k > 0 && in[k] == out) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ReduceN: out is input ", k, " (only input 0 may be reduced into)"));
    }
  }
  const int divisor = avg ? avg_divisor : 1;
  if (n == 1 && divisor == 1) {  // a copy: keep the bits (NaN payloads too)
    if (out != in[0])
      std::memcpy(out, in[0], static_cast<size_t>(count) * size);
    return absl::OkStatus();
  }
  if (!reduce_internal::ReduceChecked(dtype, op, in, n, out, count, divisor)) {
    return NotReducible("ReduceN", dtype);
  }
  return absl::OkStatus();
}

absl::Status DivideInPlace(DType dtype, void* data, int64_t count,
                           int divisor) {
  if (!IsReducible(dtype)) return NotReducible("DivideInPlace", dtype);
  if (count < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("DivideInPlace: negative count ", count));
  }
  if (divisor <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("DivideInPlace: divisor ", divisor, " (must be > 0)"));
  }
  if (count == 0 || divisor == 1) return absl::OkStatus();
  if (data == nullptr) {
    return absl::InvalidArgumentError("DivideInPlace: null buffer");
  }
  if (!reduce_internal::DivideChecked(dtype, data, count, divisor)) {
    return NotReducible("DivideInPlace", dtype);
  }
  return absl::OkStatus();
}

}  // namespace shoal::collectives
