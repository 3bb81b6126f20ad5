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
#include "torch_backend/op_support.h"
#include "torch_backend/tensors.h"

namespace shoal::torch_backend {

namespace {

using Tensors = ProcessGroupShoal::Tensors;

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
                                                std::move(name), timeout);
}

ProcessGroupShoal::ProcessGroupShoal(
    int rank, int size, std::unique_ptr<collectives::Communicator> comm,
    std::string name, std::chrono::milliseconds timeout)
    : TorchBackendBase(rank, size),
      name_(std::move(name)),
      timeout_(timeout),
      comm_(std::move(comm)),
      completer_(std::make_shared<Completer>()) {}

ProcessGroupShoal::~ProcessGroupShoal() = default;

std::chrono::milliseconds ProcessGroupShoal::TimeoutOr(
    std::chrono::milliseconds t) const {
  return t != ::c10d::kUnsetTimeout ? t : timeout_;
}

ProcessGroupShoal::WorkPtr ProcessGroupShoal::Run(Launch l) {
  seq_.fetch_add(1, std::memory_order_relaxed);
  collectives::CallOptions call;
  if (l.timeout != ::c10d::kUnsetTimeout) {
    call.timeout = absl::FromChrono(l.timeout);
  }
  SyncIfCuda(l.inputs);
  std::vector<collectives::Work> works;
  if (l.issue_many) {
    absl::StatusOr<std::vector<collectives::Work>> many = l.issue_many(call);
    ThrowIfError(l.what, many.status());
    works = *std::move(many);
  } else {
    absl::StatusOr<collectives::Work> work = l.issue(call);
    ThrowIfError(l.what, work.status());
    works.push_back(*std::move(work));
  }
  l.keep_alive.insert(l.keep_alive.end(), l.inputs.begin(), l.inputs.end());
  return c10::make_intrusive<ShoalWork>(
      rank_, l.type, std::move(l.what), std::move(works), std::move(l.outputs),
      std::move(l.finish), std::move(l.keep_alive), completer_,
      TimeoutOr(l.timeout));
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
  if (tensors.size() == 1 && tensors.front().defined() &&
      tensors.front().is_sparse()) {
    return SparseAllReduce(tensors.front(), opts);
  }
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

}  // namespace shoal::torch_backend
