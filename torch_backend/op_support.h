// The process group's shared steps: errors thrown at torch's boundary, the
// mapping of torch's ReduceOp onto shoal's, flattening tensor lists.
// Internal to torch_backend (process_group*.cc).
#ifndef SHOAL_TORCH_BACKEND_OP_SUPPORT_H_
#define SHOAL_TORCH_BACKEND_OP_SUPPORT_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <vector>

#include "absl/status/status.h"
#include "collectives/reduce_op.h"
#include "ipc/tensor_meta.h"

namespace shoal::torch_backend {

using RedOpType = ::c10d::ReduceOp::RedOpType;

// std::runtime_error("shoal <what>: <message>") — torch's convention for an
// op's failure (Python sees a RuntimeError).
[[noreturn]] void Throw(const std::string& what, const absl::Status& s);
void ThrowIfError(const std::string& what, const absl::Status& s);
[[noreturn]] void Refuse(const std::string& what, const std::string& why);

// "SUM", "BAND", ...
const char* RedOpName(RedOpType op);
bool IsBitwise(RedOpType op);

// The shoal reduction for SUM, PRODUCT, MIN, MAX, AVG and PREMUL_SUM (a SUM
// of scaled inputs: see Scaled). Throws for the others, naming `what`.
collectives::ReduceOp ShoalReduceOp(const ::c10d::ReduceOp& op,
                                    const std::string& what);
// The dtype of a reduction; throws unless shoal's kernels reduce it.
DType ReducibleDType(const at::Tensor& t, const std::string& what);
// For PREMUL_SUM: a new tensor, `t` times the op's factor (throws if the op
// carries none). Otherwise `t`.
at::Tensor Scaled(const at::Tensor& t, const ::c10d::ReduceOp& op,
                  const std::string& what);
// Throws unless 0 <= r < size.
void CheckRank(int64_t r, int size, const std::string& what);
// Copies consecutive blocks of `flat` into `outs` (each its own size).
void Unflatten(const at::Tensor& flat, std::vector<at::Tensor>& outs);
// The tensors, flattened into one new contiguous tensor.
at::Tensor Flatten(const std::vector<at::Tensor>& ts);

}  // namespace shoal::torch_backend

#endif  // SHOAL_TORCH_BACKEND_OP_SUPPORT_H_
