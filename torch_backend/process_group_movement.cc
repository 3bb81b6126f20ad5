// ProcessGroupShoal's data-moving ops, point to point and barrier (the
// reductions and creation are in process_group.cc).
#include <stdexcept>
#include <utility>

#include "absl/strings/str_cat.h"
#include "torch_backend/op_support.h"
#include "torch_backend/process_group.h"
#include "torch_backend/tensors.h"

namespace shoal::torch_backend {

using Tensors = ProcessGroupShoal::Tensors;

// ---- data movement
// -----------------------------------------------------------------

ProcessGroupShoal::WorkPtr ProcessGroupShoal::broadcast(
    Tensors& tensors, const ::c10d::BroadcastOptions& opts) {
  const std::string what = "broadcast";
  ThrowIfError(what, CheckSingle(tensors, what));
  CheckRank(opts.rootRank, size_, what);
  at::Tensor t = tensors.front();
  at::Tensor staged = Contiguous(t);
  const Payload p = MovePayload(staged);
  const int root = static_cast<int>(opts.rootRank);
  void* data = staged.data_ptr();
  collectives::Communicator* comm = comm_.get();
  Launch l{what, ::c10d::OpType::BROADCAST, opts.timeout, {staged}, {t}};
  l.finish = [t, staged]() mutable { CopyBackIfStaged(t, staged); };
  l.issue = [=](const collectives::CallOptions& call) {
    return comm->BroadcastAsync(data, data, p.count, p.dtype, root, call);
  };
  return Run(std::move(l));
}

// All ranks' `input` into `gathered` (size × its elements), in rank order.
ProcessGroupShoal::Launch ProcessGroupShoal::AllGatherLaunch(
    const at::Tensor& input, at::Tensor gathered, const std::string& what,
    ::c10d::OpType type, std::chrono::milliseconds timeout) {
  at::Tensor in = Contiguous(input);
  if (gathered.numel() != size_ * in.numel() ||
      gathered.scalar_type() != in.scalar_type()) {
    Refuse(what, absl::StrCat("the output needs ", size_, " x ", in.numel(),
                              " elements of ", c10::toString(in.scalar_type()),
                              " (got ", gathered.numel(), " of ",
                              c10::toString(gathered.scalar_type()), ")"));
  }
  const Payload p = MovePayload(in);
  const void* src = in.data_ptr();
  void* dst = gathered.data_ptr();
  collectives::Communicator* comm = comm_.get();
  Launch l{what, type, timeout, {in}, {}};
  l.keep_alive = {gathered};
  l.issue = [=](const collectives::CallOptions& call) {
    return comm->AllGatherAsync(src, dst, p.count, p.dtype, call);
  };
  return l;
}

ProcessGroupShoal::WorkPtr ProcessGroupShoal::allgather(
    std::vector<Tensors>& outputs, Tensors& inputs,
    const ::c10d::AllgatherOptions& opts) {
  const std::string what = "allgather";
  ThrowIfError(what, CheckSingle(inputs, what));
  if (outputs.size() != 1 || outputs.front().size() != size_t(size_)) {
    Refuse(what, absl::StrCat("one list of ", size_, " output tensors"));
  }
  ThrowIfError(what, CheckTensors(outputs.front(), what));
  at::Tensor gathered =
      at::empty({size_ * inputs.front().numel()}, inputs.front().options());
  Launch l = AllGatherLaunch(inputs.front(), gathered, what,
                             ::c10d::OpType::ALLGATHER, opts.timeout);
  l.outputs = outputs.front();
  l.finish = [gathered, outs = outputs.front()]() mutable {
    Unflatten(gathered, outs);
  };
  return Run(std::move(l));
}

ProcessGroupShoal::WorkPtr ProcessGroupShoal::_allgather_base(
    at::Tensor& output, at::Tensor& input,
    const ::c10d::AllgatherOptions& opts) {
  const std::string what = "_allgather_base";
  ThrowIfError(what, CheckTensors({output, input}, what));
  at::Tensor staged = Contiguous(output);
  Launch l = AllGatherLaunch(input, staged, what,
                             ::c10d::OpType::_ALLGATHER_BASE, opts.timeout);
  l.outputs = {output};
  l.finish = [output, staged]() mutable { CopyBackIfStaged(output, staged); };
  return Run(std::move(l));
}

ProcessGroupShoal::WorkPtr ProcessGroupShoal::gather(
    std::vector<Tensors>& outputs, Tensors& inputs,
    const ::c10d::GatherOptions& opts) {
  const std::string what = "gather";
  ThrowIfError(what, CheckSingle(inputs, what));
  CheckRank(opts.rootRank, size_, what);
  const bool root = opts.rootRank == rank_;
  if (root &&
      (outputs.size() != 1 || outputs.front().size() != size_t(size_))) {
    Refuse(what, absl::StrCat("the root passes one list of ", size_,
                              " output tensors"));
  }
  if (!root && !outputs.empty()) Refuse(what, "only the root passes outputs");
  // An all_gather of which only the root keeps the result.
  at::Tensor gathered =
      at::empty({size_ * inputs.front().numel()}, inputs.front().options());
  Launch l = AllGatherLaunch(inputs.front(), gathered, what,
                             ::c10d::OpType::GATHER, opts.timeout);
  if (root) {
    l.outputs = outputs.front();
    l.finish = [gathered, outs = outputs.front()]() mutable {
      Unflatten(gathered, outs);
    };
  }
  return Run(std::move(l));
}

ProcessGroupShoal::WorkPtr ProcessGroupShoal::scatter(
    Tensors& outputs, std::vector<Tensors>& inputs,
    const ::c10d::ScatterOptions& opts) {
  const std::string what = "scatter";
  ThrowIfError(what, CheckSingle(outputs, what));
  CheckRank(opts.rootRank, size_, what);
  const bool root = opts.rootRank == rank_;
  if (root && (inputs.size() != 1 || inputs.front().size() != size_t(size_))) {
    Refuse(what, absl::StrCat("the root passes one list of ", size_,
                              " input tensors"));
  }
  if (!root && !inputs.empty()) Refuse(what, "only the root passes inputs");
  // A broadcast of every block from the root; each rank keeps its own.
  at::Tensor out = outputs.front();
  at::Tensor all = root ? Flatten(inputs.front())
                        : at::empty({size_ * out.numel()}, out.options());
  if (all.numel() != size_ * out.numel()) {
    Refuse(what, "every input must have the output's number of elements");
  }
  const Payload p = MovePayload(all);
  const int from = static_cast<int>(opts.rootRank);
  void* data = all.data_ptr();
  collectives::Communicator* comm = comm_.get();
  Launch l{what, ::c10d::OpType::SCATTER, opts.timeout, {all}, {out}};
  const int64_t n = out.numel(), me = rank_;
  l.finish = [out, all, n, me]() mutable {
    out.copy_(all.narrow(0, me * n, n).view(out.sizes()));
  };
  l.issue = [=](const collectives::CallOptions& call) {
    return comm->BroadcastAsync(data, data, p.count, p.dtype, from, call);
  };
  return Run(std::move(l));
}

// `in` (size × n elements) reduced block-wise; block `rank` into `out`.
ProcessGroupShoal::Launch ProcessGroupShoal::ReduceScatterLaunch(
    at::Tensor in, at::Tensor out, const ::c10d::ReduceOp& op,
    const std::string& what, ::c10d::OpType type,
    std::chrono::milliseconds timeout) {
  const collectives::ReduceOp shoal_op = ShoalReduceOp(op, what);
  const DType dtype = ReducibleDType(in, what);
  if (in.numel() != size_ * out.numel() ||
      in.scalar_type() != out.scalar_type()) {
    Refuse(what, absl::StrCat("the input needs ", size_, " x ", out.numel(),
                              " elements of the output's dtype"));
  }
  in = Scaled(Contiguous(in), op, what);
  at::Tensor staged = Contiguous(out);
  const void* src = in.data_ptr();
  void* dst = staged.data_ptr();
  const int64_t n = staged.numel();
  collectives::Communicator* comm = comm_.get();
  Launch l{what, type, timeout, {in}, {out}};
  l.keep_alive = {staged};
  l.finish = [out, staged]() mutable { CopyBackIfStaged(out, staged); };
  l.issue = [=](const collectives::CallOptions& call) {
    return comm->ReduceScatterAsync(src, dst, n, dtype, shoal_op, call);
  };
  return l;
}

ProcessGroupShoal::WorkPtr ProcessGroupShoal::reduce_scatter(
    Tensors& outputs, std::vector<Tensors>& inputs,
    const ::c10d::ReduceScatterOptions& opts) {
  const std::string what = "reduce_scatter";
  ThrowIfError(what, CheckSingle(outputs, what));
  if (inputs.size() != 1 || inputs.front().size() != size_t(size_)) {
    Refuse(what, absl::StrCat("one list of ", size_, " input tensors"));
  }
  ThrowIfError(what, CheckTensors(inputs.front(), what));
  return Run(ReduceScatterLaunch(Flatten(inputs.front()), outputs.front(),
                                 opts.reduceOp, what,
                                 ::c10d::OpType::REDUCE_SCATTER, opts.timeout));
}

ProcessGroupShoal::WorkPtr ProcessGroupShoal::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input,
    const ::c10d::ReduceScatterOptions& opts) {
  const std::string what = "_reduce_scatter_base";
  ThrowIfError(what, CheckTensors({output, input}, what));
  return Run(ReduceScatterLaunch(input, output, opts.reduceOp, what,
                                 ::c10d::OpType::_REDUCE_SCATTER_BASE,
                                 opts.timeout));
}

