// ProcessGroupShoal's ops beyond one shoal collective each: coalesced
// gathers and reduce-scatters, uneven all-to-all (sends and receives),
// receives from any source, the monitored barrier and sparse all_reduce.
#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "torch_backend/op_support.h"
#include "torch_backend/process_group.h"
#include "torch_backend/tensors.h"

namespace shoal::torch_backend {

using Tensors = ProcessGroupShoal::Tensors;

namespace {

// The bytes of a contiguous tensor, as a 1-D uint8 view of its storage.
at::Tensor Bytes(const at::Tensor& contiguous) {
  return contiguous.reshape({-1}).view(at::kByte);
}

}  // namespace

// ---- all_gather of several tensors
// ------------------------------------------------

ProcessGroupShoal::WorkPtr ProcessGroupShoal::allgather_coalesced(
    std::vector<Tensors>& output_lists, Tensors& input_list,
    const ::c10d::AllgatherOptions& opts) {
  const std::string what = "allgather_coalesced";
  if (input_list.empty()) Refuse(what, "no input tensors");
  ThrowIfError(what, CheckTensors(input_list, what));
  // output_lists[r][i] receives rank r's input i (gloo's layout).
  if (output_lists.size() != size_t(size_)) {
    Refuse(what, absl::StrCat("one output list per rank (", size_, "), got ",
                              output_lists.size()));
  }
  for (size_t r = 0; r < output_lists.size(); ++r) {
    if (output_lists[r].size() != input_list.size()) {
      Refuse(what, absl::StrCat("output list ", r, " needs ", input_list.size(),
                                " tensors, got ", output_lists[r].size()));
    }
    for (size_t i = 0; i < input_list.size(); ++i) {
      const at::Tensor& o = output_lists[r][i];
      if (o.numel() != input_list[i].numel() ||
          o.scalar_type() != input_list[i].scalar_type()) {
        Refuse(what, absl::StrCat(
                         "output ", i, " of list ", r, " must be like input ",
                         i, " (", input_list[i].numel(), " elements of ",
                         c10::toString(input_list[i].scalar_type()), "), got ",
                         o.numel(), " of ", c10::toString(o.scalar_type())));
      }
    }
  }
  // The inputs side by side, gathered once: rank r's block holds its
  // inputs in order.
  at::Tensor flat = Flatten(input_list);
  at::Tensor gathered = at::empty({size_ * flat.numel()}, flat.options());
  Launch l = AllGatherLaunch(flat, gathered, what,
                             ::c10d::OpType::ALLGATHER_COALESCED, opts.timeout);
  Tensors outs;
  for (const Tensors& list : output_lists) {
    outs.insert(outs.end(), list.begin(), list.end());
  }
  l.outputs = outs;
  const int64_t per_rank = flat.numel();
  const int world = size_;
  l.finish = [gathered, output_lists, per_rank, world]() mutable {
    for (int r = 0; r < world; ++r) {
      int64_t at = r * per_rank;
      for (at::Tensor& o : output_lists[r]) {
        o.copy_(gathered.narrow(0, at, o.numel()).view(o.sizes()));
        at += o.numel();
      }
    }
  };
  return Run(std::move(l));
}

#ifdef SHOAL_TORCH2

ProcessGroupShoal::WorkPtr ProcessGroupShoal::allgather_into_tensor_coalesced(
    Tensors& outputs, Tensors& inputs, const ::c10d::AllgatherOptions& opts) {
  const std::string what = "allgather_into_tensor_coalesced";
  if (inputs.empty() || outputs.size() != inputs.size()) {
    Refuse(what, absl::StrCat("one output per input (", inputs.size(),
                              "), got ", outputs.size()));
  }
  ThrowIfError(what, CheckTensors(inputs, what));
  ThrowIfError(what, CheckTensors(outputs, what));
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (outputs[i].numel() != size_ * inputs[i].numel()) {
      Refuse(what, absl::StrCat("output ", i, " needs ", size_, " x ",
                                inputs[i].numel(), " elements, got ",
                                outputs[i].numel()));
    }
  }
  at::Tensor flat = Flatten(inputs);
  at::Tensor gathered = at::empty({size_ * flat.numel()}, flat.options());
  Launch l = AllGatherLaunch(flat, gathered, what,
                             ::c10d::OpType::ALLGATHER_INTO_TENSOR_COALESCED,
                             opts.timeout);
  l.outputs = outputs;
  const int64_t per_rank = flat.numel();
  const int world = size_;
  l.finish = [gathered, outs = outputs, ins = inputs, per_rank,
              world]() mutable {
    // Rank r's block of gathered holds its inputs in order; output i is
    // every rank's input i in rank order.
    for (size_t i = 0; i < outs.size(); ++i) {
      int64_t offset = 0;
      for (size_t j = 0; j < i; ++j) offset += ins[j].numel();
      const int64_t n = ins[i].numel();
      at::Tensor parts = at::empty({world, n}, gathered.options());
      for (int r = 0; r < world; ++r) {
        parts[r].copy_(gathered.narrow(0, r * per_rank + offset, n));
      }
      outs[i].copy_(parts.view(outs[i].sizes()));
    }
  };
  return Run(std::move(l));
}

