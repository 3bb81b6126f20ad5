#include "collectives/gloo_communicator.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <initializer_list>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "collectives/reduce_kernels.h"
#include "gloo/allgather.h"
#include "gloo/allreduce.h"
#include "gloo/alltoall.h"
#include "gloo/barrier.h"
#include "gloo/broadcast.h"
#include "gloo/common/error.h"
#include "gloo/reduce.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/store.h"
#include "gloo/transport/tcp/device.h"
#include "gloo/transport/unbound_buffer.h"

namespace shoal::collectives {

namespace {

// Point-to-point messages use one slot of their own, outside the range of
// gloo's collectives (whose slots carry a prefix byte 0x01..0x08 on top):
// between a pair, messages on one slot match in the order sent.
constexpr uint64_t kP2pSlot = uint64_t{0x40} << 56;
// ExchangeAllReduce's messages: a slot of their own, matched in order.
constexpr uint64_t kExchangeSlot = uint64_t{0x41} << 56;

// gloo's Store over a shoal Rendezvous, its keys under a prefix. Gloo expects
// failures as exceptions; they are caught by Create.
class RendezvousStore : public gloo::rendezvous::Store {
 public:
  RendezvousStore(Rendezvous& rendezvous, std::string prefix,
                  absl::Duration timeout)
      : rendezvous_(rendezvous),
        prefix_(std::move(prefix)),
        timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    Check(rendezvous_.Set(prefix_ + key,
                          absl::string_view(data.data(), data.size())));
  }
  std::vector<char> get(const std::string& key) override {
    absl::StatusOr<std::string> v = rendezvous_.Get(prefix_ + key, timeout_);
    Check(v.status());
    return std::vector<char>(v->begin(), v->end());
  }
  void wait(const std::vector<std::string>& keys) override {
    wait(keys, std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout_)));
  }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    for (const std::string& key : keys) {
      Check(rendezvous_.Get(prefix_ + key, absl::Milliseconds(timeout.count()))
                .status());
    }
  }

 private:
  static void Check(const absl::Status& s) {
    if (!s.ok()) throw gloo::IoException(s.ToString());
  }

  Rendezvous& rendezvous_;
  const std::string prefix_;
  const absl::Duration timeout_;
};

// gloo writes to its sockets with writev, without MSG_NOSIGNAL: a write to
// a peer whose process died (its connection reset) raises SIGPIPE, whose
// default action ends this process silently — a surviving rank vanished
// instead of reporting the lost peer (the "hang" of tests/nodes' killed-node
// case). Ignored, the write fails with EPIPE and gloo reports the closed
// connection. A handler the program installed is left alone. (Python
// ignores SIGPIPE already.)
void IgnoreSigpipeUnlessHandled() {
  struct sigaction now = {};
  if (sigaction(SIGPIPE, nullptr, &now) != 0) return;
  if ((now.sa_flags & SA_SIGINFO) == 0 && now.sa_handler == SIG_DFL) {
    signal(SIGPIPE, SIG_IGN);
  }
}

std::chrono::milliseconds Millis(absl::Duration d) {
  return std::chrono::milliseconds(absl::ToInt64Milliseconds(d));
}

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

absl::Status CheckArgs(const char* what, int64_t count, DType dtype,
                       bool reduces) {
  if (count < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": negative count ", count));
  }
  if (reduces ? !IsReducible(dtype) : DTypeSize(dtype) == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": dtype ", DTypeName(dtype), " is not supported here"));
  }
  return absl::OkStatus();
}

}  // namespace

GlooCommunicator::GlooCommunicator(int rank, int world, GlooCommOptions options)
    : rank_(rank), world_(world), o_(std::move(options)) {}

GlooCommunicator::~GlooCommunicator() {
  {
    MutexLock lock(&mu_);
    stop_watching_ = true;
    watch_cv_.SignalAll();
  }
  if (watcher_.joinable()) watcher_.join();
}

void GlooCommunicator::StartWatching() {
  MutexLock lock(&mu_);
  if (watcher_.joinable()) return;
  watcher_ = std::thread([this] { Watch(); });
}

