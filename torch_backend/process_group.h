// ProcessGroupShoal: torch.distributed's "shoal" backend — a c10d process
// group over shoal::collectives::Communicator (shared memory for CPU
// tensors, NCCL for CUDA tensors), bootstrapped through the c10d::Store
// torch hands it (C10dRendezvous), so it runs under `shoal launch`,
// torchrun, or any init_method.
//
// Every collective is issued asynchronously and returns a ShoalWork
// (work.h). Ops: allreduce (SUM, PRODUCT, MIN, MAX, AVG on shoal's
// kernels; BAND/BOR/BXOR as an all_gather and an element-wise tail;
// PREMUL_SUM as a scale and a SUM; sparse tensors as gloo does: indices and
// values gathered, then summed), allreduce_coalesced, broadcast, reduce,
// allgather, _allgather_base, allgather_coalesced, gather, scatter,
// reduce_scatter, _reduce_scatter_base, alltoall_base (even splits on
// shoal's all_to_all, uneven ones as sends and receives), alltoall, send,
// recv, recvAnysource, barrier, monitoredBarrier; on torch 2.x also
// allgather_into_tensor_coalesced and reduce_scatter_tensor_coalesced.
// Non-contiguous tensors are staged. Anything else raises RuntimeError
// naming the op (the base class does for the ops not overridden). Failures
// — a dead or stalled rank, a mismatch — raise RuntimeError within the
// group's timeout ("Timed out waiting <ms>ms: ..." for a timeout); the
// group is unusable after.
#ifndef SHOAL_TORCH_BACKEND_PROCESS_GROUP_H_
#define SHOAL_TORCH_BACKEND_PROCESS_GROUP_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
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
                    std::string name, std::chrono::milliseconds timeout);
  ~ProcessGroupShoal() override;

  const std::string getBackendName() const override { return "shoal"; }

  // The group's sequence number: how many ops this rank issued through Run
  // (the collectives, send and recv; the barriers are not counted); equal
  // across ranks that issued the same ops. Set (torch 1.13's start of a group)
  // makes it 0; torch 2.x starts it at 0 and calls neither.
  void setSequenceNumberForGroup() override { seq_.store(0); }
  uint64_t getSequenceNumberForGroup() override { return seq_.load(); }

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

  // process_group_more.cc:
  // output_lists[i][r] = rank r's input_list[i].
  WorkPtr allgather_coalesced(std::vector<Tensors>& output_lists,
                              Tensors& input_list,
                              const ::c10d::AllgatherOptions& opts) override;
  // A receive from whichever rank sends first (blocking); sourceRank() names
  // it. Receives stay posted on the other ranks (see docs/torch.md).
  WorkPtr recvAnysource(Tensors& tensors, int tag) override;
  // Rank 0 waits for every other rank within the timeout, then releases
  // them; throws naming the ranks that did not come.
  void monitoredBarrier(const ::c10d::BarrierOptions& opts,
                        bool wait_all_ranks) override;
#ifdef SHOAL_TORCH2
  WorkPtr allreduce_sparse(Tensors& tensors,
                           const ::c10d::AllreduceOptions& opts) override;
  // outputs[i] = every rank's inputs[i], in rank order.
  WorkPtr allgather_into_tensor_coalesced(
      Tensors& outputs, Tensors& inputs,
      const ::c10d::AllgatherOptions& opts) override;
  // outputs[i] = block `rank` of inputs[i] reduced across ranks.
  WorkPtr reduce_scatter_tensor_coalesced(
      Tensors& outputs, Tensors& inputs,
      const ::c10d::ReduceScatterOptions& opts) override;
#endif

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
    // Instead of `issue`: an op made of several (sends and receives).
    std::function<absl::StatusOr<std::vector<collectives::Work>>(
        const collectives::CallOptions&)>
        issue_many;
  };
  // Issues `l` (throws std::runtime_error if shoal refuses it at once) and
  // counts it in seq_.
  WorkPtr Run(Launch l);
  std::atomic<uint64_t> seq_{0};
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
  // A block of `send[p]` bytes to every rank p and one of `recv[p]` bytes
  // from it (`in`, `out`: byte offsets in_at[p], out_at[p]); its own block
  // copied. What uneven all_to_all and lists of tensors become.
  Launch ExchangeLaunch(at::Tensor in, at::Tensor out,
                        std::vector<int64_t> in_at, std::vector<int64_t> send,
                        std::vector<int64_t> out_at, std::vector<int64_t> recv,
                        const std::string& what, ::c10d::OpType type,
                        std::chrono::milliseconds timeout);
  // Sparse SUM: every rank's indices and values gathered (padded to the
  // largest), summed; the result replaces `t`. Blocking.
  WorkPtr SparseAllReduce(at::Tensor& t, const ::c10d::AllreduceOptions& opts);
  // The op's timeout: `t`, or the group's when unset.
  std::chrono::milliseconds TimeoutOr(std::chrono::milliseconds t) const;
  // A receive from `src` of t's bytes: from the one recvAnysource left
  // posted there, else a new one. Blocking when posted; else issued.
  WorkPtr RecvFrom(at::Tensor t, int src);

  // A receive recvAnysource posted on a rank and did not use: its buffer
  // (the bytes of the tensor it was posted for).
  struct Posted {
    collectives::Work work;
    at::Tensor buffer;
  };

  std::string name_;
  const std::chrono::milliseconds timeout_;  // the group's
  // By source rank; only the calling thread (torch issues a group's ops from
  // one thread at a time) touches it.
  std::map<int, Posted> posted_;
  std::unique_ptr<collectives::Communicator> comm_;
  // Destroyed first (declared last): it completes queued works, which use
  // comm_.
  std::shared_ptr<Completer> completer_;
};

}  // namespace shoal::torch_backend

#endif  // SHOAL_TORCH_BACKEND_PROCESS_GROUP_H_