ProcessGroupShoal::WorkPtr ProcessGroupShoal::reduce_scatter_tensor_coalesced(
    Tensors& outputs, Tensors& inputs,
    const ::c10d::ReduceScatterOptions& opts) {
  const std::string what = "reduce_scatter_tensor_coalesced";
  if (inputs.empty() || outputs.size() != inputs.size()) {
    Refuse(what, absl::StrCat("one output per input (", inputs.size(),
                              "), got ", outputs.size()));
  }
  ThrowIfError(what, CheckTensors(inputs, what));
  ThrowIfError(what, CheckTensors(outputs, what));
  // Rank r's block of the reduce-scatter's input: block r of every input,
  // in order.
  int64_t per_rank = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].numel() != size_ * outputs[i].numel()) {
      Refuse(what, absl::StrCat("input ", i, " needs ", size_, " x ",
                                outputs[i].numel(), " elements, got ",
                                inputs[i].numel()));
    }
    per_rank += outputs[i].numel();
  }
  Tensors blocks;
  for (int r = 0; r < size_; ++r) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      const int64_t n = outputs[i].numel();
      blocks.push_back(inputs[i].reshape({-1}).narrow(0, r * n, n));
    }
  }
  at::Tensor in = at::cat(blocks);
  at::Tensor out = at::empty({per_rank}, in.options());
  Launch l = ReduceScatterLaunch(
      in, out, opts.reduceOp, what,
      ::c10d::OpType::REDUCE_SCATTER_TENSOR_COALESCED, opts.timeout);
  l.outputs = outputs;
  std::function<void()> reduced = std::move(l.finish);
  l.finish = [reduced, out, outs = outputs]() mutable {
    reduced();
    Unflatten(out, outs);
  };
  return Run(std::move(l));
}

ProcessGroupShoal::WorkPtr ProcessGroupShoal::allreduce_sparse(
    Tensors& tensors, const ::c10d::AllreduceOptions& opts) {
  ThrowIfError("allreduce_sparse", CheckSingle(tensors, "allreduce_sparse"));
  return SparseAllReduce(tensors.front(), opts);
}

#endif  // SHOAL_TORCH2

// ---- all_to_all as sends and receives
// ---------------------------------------------

ProcessGroupShoal::Launch ProcessGroupShoal::ExchangeLaunch(
    at::Tensor in, at::Tensor out, std::vector<int64_t> in_at,
    std::vector<int64_t> send, std::vector<int64_t> out_at,
    std::vector<int64_t> recv, const std::string& what, ::c10d::OpType type,
    std::chrono::milliseconds timeout) {
  at::Tensor in_bytes = Bytes(in);
  at::Tensor out_bytes = Bytes(out);
  // Its own block, copied now (out is staging nobody else reads yet).
  if (send[rank_] != recv[rank_]) {
    Refuse(what, absl::StrCat("rank ", rank_, " sends itself ", send[rank_],
                              " bytes but expects ", recv[rank_]));
  }
  if (send[rank_] > 0) {
    out_bytes.narrow(0, out_at[rank_], recv[rank_])
        .copy_(in_bytes.narrow(0, in_at[rank_], send[rank_]));
  }
  collectives::Communicator* comm = comm_.get();
  const int me = rank_, world = size_;
  const uint8_t* src = static_cast<const uint8_t*>(in_bytes.data_ptr());
  uint8_t* dst = static_cast<uint8_t*>(out_bytes.data_ptr());
  Launch l{what, type, timeout, {in}, {}};
  l.keep_alive = {out};
  l.issue_many = [=](const collectives::CallOptions& call)
      -> absl::StatusOr<std::vector<collectives::Work>> {
    std::vector<collectives::Work> works;
    // Receives first, then sends, each in rank order starting after this
    // rank, so that every pair has both posted.
    for (int k = 1; k < world; ++k) {
      const int p = (me + k) % world;
      if (recv[p] == 0) continue;
      absl::StatusOr<collectives::Work> w =
          comm->RecvAsync(dst + out_at[p], recv[p], DType::kU8, p, call);
      if (!w.ok()) return w.status();
      works.push_back(*std::move(w));
    }
    for (int k = 1; k < world; ++k) {
      const int p = (me + world - k) % world;
      if (send[p] == 0) continue;
      absl::StatusOr<collectives::Work> w =
          comm->SendAsync(src + in_at[p], send[p], DType::kU8, p, call);
      if (!w.ok()) return w.status();
      works.push_back(*std::move(w));
    }
    return works;
  };
  return l;
}