void GlooCommunicator::Watch() {
  // As HierarchicalCommunicator's watcher: often enough to fail well within
  // any timeout, with the same grace for a call that succeeded just as its
  // peer closed.
  constexpr absl::Duration kPoll = absl::Milliseconds(10);
  constexpr absl::Duration kLostGrace = absl::Milliseconds(200);
  while (true) {
    {
      MutexLock lock(&mu_);
      while (!stop_watching_ && calls_running_ == 0) watch_cv_.Wait(&mu_);
      if (stop_watching_) return;
      watch_cv_.WaitWithDeadline(&mu_, absl::Now() + kPoll);
      if (stop_watching_) return;
    }
    CheckConnections(kLostGrace).IgnoreError();
  }
}

void GlooCommunicator::WakeRunning() {
  for (gloo::transport::UnboundBuffer* b : running_) {
    b->abortWaitSend();
    b->abortWaitRecv();
  }
}

absl::StatusOr<std::unique_ptr<GlooCommunicator>> GlooCommunicator::Create(
    Rendezvous& rendezvous, const std::string& name, int rank, int world,
    const GlooCommOptions& options) {
  if (world < 1 || rank < 0 || rank >= world) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gloo communicator '", name, "': rank ", rank, " of world ", world));
  }
  if (options.hostname.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gloo communicator '", name, "': no address to listen on"));
  }
  IgnoreSigpipeUnlessHandled();
  std::unique_ptr<GlooCommunicator> comm(
      new GlooCommunicator(rank, world, options));
  const std::string prefix = absl::StrCat("__shoal/gloo/", name, "/");
  try {
    gloo::transport::tcp::attr attr(options.hostname.c_str());
    comm->device_ = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, world);
    context->setTimeout(Millis(options.timeout));
    RendezvousStore store(rendezvous, prefix, options.timeout);
    context->connectFullMesh(store, comm->device_);
    comm->connections_ = GlooConnections::Find(*context, rank);
    comm->context_ = std::move(context);
  } catch (const std::exception& e) {
    const std::string why = e.what();
    const bool late = absl::StrContains(why, "DEADLINE_EXCEEDED") ||
                      absl::StrContains(why, "Timed out");
    return absl::Status(
        late ? absl::StatusCode::kDeadlineExceeded
             : absl::StatusCode::kUnavailable,
        absl::StrCat("gloo communicator '", name, "' (rank ", rank, " of ",
                     world, " at ", options.hostname, "): ", why));
  }
  // Everyone has read every address: the keys can go.
  SHOAL_RETURN_IF_ERROR(rendezvous.Barrier(absl::StrCat(prefix, "connected"),
                                           world, options.timeout));
  SHOAL_RETURN_IF_ERROR(rendezvous.Delete(absl::StrCat(prefix, rank)));
  return comm;
}

// ---- failure ---------------------------------------------------------------

absl::Status GlooCommunicator::Usable() {
  MutexLock lock(&mu_);
  if (failure_.ok()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("this communicator failed earlier and cannot be used: ",
                   failure_.message()));
}

absl::Status GlooCommunicator::Abort(absl::Status why) {
  {
    MutexLock lock(&mu_);
    if (!failure_.ok()) return failure_;
    failure_ = why;
    if (calls_running_ > 0) {
      // A call runs on another thread. Closing the pairs under it would
      // take away the end of file a dead peer's socket still delivers to
      // the waits gloo keeps internally (they would last until the
      // timeout); instead wake its waits on its own output buffer (gloo
      // forgets a send queued on a connection that then broke) and let the
      // call close the pairs as it returns the failure (Guarded).
      WakeRunning();
      return why;
    }
  }
  CloseConnections();
  return why;
}

