// How torch tensors become shoal buffers: dtypes, the checks every op makes,
// and contiguous staging (shoal's collectives take flat buffers; a
// non-contiguous tensor is copied in before and out after).
#ifndef SHOAL_TORCH_BACKEND_TENSORS_H_
#define SHOAL_TORCH_BACKEND_TENSORS_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ipc/tensor_meta.h"

namespace shoal::torch_backend {

// The shoal dtype of a torch dtype. Errors: InvalidArgument naming it (shoal
// has no complex, unsigned wider than 8 bits, or quantized types).
absl::StatusOr<DType> ShoalDType(at::ScalarType type);

// Whether shoal's reductions take `type` (f16, bf16, f32, f64, i32, i64).
bool Reducible(DType type);

// What a data-moving op (broadcast, gathers, send, ...) passes to shoal:
// the tensor's own dtype when shoal has it, else its bytes.
struct Payload {
  DType dtype;
  int64_t count;  // elements of `dtype`
};
Payload MovePayload(const at::Tensor& t);

// A dense tensor in CPU memory or on a CUDA device.
// Errors: InvalidArgument naming `op` (sparse, another device, undefined).
absl::Status CheckTensor(const at::Tensor& t, absl::string_view op);
// CheckTensor on each, and they share a dtype and a device.
absl::Status CheckTensors(const std::vector<at::Tensor>& ts,
                          absl::string_view op);
// Exactly one tensor (torch's multi-tensor-per-process form is not
// supported). Errors: InvalidArgument.
absl::Status CheckSingle(const std::vector<at::Tensor>& ts,
                         absl::string_view op);

// `t` itself when contiguous, else a contiguous copy: what a collective
// reads from and, for in-place ops, writes into (see CopyBackIfStaged).
at::Tensor Contiguous(const at::Tensor& t);
// After an in-place op on Contiguous(t): copies the result back when it was
// a copy (a no-op otherwise).
void CopyBackIfStaged(at::Tensor& t, const at::Tensor& staged);

// Makes CUDA tensors' producers finish before shoal reads them (shoal's
// NCCL calls run on their own stream): synchronises the device when any
// tensor is on CUDA. A no-op for CPU tensors.
void SyncIfCuda(const std::vector<at::Tensor>& ts);

}  // namespace shoal::torch_backend

#endif  // SHOAL_TORCH_BACKEND_TENSORS_H_