ProcessGroupShoal::WorkPtr ProcessGroupShoal::alltoall_base(
    at::Tensor& output, at::Tensor& input,
    std::vector<int64_t>& output_split_sizes,
    std::vector<int64_t>& input_split_sizes,
    const ::c10d::AllToAllOptions& opts) {
  const std::string what = "alltoall_base";
  ThrowIfError(what, CheckTensors({output, input}, what));
  if (input.dim() == 0 || output.dim() == 0) {
    Refuse(what, "input and output need a first dimension to split");
  }
  auto splits = [&](const std::vector<int64_t>& given, const at::Tensor& t,
                    const char* which) {
    std::vector<int64_t> rows(size_);
    if (given.empty()) {
      if (t.size(0) % size_ != 0) {
        Refuse(what, absl::StrCat("the ", which, "'s first dimension (",
                                  t.size(0), ") does not divide by ", size_,
                                  " (pass split sizes)"));
      }
      std::fill(rows.begin(), rows.end(), t.size(0) / size_);
      return rows;
    }
    if (given.size() != size_t(size_)) {
      Refuse(what, absl::StrCat(size_, " ", which, " split sizes, got ",
                                given.size()));
    }
    int64_t sum = 0;
    for (int64_t s : given) {
      if (s < 0) Refuse(what, absl::StrCat("a negative split size: ", s));
      sum += s;
    }
    if (sum != t.size(0)) {
      Refuse(what, absl::StrCat("the ", which, " split sizes add up to ", sum,
                                ", not its first dimension ", t.size(0)));
    }
    return given;
  };
  const std::vector<int64_t> in_rows =
      splits(input_split_sizes, input, "input");
  const std::vector<int64_t> out_rows =
      splits(output_split_sizes, output, "output");
  at::Tensor in = Contiguous(input);
  at::Tensor staged = Contiguous(output);
  const bool even = std::all_of(in_rows.begin(), in_rows.end(),
                                [&](int64_t r) { return r == in_rows[0]; }) &&
                    out_rows == in_rows && input.numel() == output.numel();
  Launch l;
  if (even) {
    // Every block of one size: shoal's all_to_all.
    const Payload p = MovePayload(in);
    const int64_t block = p.count / size_;
    const void* src = in.data_ptr();
    void* dst = staged.data_ptr();
    collectives::Communicator* comm = comm_.get();
    l = Launch{what, ::c10d::OpType::ALLTOALL_BASE, opts.timeout, {in}, {}};
    l.keep_alive = {staged};
    l.issue = [=](const collectives::CallOptions& call) {
      return comm->AllToAllAsync(src, dst, block, p.dtype, call);
    };
  } else {
    const int64_t in_row =
        input.numel() == 0
            ? 0
            : input.numel() / input.size(0) * int64_t(input.element_size());
    const int64_t out_row =
        output.numel() == 0
            ? 0
            : output.numel() / output.size(0) * int64_t(output.element_size());
    std::vector<int64_t> in_at(size_), send(size_), out_at(size_), recv(size_);
    int64_t a = 0, b = 0;
    for (int r = 0; r < size_; ++r) {
      in_at[r] = a;
      send[r] = in_rows[r] * in_row;
      a += send[r];
      out_at[r] = b;
      recv[r] = out_rows[r] * out_row;
      b += recv[r];
    }
    l = ExchangeLaunch(in, staged, in_at, send, out_at, recv, what,
                       ::c10d::OpType::ALLTOALL_BASE, opts.timeout);
  }
  l.outputs = {output};
  l.finish = [output, staged]() mutable { CopyBackIfStaged(output, staged); };
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
  if (inputs[0].scalar_type() != outputs[0].scalar_type()) {
    Refuse(what, "inputs and outputs of one dtype");
  }
  at::Tensor in = Flatten(inputs);
  const int64_t elem = in.element_size();
  std::vector<int64_t> in_at(size_), send(size_), out_at(size_), recv(size_);
  int64_t a = 0, b = 0;
  for (int r = 0; r < size_; ++r) {
    in_at[r] = a;
    send[r] = inputs[r].numel() * elem;
    a += send[r];
    out_at[r] = b;
    recv[r] = outputs[r].numel() * elem;
    b += recv[r];
  }
  at::Tensor out = at::empty({b / elem}, in.options());
  Launch l = ExchangeLaunch(in, out, in_at, send, out_at, recv, what,
                            ::c10d::OpType::ALLTOALL, opts.timeout);
  l.outputs = outputs;
  l.finish = [out, outs = outputs]() mutable { Unflatten(out, outs); };
  return Run(std::move(l));
}