// ---- point to point, barrier
// -------------------------------------------------------

ProcessGroupShoal::WorkPtr ProcessGroupShoal::send(Tensors& tensors,
                                                   int dst_rank, int tag) {
  const std::string what = "send";
  ThrowIfError(what, CheckSingle(tensors, what));
  CheckRank(dst_rank, size_, what);
  at::Tensor in = Contiguous(tensors.front());
  const Payload p = MovePayload(in);
  const void* src = in.data_ptr();
  collectives::Communicator* comm = comm_.get();
  Launch l{what, ::c10d::OpType::SEND, ::c10d::kUnsetTimeout, {in}, {}};
  l.issue = [=](const collectives::CallOptions& call) {
    return comm->SendAsync(src, p.count, p.dtype, dst_rank, call);
  };
  return Run(std::move(l));
}

ProcessGroupShoal::WorkPtr ProcessGroupShoal::recv(Tensors& tensors,
                                                   int src_rank, int tag) {
  const std::string what = "recv";
  ThrowIfError(what, CheckSingle(tensors, what));
  CheckRank(src_rank, size_, what);
  return RecvFrom(tensors.front(), src_rank);
}

ProcessGroupShoal::WorkPtr ProcessGroupShoal::barrier(
    const ::c10d::BarrierOptions& opts) {
  collectives::CallOptions call;
  if (opts.timeout != ::c10d::kUnsetTimeout) {
    call.timeout = absl::FromChrono(opts.timeout);
  }
  // Blocking: shoal's barrier has no async form.
  const absl::Status s = comm_->Barrier(call);
  return CompletedWork(
      rank_, ::c10d::OpType::BARRIER, {},
      s.ok() ? nullptr : ErrorFor("barrier", s, TimeoutOr(opts.timeout)));
}

}  // namespace shoal::torch_backend
