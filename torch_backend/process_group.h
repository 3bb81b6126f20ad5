// ProcessGroupShoal: torch.distributed's "shoal" backend — a c10d process
// group over shoal::collectives::Communicator (shared memory for CPU
// tensors, NCCL for CUDA tensors), bootstrapped through the c10d::Store
// torch hands it (C10dRendezvous), so it runs under `shoal launch`,
// torchrun, or any init_method.
//
// Every collective is issued asynchronously and returns a ShoalWork
// (work.h). Ops: allreduce (SUM, PRODUCT, MIN, MAX, AVG on shoal's
// kernels; BAND/BOR/BXOR as an all_gather and an element-wise tail;
// PREMUL_SUM as a scale and a SUM), allreduce_coalesced, broadcast, reduce,
// allgather, _allgather_base, gather, scatter, reduce_scatter,
// _reduce_scatter_base, alltoall_base (even splits), alltoall (equal
// sizes), send, recv, barrier. Non-contiguous tensors are staged. Anything
// else raises RuntimeError naming the op (the base class does for the ops
// not overridden). Failures — a dead or stalled rank, a mismatch — raise
// RuntimeError within the group's timeout; the group is unusable after.
#ifndef SHOAL_TORCH_BACKEND_PROCESS_GROUP_H_
#define SHOAL_TORCH_BACKEND_PROCESS_GROUP_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collectives/communicator.h"
#include "torch_backend/torch_compat.h"
#include "torch_backend/work.h"

namespace shoal::torch_backend {

class ProcessGroupShoal : public TorchBackendBase {
 public:
  // Collective over the group's `size` ranks, which meet in `store` (the
  // group's PrefixStore). `group_name` names the communicator (letters,
  // digits, '-', '_'; others become '_'). `timeout` bounds every op.
  // Errors: FailedPrecondition (the ranks are on several machines),
  // DeadlineExceeded (a rank did not come within `timeout`),
  // InvalidArgument, the store's errors.
  static absl::StatusOr<c10::intrusive_ptr<ProcessGroupShoal>> Create(
      c10::intrusive_ptr<::c10d::Store> store, int rank, int size,
      std::chrono::milliseconds timeout, const std::string& group_name);

  // Use Create. Public for c10::make_intrusive.
  ProcessGroupShoal(int rank, int size,
                    std::unique_ptr<collectives::Communicator> comm,
                    std::string name);
  ~ProcessGroupShoal() override;

  const std::string getBackendName() const override { return "shoal"; }

  using Tensors = std::vector<at::Tensor>;
  using WorkPtr = c10::intrusive_ptr<::c10d::Work>;

  WorkPtr broadcast(Tensors& tensors,
                    const ::c10d::BroadcastOptions& opts) override;
  WorkPtr allreduce(Tensors& tensors,
                    const ::c10d::AllreduceOptions& opts) override;
  WorkPtr allreduce_coalesced(
      Tensors& tensors, const ::c10d::AllreduceCoalescedOptions& opts) override;
  WorkPtr reduce(Tensors& tensors, const ::c10d::ReduceOptions& opts) override;
  WorkPtr allgather(std::vector<Tensors>& outputs, Tensors& inputs,
                    const ::c10d::AllgatherOptions& opts) override;
  WorkPtr _allgather_base(at::Tensor& output, at::Tensor& input,
                          const ::c10d::AllgatherOptions& opts) override;
  WorkPtr gather(std::vector<Tensors>& outputs, Tensors& inputs,
                 const ::c10d::GatherOptions& opts) override;
  WorkPtr scatter(Tensors& outputs, std::vector<Tensors>& inputs,
                  const ::c10d::ScatterOptions& opts) override;
  WorkPtr reduce_scatter(Tensors& outputs, std::vector<Tensors>& inputs,
                         const ::c10d::ReduceScatterOptions& opts) override;
  WorkPtr _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input,
      const ::c10d::ReduceScatterOptions& opts) override;
  WorkPtr alltoall_base(at::Tensor& output, at::Tensor& input,
                        std::vector<int64_t>& output_split_sizes,
                        std::vector<int64_t>& input_split_sizes,
                        const ::c10d::AllToAllOptions& opts) override;
  WorkPtr alltoall(Tensors& outputs, Tensors& inputs,
                   const ::c10d::AllToAllOptions& opts) override;
  WorkPtr send(Tensors& tensors, int dst_rank, int tag) override;
  WorkPtr recv(Tensors& tensors, int src_rank, int tag) override;
  WorkPtr barrier(const ::c10d::BarrierOptions& opts) override;

 private:
  // How one collective is issued and finished.
  struct Launch {
    std::string what;  // the op's name, in errors
    ::c10d::OpType type = ::c10d::OpType::UNKNOWN;
    std::chrono::milliseconds timeout = ::c10d::kUnsetTimeout;
    Tensors inputs;   // read by the op (synchronised first on CUDA)
    Tensors outputs;  // torch's result() and the Future's value
    std::function<void()> finish;  // after success (may be empty)
    Tensors keep_alive;            // staging the op uses until it finished
    std::function<absl::StatusOr<collectives::Work>(
        const collectives::CallOptions&)>
        issue;
  };
  // Issues `l` (throws std::runtime_error if shoal refuses it at once).
  WorkPtr Run(Launch l);
  // An all_reduce (`root` < 0) or reduce of `t` in place with any torch
  // ReduceOp, ready to Run. Throws for a dtype or op it cannot do.
  Launch ReduceLaunch(at::Tensor& t, const ::c10d::ReduceOp& op, int root,
                      std::chrono::milliseconds timeout,
                      const std::string& what, ::c10d::OpType type);
  // All ranks' `input` into `gathered` (size() × its elements).
  Launch AllGatherLaunch(const at::Tensor& input, at::Tensor gathered,
                         const std::string& what, ::c10d::OpType type,
                         std::chrono::milliseconds timeout);
  // `in` (size() × out's elements) reduced block-wise into `out`.
  Launch ReduceScatterLaunch(at::Tensor in, at::Tensor out,
                             const ::c10d::ReduceOp& op,
                             const std::string& what, ::c10d::OpType type,
                             std::chrono::milliseconds timeout);
  // BAND/BOR/BXOR: every rank's tensor gathered, then combined element-wise.
  Launch BitwiseLaunch(at::Tensor& t, const ::c10d::ReduceOp& op, int root,
                       std::chrono::milliseconds timeout,
                       const std::string& what, ::c10d::OpType type);

  std::string name_;
  std::unique_ptr<collectives::Communicator> comm_;
  // Destroyed first (declared last): it completes queued works, which use
  // comm_.
  std::shared_ptr<Completer> completer_;
};

}  // namespace shoal::torch_backend

#endif  // SHOAL_TORCH_BACKEND_PROCESS_GROUP_H_