// ---- receives from any source
// ----------------------------------------------------

ProcessGroupShoal::WorkPtr ProcessGroupShoal::recvAnysource(Tensors& tensors,
                                                            int tag) {
  const std::string what = "recvAnysource";
  ThrowIfError(what, CheckSingle(tensors, what));
  at::Tensor t = tensors.front();
  if (!t.is_cpu()) Refuse(what, "CPU tensors only");
  if (size_ < 2) Refuse(what, "no other rank in the group");
  const int64_t bytes = t.numel() * int64_t(t.element_size());
  collectives::CallOptions call;
  call.timeout = absl::FromChrono(timeout_);
  // A receive of t's bytes posted on every other rank that has none; the
  // first to finish is taken, the others stay for later receives.
  for (int p = 0; p < size_; ++p) {
    if (p == rank_ || posted_.count(p) > 0) continue;
    at::Tensor buffer = at::empty({bytes}, t.options().dtype(at::kByte));
    absl::StatusOr<collectives::Work> w =
        comm_->RecvAsync(buffer.data_ptr(), bytes, DType::kU8, p, call);
    ThrowIfError(what, w.status());
    posted_[p] = Posted{*std::move(w), buffer};
  }
  const absl::Time deadline = absl::Now() + absl::FromChrono(timeout_);
  absl::Duration nap = absl::Microseconds(20);
  while (true) {
    for (auto it = posted_.begin(); it != posted_.end(); ++it) {
      if (!it->second.work.Test()) continue;
      const int src = it->first;
      Posted got = std::move(it->second);
      posted_.erase(it);
      const absl::Status s = got.work.Wait();
      if (!s.ok()) {
        return CompletedWork(rank_, ::c10d::OpType::RECVANYSOURCE, {t},
                             ErrorFor(what, s, timeout_), src);
      }
      if (got.buffer.numel() != bytes) {
        return CompletedWork(
            rank_, ::c10d::OpType::RECVANYSOURCE, {t},
            ErrorFor(what,
                     absl::InvalidArgumentError(absl::StrCat(
                         "rank ", src, " sent ", got.buffer.numel(),
                         " bytes; the receive takes ", bytes)),
                     timeout_),
            src);
      }
      at::Tensor staged = Contiguous(t);
      Bytes(staged).copy_(got.buffer);
      CopyBackIfStaged(t, staged);
      return CompletedWork(rank_, ::c10d::OpType::RECVANYSOURCE, {t}, nullptr,
                           src);
    }
    if (absl::Now() >= deadline) {
      return CompletedWork(rank_, ::c10d::OpType::RECVANYSOURCE, {t},
                           ErrorFor(what,
                                    absl::DeadlineExceededError(
                                        "no rank sent within the timeout"),
                                    timeout_));
    }
    absl::SleepFor(nap);
    nap = std::min(nap * 2, absl::Milliseconds(1));
  }
}

