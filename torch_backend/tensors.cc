#include "torch_backend/tensors.h"

#include <torch/cuda.h>

#include "absl/strings/str_cat.h"

namespace shoal::torch_backend {

absl::StatusOr<DType> ShoalDType(at::ScalarType type) {
  switch (type) {
    case at::kHalf:
      return DType::kF16;
    case at::kBFloat16:
      return DType::kBF16;
    case at::kFloat:
      return DType::kF32;
    case at::kDouble:
      return DType::kF64;
    case at::kChar:
      return DType::kI8;
    case at::kShort:
      return DType::kI16;
    case at::kInt:
      return DType::kI32;
    case at::kLong:
      return DType::kI64;
    case at::kByte:
      return DType::kU8;
    case at::kBool:
      return DType::kBool;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("dtype ", c10::toString(type), " has no shoal dtype"));
  }
}

bool Reducible(DType type) {
  switch (type) {
    case DType::kF16:
    case DType::kBF16:
    case DType::kF32:
    case DType::kF64:
    case DType::kI32:
    case DType::kI64:
      return true;
    default:
      return false;
  }
}

Payload MovePayload(const at::Tensor& t) {
  absl::StatusOr<DType> dtype = ShoalDType(t.scalar_type());
  if (dtype.ok()) return {*dtype, t.numel()};
  return {DType::kU8, t.numel() * static_cast<int64_t>(t.element_size())};
}

absl::Status CheckTensor(const at::Tensor& t, absl::string_view op) {
  if (!t.defined()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": undefined tensor"));
  }
  if (t.layout() != at::kStrided) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": only dense tensors (got layout ", c10::str(t.layout()), ")"));
  }
  if (!t.device().is_cpu() && !t.device().is_cuda()) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": tensors on the CPU or a CUDA device only (got ",
                     t.device().str(), ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckTensors(const std::vector<at::Tensor>& ts,
                          absl::string_view op) {
  for (const at::Tensor& t : ts) {
    if (absl::Status s = CheckTensor(t, op); !s.ok()) return s;
    if (t.scalar_type() != ts.front().scalar_type() ||
        t.device() != ts.front().device()) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": every tensor must have the same dtype and device (",
          c10::toString(ts.front().scalar_type()), " on ",
          ts.front().device().str(), " and ", c10::toString(t.scalar_type()),
          " on ", t.device().str(), ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckSingle(const std::vector<at::Tensor>& ts,
                         absl::string_view op) {
  if (ts.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": one tensor per process (got ", ts.size(), ")"));
  }
  return CheckTensor(ts.front(), op);
}

at::Tensor Contiguous(const at::Tensor& t) {
  return t.is_contiguous() ? t : t.contiguous();
}

void CopyBackIfStaged(at::Tensor& t, const at::Tensor& staged) {
  if (!staged.is_same(t)) t.copy_(staged);
}

void SyncIfCuda(const std::vector<at::Tensor>& ts) {
  for (const at::Tensor& t : ts) {
    if (t.defined() && t.device().is_cuda()) {
      torch::cuda::synchronize(t.device().index());
      return;
    }
  }
}

}  // namespace shoal::torch_backend
