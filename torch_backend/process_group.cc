#include "torch_backend/process_group.h"

#include <torch/cuda.h>

#include <cstdlib>
#include <stdexcept>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "torch_backend/c10d_rendezvous.h"
#include "torch_backend/tensors.h"

namespace shoal::torch_backend {

namespace {

using RedOpType = ::c10d::ReduceOp::RedOpType;
using Tensors = ProcessGroupShoal::Tensors;

[[noreturn]] void Throw(const std::string& what, const absl::Status& s) {
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
void Unflatten(const at::Tensor& flat, Tensors& outs) {
  int64_t at = 0;
  for (at::Tensor& o : outs) {
    o.copy_(flat.narrow(0, at, o.numel()).view(o.sizes()));
    at += o.numel();
  }
}

// The tensors, flattened into one new contiguous tensor.
at::Tensor Flatten(const Tensors& ts) {
  Tensors flat;
  flat.reserve(ts.size());
  for (const at::Tensor& t : ts) flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}

// The CUDA device NCCL uses: this process's LOCAL_RANK-th when it sees
// several (torchrun and shoal launch set LOCAL_RANK), else the first.
int CudaDeviceForRank() {
  if (!torch::cuda::is_available()) return 0;
  const int64_t count = static_cast<int64_t>(torch::cuda::device_count());
  int local_rank = 0;
  const char* env = std::getenv("LOCAL_RANK");
  if (count <= 1 || env == nullptr || !absl::SimpleAtoi(env, &local_rank)) {
    return 0;
  }
  return static_cast<int>(local_rank % count);
}

}  // namespace

absl::StatusOr<c10::intrusive_ptr<ProcessGroupShoal>> ProcessGroupShoal::Create(
    c10::intrusive_ptr<::c10d::Store> store, int rank, int size,
    std::chrono::milliseconds timeout, const std::string& group_name) {
  if (store == nullptr) return absl::InvalidArgumentError("no store");
  std::string name = absl::StrCat("torch-", group_name);
  for (char& c : name) {
    if (!absl::ascii_isalnum(c) && c != '-' && c != '_') c = '_';
  }
  collectives::CommunicatorOptions options;
  options.name = name;
  options.timeout = timeout.count() > 0 ? absl::FromChrono(timeout)
                                        : absl::InfiniteDuration();
  options.cuda_device = CudaDeviceForRank();
  SHOAL_ASSIGN_OR_RETURN(std::unique_ptr<collectives::Communicator> comm,
                         collectives::Communicator::CreateWithRendezvous(
                             std::make_shared<C10dRendezvous>(std::move(store)),
                             "torch", rank, size, options));
  return c10::make_intrusive<ProcessGroupShoal>(rank, size, std::move(comm),
                                                std::move(name));
}

ProcessGroupShoal::ProcessGroupShoal(
    int rank, int size, std::unique_ptr<collectives::Communicator> comm,
    std::string name)
    : TorchBackendBase(rank, size),
      name_(std::move(name)),
      comm_(std::move(comm)),
      completer_(std::make_shared<Completer>()) {}

ProcessGroupShoal::~ProcessGroupShoal() = default;

ProcessGroupShoal::WorkPtr ProcessGroupShoal::Run(Launch l) {
  collectives::CallOptions call;
  if (l.timeout != ::c10d::kUnsetTimeout) {
    call.timeout = absl::FromChrono(l.timeout);
  }
  SyncIfCuda(l.inputs);
  absl::StatusOr<collectives::Work> work = l.issue(call);
  ThrowIfError(l.what, work.status());
  l.keep_alive.insert(l.keep_alive.end(), l.inputs.begin(), l.inputs.end());
  return c10::make_intrusive<ShoalWork>(
      rank_, l.type, std::move(l.what), *std::move(work), std::move(l.outputs),
      std::move(l.finish), std::move(l.keep_alive), completer_);
}

// ---- reductions
// --------------------------------------------------------------------

ProcessGroupShoal::Launch ProcessGroupShoal::ReduceLaunch(
    at::Tensor& t, const ::c10d::ReduceOp& op, int root,
    std::chrono::milliseconds timeout, const std::string& what,
    ::c10d::OpType type) {
  if (IsBitwise(op)) return BitwiseLaunch(t, op, root, timeout, what, type);
  const collectives::ReduceOp shoal_op = ShoalReduceOp(op, what);
  const DType dtype = ReducibleDType(t, what);
  // Reduced in place in `staged`: `t`, a contiguous copy, or (PREMUL_SUM)
  // the scaled copy.
  at::Tensor staged = Scaled(Contiguous(t), op, what);
  collectives::Communicator* comm = comm_.get();
  Launch l;
  l.what = what;
  l.type = type;
  l.timeout = timeout;
  l.inputs = {staged};
  l.outputs = {t};
  const bool gets_result = root < 0 || root == rank_;
  l.finish = [t, staged, gets_result]() mutable {
    if (gets_result) CopyBackIfStaged(t, staged);
  };
  void* data = staged.data_ptr();
  const int64_t n = staged.numel();
  l.issue = [=](const collectives::CallOptions& call) {
    return root < 0
               ? comm->AllReduceAsync(data, data, n, dtype, shoal_op, call)
               : comm->ReduceAsync(data, data, n, dtype, shoal_op, root, call);
  };
  return l;
}

ProcessGroupShoal::Launch ProcessGroupShoal::BitwiseLaunch(
    at::Tensor& t, const ::c10d::ReduceOp& op, int root,
    std::chrono::milliseconds timeout, const std::string& what,
    ::c10d::OpType type) {
  if (!at::isIntegralType(t.scalar_type(), /*includeBool=*/true)) {
    Refuse(what, absl::StrCat("ReduceOp ", RedOpName(op),
                              " needs an integer or bool tensor, not ",
                              c10::toString(t.scalar_type())));
  }
  at::Tensor staged = Contiguous(t);
  at::Tensor gathered = at::empty({size_, staged.numel()}, staged.options());
  const Payload p = MovePayload(staged);
  const RedOpType kind = op;
  const bool gets_result = root < 0 || root == rank_;
  const int world = size_;
  collectives::Communicator* comm = comm_.get();
  Launch l;
  l.what = what;
  l.type = type;
  l.timeout = timeout;
  l.inputs = {staged};
  l.outputs = {t};
  l.keep_alive = {gathered};
  l.finish = [t, gathered, kind, gets_result, world]() mutable {
    if (!gets_result) return;
    at::Tensor acc = gathered[0].clone();
    for (int r = 1; r < world; ++r) {
      if (kind == RedOpType::BAND) acc.bitwise_and_(gathered[r]);
      if (kind == RedOpType::BOR) acc.bitwise_or_(gathered[r]);
      if (kind == RedOpType::BXOR) acc.bitwise_xor_(gathered[r]);
    }
    t.copy_(acc.view(t.sizes()));
  };
  const void* in = staged.data_ptr();
  void* out = gathered.data_ptr();
  l.issue = [=](const collectives::CallOptions& call) {
    return comm->AllGatherAsync(in, out, p.count, p.dtype, call);
  };
  return l;
}

ProcessGroupShoal::WorkPtr ProcessGroupShoal::allreduce(
    Tensors& tensors, const ::c10d::AllreduceOptions& opts) {
  ThrowIfError("allreduce", CheckSingle(tensors, "allreduce"));
  return Run(ReduceLaunch(tensors.front(), opts.reduceOp, -1, opts.timeout,
                          "allreduce", ::c10d::OpType::ALLREDUCE));
}

ProcessGroupShoal::WorkPtr ProcessGroupShoal::allreduce_coalesced(
    Tensors& tensors, const ::c10d::AllreduceCoalescedOptions& opts) {
  const std::string what = "allreduce_coalesced";
  if (tensors.empty()) Refuse(what, "no tensors");
  ThrowIfError(what, CheckTensors(tensors, what));
  // One all_reduce of the tensors side by side, then copied back.
  at::Tensor flat = Flatten(tensors);
  Launch l = ReduceLaunch(flat, opts.reduceOp, -1, opts.timeout, what,
                          ::c10d::OpType::ALLREDUCE_COALESCED);
  std::function<void()> reduced = std::move(l.finish);
  l.finish = [reduced, flat, outs = tensors]() mutable {
    reduced();
    Unflatten(flat, outs);
  };
  l.outputs = tensors;
  return Run(std::move(l));
}

ProcessGroupShoal::WorkPtr ProcessGroupShoal::reduce(
    Tensors& tensors, const ::c10d::ReduceOptions& opts) {
  ThrowIfError("reduce", CheckSingle(tensors, "reduce"));
  CheckRank(opts.rootRank, size_, "reduce");
  return Run(ReduceLaunch(tensors.front(), opts.reduceOp,
                          static_cast<int>(opts.rootRank), opts.timeout,
                          "reduce", ::c10d::OpType::REDUCE));
}

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

ProcessGroupShoal::WorkPtr ProcessGroupShoal::alltoall_base(
    at::Tensor& output, at::Tensor& input,
    std::vector<int64_t>& output_split_sizes,
    std::vector<int64_t>& input_split_sizes,
    const ::c10d::AllToAllOptions& opts) {
  const std::string what = "alltoall_base";
  ThrowIfError(what, CheckTensors({output, input}, what));
  if (input.dim() == 0 || input.size(0) % size_ != 0 ||
      input.numel() != output.numel()) {
    Refuse(what, absl::StrCat("input and output of the same size, whose "
                              "first dimension divides by ",
                              size_));
  }
  const int64_t rows = input.size(0) / size_;
  for (const auto* splits : {&output_split_sizes, &input_split_sizes}) {
    for (int64_t s : *splits) {
      if (s != rows) {
        Refuse(what,
               "uneven split sizes are not supported (only equal "
               "splits: pass none)");
      }
    }
  }
  at::Tensor in = Contiguous(input);
  at::Tensor staged = Contiguous(output);
  const Payload p = MovePayload(in);
  const int64_t block = p.count / size_;
  const void* src = in.data_ptr();
  void* dst = staged.data_ptr();
  collectives::Communicator* comm = comm_.get();
  Launch l{what, ::c10d::OpType::ALLTOALL_BASE, opts.timeout, {in}, {output}};
  l.keep_alive = {staged};
  l.finish = [output, staged]() mutable { CopyBackIfStaged(output, staged); };
  l.issue = [=](const collectives::CallOptions& call) {
    return comm->AllToAllAsync(src, dst, block, p.dtype, call);
  };
  return Run(std::move(l));
}

ProcessGroupShoal::WorkPtr ProcessGroupShoal::alltoall(
    Tensors& outputs, Tensors& inputs, const ::c10d::AllToAllOptions& opts) {
  const std::string what = "alltoall";
  if (outputs.size() != size_t(size_) || inputs.size() != size_t(size_)) {
    Refuse(what, absl::StrCat(size_, " input and ", size_, " output tensors"));
  }
  ThrowIfError(what, CheckTensors(inputs, what));
  ThrowIfError(what, CheckTensors(outputs, what));
  for (int r = 0; r < size_; ++r) {
    if (inputs[r].numel() != inputs[0].numel() ||
        outputs[r].numel() != inputs[0].numel()) {
      Refuse(what, "tensors of different sizes are not supported");
    }
  }
  at::Tensor in = Flatten(inputs);
  at::Tensor out = at::empty_like(in);
  const Payload p = MovePayload(in);
  const int64_t block = p.count / size_;
  const void* src = in.data_ptr();
  void* dst = out.data_ptr();
  collectives::Communicator* comm = comm_.get();
  Launch l{what, ::c10d::OpType::ALLTOALL, opts.timeout, {in}, outputs};
  l.keep_alive = {out};
  l.finish = [out, outs = outputs]() mutable { Unflatten(out, outs); };
  l.issue = [=](const collectives::CallOptions& call) {
    return comm->AllToAllAsync(src, dst, block, p.dtype, call);
  };
  return Run(std::move(l));
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
  at::Tensor t = tensors.front();
  at::Tensor staged = Contiguous(t);
  const Payload p = MovePayload(staged);
  void* dst = staged.data_ptr();
  collectives::Communicator* comm = comm_.get();
  Launch l{what, ::c10d::OpType::RECV, ::c10d::kUnsetTimeout, {}, {t}};
  l.keep_alive = {staged};
  l.finish = [t, staged]() mutable { CopyBackIfStaged(t, staged); };
  l.issue = [=](const collectives::CallOptions& call) {
    return comm->RecvAsync(dst, p.count, p.dtype, src_rank, call);
  };
  return Run(std::move(l));
}

ProcessGroupShoal::WorkPtr ProcessGroupShoal::barrier(
    const ::c10d::BarrierOptions& opts) {
  collectives::CallOptions call;
  if (opts.timeout != ::c10d::kUnsetTimeout) {
    call.timeout = absl::FromChrono(opts.timeout);
  }
  // Blocking: shoal's barrier has no async form.
  const absl::Status s = comm_->Barrier(call);
  return CompletedWork(rank_, ::c10d::OpType::BARRIER, {},
                       s.ok() ? nullptr : ErrorFor("barrier", s));
}

}  // namespace shoal::torch_backend
