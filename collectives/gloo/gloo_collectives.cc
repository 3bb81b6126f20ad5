// GlooCommunicator's collectives and point-to-point calls: gloo's
// algorithms on unbound buffers the call registers (RunningBuffers) so that
// Abort can wake their waits. The small all_reduce's exchange is in
// gloo_exchange.cc; creation and failure in gloo_communicator.cc.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "collectives/gloo/gloo_communicator.h"
#include "collectives/reduce/reduce_kernels.h"
#include "gloo/allgather.h"
#include "gloo/allreduce.h"
#include "gloo/alltoall.h"
#include "gloo/barrier.h"
#include "gloo/broadcast.h"
#include "gloo/common/error.h"
#include "gloo/reduce.h"
#include "gloo/transport/unbound_buffer.h"

namespace shoal::collectives {

namespace {

// Point-to-point messages use one slot of their own, outside the range of
// gloo's collectives (whose slots carry a prefix byte 0x01..0x08 on top):
// between a pair, messages on one slot match in the order sent.
constexpr uint64_t kP2pSlot = uint64_t{0x40} << 56;

// Calls `f.template operator()<T>()` with an unsigned T of the dtype's size:
// gloo moves bytes and needs only the element size.
template <typename F>
void WithElementType(DType dtype, F&& f) {
  switch (DTypeSize(dtype)) {
    case 1:
      f(uint8_t{});
      break;
    case 2:
      f(uint16_t{});
      break;
    case 4:
      f(uint32_t{});
      break;
    default:
      f(uint64_t{});
      break;
  }
}

// gloo's reduction callback running shoal's kernels. kAvg reduces as a sum
// (the caller divides once at the end).
gloo::AllreduceOptions::Func ReduceFunc(DType dtype, ReduceOp op) {
  const ReduceOp combine = op == ReduceOp::kAvg ? ReduceOp::kSum : op;
  return [dtype, combine](void* out, const void* a, const void* b, size_t n) {
    // ReduceN allows out == in[0] only; the ops are commutative.
    if (out == b && out != a) std::swap(a, b);
    const void* inputs[2] = {a, b};
    absl::Status s =
        ReduceN(dtype, combine, inputs, 2, out, static_cast<int64_t>(n), 1);
    if (!s.ok()) throw gloo::Exception(s.ToString());
  };
}

// Hands `output` and, unless null, `input` to gloo's options typed by
// `dtype` (the caller registered both with RunningBuffers first).
template <typename Options>
void SetTypedBuffers(Options& opts, DType dtype,
                     std::unique_ptr<gloo::transport::UnboundBuffer> input,
                     std::unique_ptr<gloo::transport::UnboundBuffer> output) {
  WithElementType(dtype, [&](auto zero) {
    using T = decltype(zero);
    if (input != nullptr) opts.template setInput<T>(std::move(input));
    opts.template setOutput<T>(std::move(output));
  });
}

// gloo's options whose internal buffer RunningBuffers must see.
class WatchableBarrierOptions : public gloo::BarrierOptions {
 public:
  using gloo::BarrierOptions::BarrierOptions;
  gloo::transport::UnboundBuffer* internal_buffer() { return buffer.get(); }
};

}  // namespace

absl::Status GlooCommunicator::AllReduce(const void* in, void* out,
                                         int64_t count, DType dtype,
                                         ReduceOp op, absl::Duration timeout) {
  SHOAL_RETURN_IF_ERROR(CheckArgs("all_reduce", count, dtype, true));
  if (count == 0) return Usable();
  SHOAL_RETURN_IF_ERROR(
      Guarded("all_reduce", timeout, [&](std::chrono::milliseconds t) {
        gloo::AllreduceOptions opts(context_);
        std::unique_ptr<gloo::transport::UnboundBuffer> output =
            context_->createUnboundBuffer(out, count * DTypeSize(dtype));
        gloo::transport::UnboundBuffer* running = output.get();
        WithElementType(dtype, [&](auto zero) {
          using T = decltype(zero);
          if (in != out) {
            opts.setInput(const_cast<T*>(static_cast<const T*>(in)), count);
          }
          opts.template setOutput<T>(std::move(output));
        });
        // Abort may wake it until it is unregistered (before opts, which
        // owns it, goes).
        RunningBuffers registered(this, {running});
        opts.setReduceFunction(ReduceFunc(dtype, op));
        opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
        opts.setTimeout(t);
        gloo::allreduce(opts);
      }));
  if (op == ReduceOp::kAvg) return DivideInPlace(dtype, out, count, world_);
  return absl::OkStatus();
}

absl::Status GlooCommunicator::Broadcast(const void* in, void* out,
                                         int64_t count, DType dtype, int root,
                                         absl::Duration timeout) {
  SHOAL_RETURN_IF_ERROR(CheckArgs("broadcast", count, dtype, false));
  if (root < 0 || root >= world_)
    return absl::InvalidArgumentError(absl::StrCat("broadcast: root ", root));
  if (count == 0) return Usable();
  const size_t bytes = count * DTypeSize(dtype);
  return Guarded("broadcast", timeout, [&](std::chrono::milliseconds t) {
    gloo::BroadcastOptions opts(context_);
    auto output = context_->createUnboundBuffer(out, bytes);
    std::unique_ptr<gloo::transport::UnboundBuffer> input;
    if (rank_ == root && in != out) {
      input = context_->createUnboundBuffer(const_cast<void*>(in), bytes);
    }
    RunningBuffers registered(this, {output.get(), input.get()});
    SetTypedBuffers(opts, dtype, std::move(input), std::move(output));
    opts.setRoot(root);
    opts.setTimeout(t);
    gloo::broadcast(opts);
  });
}

absl::Status GlooCommunicator::Reduce(const void* in, void* out, int64_t count,
                                      DType dtype, ReduceOp op, int root,
                                      absl::Duration timeout) {
  SHOAL_RETURN_IF_ERROR(CheckArgs("reduce", count, dtype, true));
  if (root < 0 || root >= world_)
    return absl::InvalidArgumentError(absl::StrCat("reduce: root ", root));
  if (count == 0) return Usable();
  // gloo works in every rank's output: the others get a scratch buffer.
  const size_t bytes = count * DTypeSize(dtype);
  std::vector<uint8_t> scratch;
  void* target = out;
  if (rank_ != root) {
    scratch.resize(bytes);
    target = scratch.data();
  }
  SHOAL_RETURN_IF_ERROR(
      Guarded("reduce", timeout, [&](std::chrono::milliseconds t) {
        gloo::ReduceOptions opts(context_);
        auto output = context_->createUnboundBuffer(target, bytes);
        std::unique_ptr<gloo::transport::UnboundBuffer> input;
        if (in != target) {
          input = context_->createUnboundBuffer(const_cast<void*>(in), bytes);
        }
        RunningBuffers registered(this, {output.get(), input.get()});
        SetTypedBuffers(opts, dtype, std::move(input), std::move(output));
        opts.setRoot(root);
        opts.setReduceFunction(ReduceFunc(dtype, op));
        opts.setTimeout(t);
        gloo::reduce(opts);
      }));
  if (rank_ == root && op == ReduceOp::kAvg)
    return DivideInPlace(dtype, out, count, world_);
  return absl::OkStatus();
}

absl::Status GlooCommunicator::AllGather(const void* in, void* out,
                                         int64_t count, DType dtype,
                                         absl::Duration timeout) {
  SHOAL_RETURN_IF_ERROR(CheckArgs("all_gather", count, dtype, false));
  if (count == 0) return Usable();
  const size_t block = count * DTypeSize(dtype);
  const bool in_place = in == static_cast<uint8_t*>(out) + rank_ * block;
  return Guarded("all_gather", timeout, [&](std::chrono::milliseconds t) {
    gloo::AllgatherOptions opts(context_);
    auto output = context_->createUnboundBuffer(out, block * world_);
    std::unique_ptr<gloo::transport::UnboundBuffer> input;
    if (!in_place) {
      input = context_->createUnboundBuffer(const_cast<void*>(in), block);
    }
    RunningBuffers registered(this, {output.get(), input.get()});
    SetTypedBuffers(opts, dtype, std::move(input), std::move(output));
    opts.setTimeout(t);
    gloo::allgather(opts);
  });
}

absl::Status GlooCommunicator::ReduceScatter(const void* in, void* out,
                                             int64_t count, DType dtype,
                                             ReduceOp op,
                                             absl::Duration timeout) {
  SHOAL_RETURN_IF_ERROR(CheckArgs("reduce_scatter", count, dtype, true));
  if (count == 0) return Usable();
  const size_t block = count * DTypeSize(dtype);
  std::vector<uint8_t> all(block * world_);
  SHOAL_RETURN_IF_ERROR(
      AllReduce(in, all.data(), count * world_, dtype, op, timeout));
  std::memmove(out, all.data() + rank_ * block, block);
  return absl::OkStatus();
}

absl::Status GlooCommunicator::AllToAll(const void* in, void* out,
                                        int64_t count, DType dtype,
                                        absl::Duration timeout) {
  SHOAL_RETURN_IF_ERROR(CheckArgs("all_to_all", count, dtype, false));
  if (count == 0) return Usable();
  const size_t bytes = count * DTypeSize(dtype) * world_;
  // gloo needs distinct buffers: in place goes through a copy.
  std::vector<uint8_t> copy;
  if (in == out) {
    copy.assign(static_cast<const uint8_t*>(in),
                static_cast<const uint8_t*>(in) + bytes);
    in = copy.data();
  }
  return Guarded("all_to_all", timeout, [&](std::chrono::milliseconds t) {
    gloo::AlltoallOptions opts(context_);
    auto input = context_->createUnboundBuffer(const_cast<void*>(in), bytes);
    auto output = context_->createUnboundBuffer(out, bytes);
    RunningBuffers registered(this, {output.get(), input.get()});
    WithElementType(dtype, [&](auto zero) {
      using T = decltype(zero);
      opts.template setInput<T>(std::move(input));
      opts.template setOutput<T>(std::move(output));
    });
    opts.setTimeout(t);
    gloo::alltoall(opts);
  });
}

absl::Status GlooCommunicator::Send(const void* in, int64_t count, DType dtype,
                                    int peer, absl::Duration timeout) {
  SHOAL_RETURN_IF_ERROR(CheckArgs("send", count, dtype, false));
  if (peer < 0 || peer >= world_ || peer == rank_)
    return absl::InvalidArgumentError(absl::StrCat("send: peer ", peer));
  if (count == 0) return Usable();
  return Guarded("send", timeout, [&](std::chrono::milliseconds t) {
    auto buf = context_->createUnboundBuffer(const_cast<void*>(in),
                                             count * DTypeSize(dtype));
    RunningBuffers registered(this, {buf.get()});
    buf->send(peer, kP2pSlot);
    if (!buf->waitSend(t)) throw gloo::IoException("send aborted");
  });
}

absl::Status GlooCommunicator::Recv(void* out, int64_t count, DType dtype,
                                    int peer, absl::Duration timeout) {
  SHOAL_RETURN_IF_ERROR(CheckArgs("recv", count, dtype, false));
  if (peer < 0 || peer >= world_ || peer == rank_)
    return absl::InvalidArgumentError(absl::StrCat("recv: peer ", peer));
  if (count == 0) return Usable();
  return Guarded("recv", timeout, [&](std::chrono::milliseconds t) {
    auto buf = context_->createUnboundBuffer(out, count * DTypeSize(dtype));
    RunningBuffers registered(this, {buf.get()});
    buf->recv(peer, kP2pSlot);
    if (!buf->waitRecv(t)) throw gloo::IoException("recv aborted");
  });
}

absl::Status GlooCommunicator::Barrier(absl::Duration timeout) {
  return Guarded("barrier", timeout, [&](std::chrono::milliseconds t) {
    WatchableBarrierOptions opts(context_);
    RunningBuffers registered(this, {opts.internal_buffer()});
    opts.setTimeout(t);
    gloo::barrier(opts);
  });
}

}  // namespace shoal::collectives