ProcessGroupShoal::WorkPtr ProcessGroupShoal::RecvFrom(at::Tensor t, int src) {
  const std::string what = "recv";
  auto it = posted_.find(src);
  at::Tensor staged = Contiguous(t);
  if (it == posted_.end()) {
    const Payload p = MovePayload(staged);
    void* dst = staged.data_ptr();
    collectives::Communicator* comm = comm_.get();
    Launch l{what, ::c10d::OpType::RECV, ::c10d::kUnsetTimeout, {}, {t}};
    l.keep_alive = {staged};
    l.finish = [t, staged]() mutable { CopyBackIfStaged(t, staged); };
    l.issue = [=](const collectives::CallOptions& call) {
      return comm->RecvAsync(dst, p.count, p.dtype, src, call);
    };
    return Run(std::move(l));
  }
  // recvAnysource's receive posted there: it holds this message.
  Posted got = std::move(it->second);
  posted_.erase(it);
  const int64_t bytes = t.numel() * int64_t(t.element_size());
  absl::Status s = got.work.Wait();
  if (s.ok() && got.buffer.numel() != bytes) {
    s = absl::InvalidArgumentError(
        absl::StrCat("rank ", src, " sent ", got.buffer.numel(),
                     " bytes; the receive takes ", bytes));
  }
  if (s.ok()) {
    Bytes(staged).copy_(got.buffer);
    CopyBackIfStaged(t, staged);
  }
  return CompletedWork(rank_, ::c10d::OpType::RECV, {t},
                       s.ok() ? nullptr : ErrorFor(what, s, timeout_));
}

// ---- monitored barrier
// -----------------------------------------------------------

void ProcessGroupShoal::monitoredBarrier(const ::c10d::BarrierOptions& opts,
                                         bool wait_all_ranks) {
  const std::chrono::milliseconds timeout = TimeoutOr(opts.timeout);
  collectives::CallOptions call;
  call.timeout = absl::FromChrono(timeout);
  uint8_t byte = 1;
  if (rank_ != 0) {
    // Arrive at rank 0, then wait for its release.
    absl::Status s = comm_->Send(&byte, 1, DType::kU8, 0, call);
    if (s.ok()) s = comm_->Recv(&byte, 1, DType::kU8, 0, call);
    if (!s.ok()) {
      throw std::runtime_error(absl::StrCat(
          "shoal monitoredBarrier: Rank ", rank_,
          " successfully reached monitoredBarrier, but received errors while "
          "waiting for send/recv from rank 0. Please check rank 0 logs for "
          "faulty rank: ",
          ErrorMessage("monitoredBarrier", s, timeout)));
    }
    return;
  }
  // Rank 0: every other rank's arrival within the timeout (one deadline
  // for all), in rank order.
  std::vector<uint8_t> got(size_);
  std::vector<collectives::Work> arrivals;
  for (int r = 1; r < size_; ++r) {
    absl::StatusOr<collectives::Work> w =
        comm_->RecvAsync(&got[r], 1, DType::kU8, r, call);
    ThrowIfError("monitoredBarrier", w.status());
    arrivals.push_back(*std::move(w));
  }
  const absl::Time deadline = absl::Now() + absl::FromChrono(timeout);
  std::vector<int> missing;
  for (int r = 1; r < size_; ++r) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration() && !wait_all_ranks) {
      // Rank 0's own time ran out before it could wait for rank r (gloo's
      // message).
      throw std::runtime_error(absl::StrCat(
          "shoal monitoredBarrier: Rank 0 timed out in monitoredBarrier after ",
          absl::ToInt64Milliseconds(absl::FromChrono(timeout) - left),
          " ms. Original timeout: ", timeout.count(), " ms (Timed out waiting ",
          timeout.count(), "ms for rank ", r, ")"));
    }
    const absl::Status s =
        arrivals[r - 1].Wait(std::max(absl::ZeroDuration(), left));
    if (s.ok()) continue;
    missing.push_back(r);
    if (!wait_all_ranks) {
      throw std::runtime_error(
          absl::StrCat("shoal monitoredBarrier: [Rank 0]: Rank ", r,
                       " failed to pass monitoredBarrier in ", timeout.count(),
                       " ms (Timed out waiting ", timeout.count(),
                       "ms: ", s.message(), ")"));
    }
  }
  if (!missing.empty()) {
    throw std::runtime_error(absl::StrCat(
        "shoal monitoredBarrier: [Rank 0]: Ranks ",
        absl::StrJoin(missing, ", "), " failed to pass monitoredBarrier in ",
        timeout.count(), " ms (Timed out waiting ", timeout.count(), "ms)"));
  }
  std::vector<collectives::Work> releases;
  for (int r = 1; r < size_; ++r) {
    absl::StatusOr<collectives::Work> w =
        comm_->SendAsync(&byte, 1, DType::kU8, r, call);
    ThrowIfError("monitoredBarrier", w.status());
    releases.push_back(*std::move(w));
  }
  for (collectives::Work& w : releases) {
    const absl::Status s = w.Wait();
    if (!s.ok()) {
      throw std::runtime_error(ErrorMessage("monitoredBarrier", s, timeout));
    }
  }
}