absl::Status GlooCommunicator::CheckConnections(absl::Duration grace) {
  {
    MutexLock lock(&mu_);
    // Failed with a call still inside gloo: an algorithm whose wait was
    // woken may wait again (each abort wakes one wait).
    if (!failure_.ok() && calls_running_ > 0) WakeRunning();
    if (calls_running_ == 0 || !failure_.ok()) {
      lost_since_ = absl::InfiniteFuture();
      return absl::OkStatus();
    }
  }
  const std::optional<GlooConnections::Socket> lost = connections_.FirstLost();
  const absl::Time now = absl::Now();
  {
    MutexLock lock(&mu_);
    if (!lost.has_value() || lost_under_call_ != calls_started_ ||
        lost_since_ == absl::InfiniteFuture()) {
      lost_since_ = lost.has_value() ? now : absl::InfiniteFuture();
      lost_under_call_ = calls_started_;
      return absl::OkStatus();
    }
    if (now - lost_since_ < grace || calls_running_ == 0) {
      return absl::OkStatus();
    }
  }
  std::string who = absl::StrCat("rank ", lost->peer);
  auto name = o_.peer_names.find(lost->address);
  if (name != o_.peer_names.end()) {
    absl::StrAppend(&who, " — the peer at ", lost->address, " is ",
                    name->second);
  } else if (!lost->address.empty()) {
    absl::StrAppend(&who, " at ", lost->address);
  }
  return Abort(absl::UnavailableError(absl::StrCat(
      "over gloo: lost the connection to ", who,
      " while a call waited on it: it died, or its rank gave up")));
}

void GlooCommunicator::CloseConnections() {
  // Peers' pending operations with this rank fail with "connection closed"
  // now.
  try {
    if (context_ != nullptr) context_->closeConnections();
  } catch (const std::exception&) {
    // Already closed or broken: nothing more to do.
  }
}

absl::Status GlooCommunicator::Translate(const char* what,
                                         const std::string& message,
                                         absl::Duration timeout) const {
  const bool late = absl::StrContains(message, "Timed out") ||
                    absl::StrContains(message, "timed out");
  std::string who;
  for (const auto& [address, name] : o_.peer_names) {
    if (absl::StrContains(message, absl::StrCat("[", address, "]")) ||
        absl::StrContains(message, absl::StrCat(address, ":"))) {
      who = absl::StrCat(" — the peer at ", address, " is ", name);
      break;
    }
  }
  if (late) {
    return absl::DeadlineExceededError(
        absl::StrCat(what, " over gloo: a peer did not answer within ",
                     absl::FormatDuration(timeout), who, " (", message, ")"));
  }
  return absl::UnavailableError(
      absl::StrCat(what, " over gloo: lost a peer", who, " (", message,
                   "): it died, or its rank gave up"));
}

template <typename Body>
absl::Status GlooCommunicator::Guarded(const char* what, absl::Duration timeout,
                                       Body body) {
  SHOAL_RETURN_IF_ERROR(Usable());
  if (timeout == absl::ZeroDuration()) timeout = o_.timeout;
  {
    MutexLock lock(&mu_);
    ++calls_running_;
    ++calls_started_;
    watch_cv_.SignalAll();
  }
  absl::Status thrown;
  try {
    body(Millis(timeout));
  } catch (const std::exception& e) {
    thrown = Translate(what, e.what(), timeout);
  }
  absl::Status failure;
  {
    MutexLock lock(&mu_);
    --calls_running_;
    if (!thrown.ok() && failure_.ok()) failure_ = thrown;
    // Aborted from another thread meanwhile, a step may have returned
    // without its data: the call failed too.
    failure = failure_;
  }
  if (!failure.ok()) CloseConnections();
  return failure;
}

// ---- collectives -----------------------------------------------------------

// Registers a call's buffers (null ones skipped) for Abort while it lives.
// Declared after the gloo options that own the buffers, so that it goes
// first.
class GlooCommunicator::RunningBuffers {
 public:
  RunningBuffers(GlooCommunicator* comm,
                 std::initializer_list<gloo::transport::UnboundBuffer*> bufs)
      : comm_(comm) {
    for (gloo::transport::UnboundBuffer* b : bufs) {
      if (b != nullptr) bufs_.push_back(b);
    }
    MutexLock lock(&comm_->mu_);
    comm_->running_.insert(comm_->running_.end(), bufs_.begin(), bufs_.end());
  }
  ~RunningBuffers() {
    MutexLock lock(&comm_->mu_);
    for (gloo::transport::UnboundBuffer* b : bufs_) {
      auto it = std::find(comm_->running_.begin(), comm_->running_.end(), b);
      if (it != comm_->running_.end()) comm_->running_.erase(it);
    }
  }

 private:
  GlooCommunicator* const comm_;
  std::vector<gloo::transport::UnboundBuffer*> bufs_;
};

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

