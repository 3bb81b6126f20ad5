// Reduction operators of the collectives (all_reduce, reduce, reduce_scatter).
#ifndef SHOAL_COLLECTIVES_REDUCE_OP_H_
#define SHOAL_COLLECTIVES_REDUCE_OP_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shoal::collectives {

enum class ReduceOp : uint8_t {
  kSum = 0,
  kProd = 1,
  kMin = 2,
  kMax = 3,
  kAvg =
      4,  // the sum divided by the number of ranks (integer division for ints)
};
inline constexpr int kNumReduceOps = 5;

// "sum", "prod", "min", "max", "avg".
absl::string_view ReduceOpName(ReduceOp op);
// Parses ReduceOpName's spelling. Errors: InvalidArgument.
absl::StatusOr<ReduceOp> ParseReduceOp(absl::string_view name);

}  // namespace shoal::collectives

#endif  // SHOAL_COLLECTIVES_REDUCE_OP_H_
