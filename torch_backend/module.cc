// shoal._shoal_torch: the "shoal" torch.distributed backend's extension
// module. python/shoal/torch.py registers create_process_group with
// torch.distributed.Backend.register_backend.
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/utils/pybind.h>

#include <chrono>
#include <stdexcept>
#include <string>

#include "absl/status/statusor.h"
#include "torch_backend/process_group.h"

namespace py = pybind11;

namespace shoal::torch_backend {
namespace {

c10::intrusive_ptr<ProcessGroupShoal> CreateProcessGroup(
    const c10::intrusive_ptr<::c10d::Store>& store, int rank, int size,
    std::chrono::milliseconds timeout, const std::string& group_name) {
  absl::StatusOr<c10::intrusive_ptr<ProcessGroupShoal>> pg;
  {
    // The rendezvous waits for the other ranks.
    py::gil_scoped_release release;
    pg = ProcessGroupShoal::Create(store, rank, size, timeout, group_name);
  }
  if (!pg.ok()) {
    throw std::runtime_error("shoal: creating the process group: " +
                             pg.status().ToString());
  }
  return *std::move(pg);
}

}  // namespace
}  // namespace shoal::torch_backend

PYBIND11_MODULE(_shoal_torch, m) {
  using shoal::torch_backend::ProcessGroupShoal;
  using shoal::torch_backend::TorchBackendBase;
  m.doc() = "shoal's torch.distributed backend (use `import shoal.torch`).";
  // c10d's ProcessGroup and Store are bound by torch.distributed.
  py::module::import("torch.distributed");
  py::class_<ProcessGroupShoal, TorchBackendBase,
             c10::intrusive_ptr<ProcessGroupShoal>>(m, "ProcessGroupShoal");
  m.def("create_process_group", &shoal::torch_backend::CreateProcessGroup,
        py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
        py::arg("group_name"),
        "A shoal process group over the group's store (collective: every "
        "rank of the group calls it).");
}