absl::Status GlooCommunicator::ExchangeAllReduce(const void* in, void* out,
                                                 int64_t count, DType dtype,
                                                 ReduceOp op,
                                                 absl::Duration timeout) {
  SHOAL_RETURN_IF_ERROR(CheckArgs("all_reduce", count, dtype, true));
  const size_t bytes = count * DTypeSize(dtype);
  if (bytes > o_.exchange_bytes || world_ > kMaxReduceInputs) {
    return AllReduce(in, out, count, dtype, op, timeout);
  }
  if (count == 0) return Usable();
  const ReduceOp combine = op == ReduceOp::kAvg ? ReduceOp::kSum : op;
  absl::Status reduced;
  SHOAL_RETURN_IF_ERROR(
      Guarded("all_reduce", timeout, [&](std::chrono::milliseconds t) {
        EnsureExchangeBuffers();
        RunningBuffers registered(this,
                                  {exchange_send_.get(), exchange_recv_.get()});
        std::memcpy(exchange_send_storage_.data(), in, bytes);
        // The receives were posted at the end of the last call: the sends
        // go out at once, from this thread, without gloo's
        // ready-to-receive round trip.
        for (int peer = 0; peer < world_; ++peer) {
          if (peer != rank_) {
            exchange_send_->send(peer, kExchangeSlot, 0, bytes);
          }
        }
        for (int i = 1; i < world_; ++i) {
          if (!exchange_recv_->waitRecv(t)) throw gloo::IoException("aborted");
        }
        for (int i = 1; i < world_; ++i) {
          if (!exchange_send_->waitSend(t)) throw gloo::IoException("aborted");
        }
        // Every rank reduces the same inputs in the same (rank) order.
        std::vector<const void*> inputs(world_);
        for (int r = 0; r < world_; ++r) {
          inputs[r] = r == rank_
                          ? exchange_send_storage_.data()
                          : exchange_recv_storage_.data() +
                                static_cast<size_t>(r) * o_.exchange_bytes;
        }
        reduced = ReduceN(dtype, combine, inputs.data(), world_, out, count, 1);
        // Only now may the peers' next messages land in the staging.
        PostExchangeReceives();
      }));
  SHOAL_RETURN_IF_ERROR(reduced);
  if (op == ReduceOp::kAvg) return DivideInPlace(dtype, out, count, world_);
  return absl::OkStatus();
}

void GlooCommunicator::EnsureExchangeBuffers() {
  if (exchange_send_ != nullptr) return;
  exchange_send_storage_.assign(o_.exchange_bytes, 0);
  exchange_recv_storage_.assign(o_.exchange_bytes * world_, 0);
  exchange_send_ = context_->createUnboundBuffer(exchange_send_storage_.data(),
                                                 exchange_send_storage_.size());
  exchange_recv_ = context_->createUnboundBuffer(exchange_recv_storage_.data(),
                                                 exchange_recv_storage_.size());
  PostExchangeReceives();
}

void GlooCommunicator::PostExchangeReceives() {
  // Sized for the largest message: a peer's smaller one fits (gloo checks
  // that a message is no longer than the receive it lands in). Gloo holds
  // the buffer weakly: one destroyed with a receive still posted is skipped.
  for (int peer = 0; peer < world_; ++peer) {
    if (peer == rank_) continue;
    exchange_recv_->recv(peer, kExchangeSlot, peer * o_.exchange_bytes,
                         o_.exchange_bytes);
  }
}

namespace {

// gloo's options whose internal buffer RunningBuffers must see.
class WatchableBarrierOptions : public gloo::BarrierOptions {
 public:
  using gloo::BarrierOptions::BarrierOptions;
  gloo::transport::UnboundBuffer* internal_buffer() { return buffer.get(); }
};

}  // namespace

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
    WithElementType(dtype, [&](auto zero) {
      using T = decltype(zero);
      if (input != nullptr) opts.template setInput<T>(std::move(input));
      opts.template setOutput<T>(std::move(output));
    });
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
        WithElementType(dtype, [&](auto zero) {
          using T = decltype(zero);
          if (input != nullptr) opts.template setInput<T>(std::move(input));
          opts.template setOutput<T>(std::move(output));
        });
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
    WithElementType(dtype, [&](auto zero) {
      using T = decltype(zero);
      if (input != nullptr) opts.template setInput<T>(std::move(input));
      opts.template setOutput<T>(std::move(output));
    });
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
