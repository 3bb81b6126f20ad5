#include "collectives/reduce_op.h"

#include "absl/strings/str_cat.h"

namespace shoal::collectives {

absl::string_view ReduceOpName(ReduceOp op) {
  static constexpr absl::string_view kNames[kNumReduceOps] = {
      "sum", "prod", "min", "max", "avg"};
  const int i = static_cast<int>(op);
  return i >= 0 && i < kNumReduceOps ? kNames[i] : "invalid";
}

absl::StatusOr<ReduceOp> ParseReduceOp(absl::string_view name) {
  for (int i = 0; i < kNumReduceOps; ++i) {
    if (ReduceOpName(static_cast<ReduceOp>(i)) == name)
      return static_cast<ReduceOp>(i);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown reduction '", name, "' (expected sum, prod, min, max or avg)"));
}

}  // namespace shoal::collectives
