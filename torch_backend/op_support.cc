#include "torch_backend/op_support.h"

#include <optional>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "torch_backend/tensors.h"
#include "torch_backend/torch_compat.h"
#include "torch_backend/work.h"

namespace shoal::torch_backend {

[[noreturn]] void Throw(const std::string& what, const absl::Status& s) {
  if (absl::IsDeadlineExceeded(s)) {
    throw std::runtime_error(
        ErrorMessage(what, s, std::chrono::milliseconds(0)));
  }
  throw std::runtime_error(absl::StrCat("shoal ", what, ": ", s.message()));
}
void ThrowIfError(const std::string& what, const absl::Status& s) {
  if (!s.ok()) Throw(what, s);
}
[[noreturn]] void Refuse(const std::string& what, const std::string& why) {
  throw std::runtime_error(absl::StrCat("shoal ", what, ": ", why));
}

const char* RedOpName(RedOpType op) {
  switch (op) {
    case RedOpType::SUM:
      return "SUM";
    case RedOpType::AVG:
      return "AVG";
    case RedOpType::PRODUCT:
      return "PRODUCT";
    case RedOpType::MIN:
      return "MIN";
    case RedOpType::MAX:
      return "MAX";
    case RedOpType::BAND:
      return "BAND";
    case RedOpType::BOR:
      return "BOR";
    case RedOpType::BXOR:
      return "BXOR";
    case RedOpType::PREMUL_SUM:
      return "PREMUL_SUM";
    default:
      return "an unknown ReduceOp";
  }
}

bool IsBitwise(RedOpType op) {
  return op == RedOpType::BAND || op == RedOpType::BOR || op == RedOpType::BXOR;
}

// The shoal reduction for SUM, PRODUCT, MIN, MAX, AVG and PREMUL_SUM (a
// SUM of scaled inputs: see Scaled). Throws for the others.
collectives::ReduceOp ShoalReduceOp(const ::c10d::ReduceOp& op,
                                    const std::string& what) {
  switch (static_cast<RedOpType>(op)) {
    case RedOpType::SUM:
    case RedOpType::PREMUL_SUM:
      return collectives::ReduceOp::kSum;
    case RedOpType::AVG:
      return collectives::ReduceOp::kAvg;
    case RedOpType::PRODUCT:
      return collectives::ReduceOp::kProd;
    case RedOpType::MIN:
      return collectives::ReduceOp::kMin;
    case RedOpType::MAX:
      return collectives::ReduceOp::kMax;
    default:
      Refuse(what, absl::StrCat("ReduceOp ", RedOpName(op),
                                " is not supported by this op"));
  }
}

// The dtype of a reduction; throws unless shoal's kernels reduce it.
DType ReducibleDType(const at::Tensor& t, const std::string& what) {
  absl::StatusOr<DType> dtype = ShoalDType(t.scalar_type());
  if (!dtype.ok() || !Reducible(*dtype)) {
    Refuse(what, absl::StrCat("dtype ", c10::toString(t.scalar_type()),
                              " cannot be reduced by shoal (float16, "
                              "bfloat16, float32, float64, int32, int64)"));
  }
  return *dtype;
}

// For PREMUL_SUM: a new tensor, `t` times the op's factor. Otherwise `t`.
at::Tensor Scaled(const at::Tensor& t, const ::c10d::ReduceOp& op,
                  const std::string& what) {
  if (static_cast<RedOpType>(op) != RedOpType::PREMUL_SUM) return t;
  std::optional<PreMulFactor> f = PreMulSumFactor(op);
  if (!f.has_value()) {
    Refuse(what,
           "PREMUL_SUM without its factor (make it with "
           "torch.distributed._make_nccl_premul_sum)");
  }
  if (f->is_tensor) return (t * f->tensor.to(t.device())).contiguous();
  return (t * f->value).contiguous();
}

// Communicator ranks are the group's ranks; checks a peer or root.
void CheckRank(int64_t r, int size, const std::string& what) {
  if (r < 0 || r >= size) {
    Refuse(what, absl::StrCat("rank ", r, " is not in a group of ", size));
  }
}

// Copies block i of `flat` (n elements each) into outs[i].
void Unflatten(const at::Tensor& flat, std::vector<at::Tensor>& outs) {
  int64_t at = 0;
  for (at::Tensor& o : outs) {
    o.copy_(flat.narrow(0, at, o.numel()).view(o.sizes()));
    at += o.numel();
  }
}

// The tensors, flattened into one new contiguous tensor.
at::Tensor Flatten(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> flat;
  flat.reserve(ts.size());
  for (const at::Tensor& t : ts) flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}

}  // namespace shoal::torch_backend
