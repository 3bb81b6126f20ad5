// The differences between torch 1.13 (Debian's, what this machine has) and
// torch 2.x that the backend meets, in one place.
//
// - 1.13: collectives are virtual methods of c10d::ProcessGroup, and
//   register_backend's function returns a ProcessGroup.
// - 2.x: they moved to c10d::Backend (ProcessGroup dispatches to a Backend
//   per device); register_backend's function returns a Backend.
// - 2.x only: allgather_into_tensor_coalesced,
//   reduce_scatter_tensor_coalesced, allreduce_sparse (1.13 hands sparse
//   tensors to allreduce) and a monitoredBarrier that torch.distributed
//   calls on any CPU backend (1.13's Python allows it for gloo alone):
//   SHOAL_TORCH2.
// - PREMUL_SUM's factor: ReduceOp's supplement_, a NCCLPreMulSumSupplement
//   with a list of tensor factors (1.13), a PreMulSumSupplement with one
//   (2.x).
// The Python side's one difference (register_backend's devices) is in
// python/shoal/torch.py.
#ifndef SHOAL_TORCH_BACKEND_TORCH_COMPAT_H_
#define SHOAL_TORCH_BACKEND_TORCH_COMPAT_H_

#include <torch/version.h>

#include <optional>
#include <torch/csrc/distributed/c10d/Types.hpp>

#if TORCH_VERSION_MAJOR >= 2
#define SHOAL_TORCH2 1
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

namespace shoal::torch_backend {

#if TORCH_VERSION_MAJOR >= 2
using TorchBackendBase = ::c10d::Backend;
#else
using TorchBackendBase = ::c10d::ProcessGroup;
#endif

// PREMUL_SUM's factor: a double, or a one-element tensor. nullopt when the
// op carries none (torch 1.13's two-argument ReduceOp constructor drops it).
struct PreMulFactor {
  double value = 1.0;
  bool is_tensor = false;
  at::Tensor tensor;
};
inline std::optional<PreMulFactor> PreMulSumFactor(const ::c10d::ReduceOp& op) {
#ifdef SHOAL_TORCH2
  auto* s = dynamic_cast<::c10d::PreMulSumSupplement*>(op.supplement_.get());
  if (s == nullptr) return std::nullopt;
  PreMulFactor f;
  if (s->tensor_factor.defined()) {
    f.is_tensor = true;
    f.tensor = s->tensor_factor;
  } else {
    f.value = s->double_factor;
  }
#else
  auto* s =
      dynamic_cast<::c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
  if (s == nullptr) return std::nullopt;
  PreMulFactor f;
  if (!s->tensor_factors.empty()) {
    f.is_tensor = true;
    f.tensor = s->tensor_factors.front();
  } else {
    f.value = s->double_factor;
  }
#endif
  return f;
}

}  // namespace shoal::torch_backend

#endif  // SHOAL_TORCH_BACKEND_TORCH_COMPAT_H_