// ---- sparse all_reduce
// -----------------------------------------------------------

ProcessGroupShoal::WorkPtr ProcessGroupShoal::SparseAllReduce(
    at::Tensor& t, const ::c10d::AllreduceOptions& opts) {
  const std::string what = "allreduce";
  if (static_cast<RedOpType>(opts.reduceOp) != RedOpType::SUM) {
    Refuse(what, absl::StrCat("sparse tensors take ReduceOp SUM only, not ",
                              RedOpName(opts.reduceOp)));
  }
  if (!t.is_cpu()) Refuse(what, "sparse tensors on the CPU only");
  if (t.layout() != at::kSparse) {
    Refuse(what, "sparse tensors in the COO layout only");
  }
  const std::chrono::milliseconds timeout = TimeoutOr(opts.timeout);
  collectives::CallOptions call;
  call.timeout = absl::FromChrono(timeout);
  at::Tensor input = t.coalesce();
  at::Tensor indices = input._indices().contiguous();  // sparse_dim x nnz
  at::Tensor values = input._values().contiguous();    // nnz x dense dims
  const int64_t nnz = input._nnz();
  const int64_t sparse_dim = input.sparse_dim();
  // Every rank's nnz (and shape, which must agree), then every rank's
  // indices and values padded to the largest nnz.
  const int64_t dims = input.dim();
  at::Tensor meta = at::empty({1 + dims}, at::kLong);
  meta[0] = nnz;
  for (int64_t d = 0; d < dims; ++d) meta[1 + d] = input.size(d);
  at::Tensor metas = at::empty({size_, 1 + dims}, at::kLong);
  absl::Status s = comm_->AllGather(meta.data_ptr(), metas.data_ptr(), 1 + dims,
                                    DType::kI64, call);
  if (!s.ok()) {
    return CompletedWork(rank_, ::c10d::OpType::ALLREDUCE, {t},
                         ErrorFor(what, s, timeout));
  }
  int64_t max_nnz = 0;
  for (int r = 0; r < size_; ++r) {
    max_nnz = std::max(max_nnz, metas[r][0].item<int64_t>());
    if (!metas[r].narrow(0, 1, dims).equal(meta.narrow(0, 1, dims))) {
      Refuse(what,
             absl::StrCat("rank ", r, "'s sparse tensor has another shape"));
    }
  }
  at::Tensor my_idx = at::zeros({sparse_dim, max_nnz}, at::kLong);
  my_idx.narrow(1, 0, nnz).copy_(indices);
  std::vector<int64_t> vshape(values.sizes().begin(), values.sizes().end());
  vshape[0] = max_nnz;
  at::Tensor my_val = at::zeros(vshape, values.options());
  if (nnz > 0) my_val.narrow(0, 0, nnz).copy_(values);
  at::Tensor all_idx = at::empty({size_, sparse_dim, max_nnz}, at::kLong);
  std::vector<int64_t> all_vshape = {size_};
  all_vshape.insert(all_vshape.end(), vshape.begin(), vshape.end());
  at::Tensor all_val = at::empty(all_vshape, values.options());
  const Payload vp = MovePayload(my_val);
  s = comm_->AllGather(my_idx.data_ptr(), all_idx.data_ptr(), my_idx.numel(),
                       DType::kI64, call);
  if (s.ok() && vp.count > 0) {
    s = comm_->AllGather(my_val.data_ptr(), all_val.data_ptr(), vp.count,
                         vp.dtype, call);
  }
  if (!s.ok()) {
    return CompletedWork(rank_, ::c10d::OpType::ALLREDUCE, {t},
                         ErrorFor(what, s, timeout));
  }
  at::Tensor sum;
  for (int r = 0; r < size_; ++r) {
    const int64_t n = metas[r][0].item<int64_t>();
    at::Tensor part = at::sparse_coo_tensor(all_idx[r].narrow(1, 0, n),
                                            all_val[r].narrow(0, 0, n),
                                            input.sizes(), input.options());
    sum = r == 0 ? part : sum + part;
  }
  sum = sum.coalesce();
  t.copy_(sum);
  return CompletedWork(rank_, ::c10d::OpType::ALLREDUCE, {t}, nullptr);
}

}  // namespace shoal::torch_backend
