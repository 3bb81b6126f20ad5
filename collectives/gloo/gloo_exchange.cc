// GlooCommunicator::ExchangeAllReduce: a small all_reduce in one exchange,
// each rank sending its input to every other and reducing all of them in
// rank order. Two transports, both gloo's TCP pairs:
//   - sync mode (when the communicator was created with `sync_exchange`),
//     a chunk at a time: pairs of a second gloo context
//     switched to gloo's synchronous mode (Pair::setSync), with the old
//     Buffer API. The caller's thread writes to the peers' sockets and reads
//     its own: no hand-off through gloo's event-loop thread and a condition
//     variable (two thread wake-ups per message, each a scheduler delay on
//     a loaded machine). A blocking read cannot be woken by gloo's
//     abortWaitRecv; Abort shuts the sockets down instead (ShutdownSync),
//     and each call sets the sockets' SO_RCVTIMEO/SO_SNDTIMEO to its timeout.
//   - otherwise: unbound buffers registered once, the next call's receives
//     posted as a call ends (so a peer's send goes out at once).
#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "base/status_macros.h"
#include "collectives/gloo/gloo_communicator.h"
#include "collectives/reduce/reduce_kernels.h"
#include "gloo/common/error.h"
#include "gloo/context.h"
#include "gloo/transport/buffer.h"
#include "gloo/transport/unbound_buffer.h"

namespace shoal::collectives {

namespace {

// ExchangeAllReduce's messages: a slot of their own, matched in order.
constexpr uint64_t kExchangeSlot = uint64_t{0x41} << 56;
// The sync-mode exchange's buffers (gloo's old Buffer API: an int slot, in
// a context of their own).
constexpr int kSyncSlot = 0x5359;

}  // namespace

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
  if (sync_context_ != nullptr) {
    SHOAL_RETURN_IF_ERROR(
        Guarded("all_reduce", timeout, [&](std::chrono::milliseconds t) {
          reduced = SyncExchange(in, out, count, dtype, combine, t);
        }));
  } else {
    SHOAL_RETURN_IF_ERROR(
        Guarded("all_reduce", timeout, [&](std::chrono::milliseconds t) {
          reduced = UnboundExchange(in, out, count, dtype, combine, t);
        }));
  }
  SHOAL_RETURN_IF_ERROR(reduced);
  if (op == ReduceOp::kAvg) return DivideInPlace(dtype, out, count, world_);
  return absl::OkStatus();
}

absl::Status GlooCommunicator::UnboundExchange(const void* in, void* out,
                                               int64_t count, DType dtype,
                                               ReduceOp combine,
                                               std::chrono::milliseconds t) {
  const size_t bytes = count * DTypeSize(dtype);
  exchange_times_.Start();
  EnsureExchangeBuffers();
  RunningBuffers registered(this, {exchange_send_.get(), exchange_recv_.get()});
  std::memcpy(exchange_send_storage_.data(), in, bytes);
  // The receives were posted at the end of the last call: the sends
  // go out at once, from this thread, without gloo's
  // ready-to-receive round trip.
  for (int peer = 0; peer < world_; ++peer) {
    if (peer != rank_) {
      exchange_send_->send(peer, kExchangeSlot, 0, bytes);
    }
  }
  exchange_times_.Lap(0);
  for (int i = 1; i < world_; ++i) {
    if (!exchange_recv_->waitRecv(t)) throw gloo::IoException("aborted");
  }
  exchange_times_.Lap(1);
  for (int i = 1; i < world_; ++i) {
    if (!exchange_send_->waitSend(t)) throw gloo::IoException("aborted");
  }
  exchange_times_.Lap(2);
  // Every rank reduces the same inputs in the same (rank) order.
  std::vector<const void*> inputs(world_);
  for (int r = 0; r < world_; ++r) {
    inputs[r] = r == rank_ ? exchange_send_storage_.data()
                           : exchange_recv_storage_.data() +
                                 static_cast<size_t>(r) * o_.exchange_bytes;
  }
  absl::Status reduced =
      ReduceN(dtype, combine, inputs.data(), world_, out, count, 1);
  // Only now may the peers' next messages land in the staging.
  PostExchangeReceives();
  exchange_times_.Lap(3);
  return reduced;
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

absl::Status GlooCommunicator::SyncExchange(const void* in, void* out,
                                            int64_t count, DType dtype,
                                            ReduceOp combine,
                                            std::chrono::milliseconds t) {
  const int64_t chunk =
      static_cast<int64_t>(kSyncChunkBytes) / DTypeSize(dtype);
  auto none = [](int64_t) { return absl::OkStatus(); };
  exchange_times_.Start();
  exchange_times_.Lap(0);
  absl::Status s =
      SyncChunks(static_cast<const uint8_t*>(in), static_cast<uint8_t*>(out),
                 count, chunk, chunk, dtype, combine, t, none, none);
  exchange_times_.Lap(1);
  exchange_times_.Lap(2);
  exchange_times_.Lap(3);
  return s;
}

absl::Status GlooCommunicator::PipelinedExchange(
    void* base, int64_t count, int64_t piece, int64_t stride, DType dtype,
    ReduceOp op, absl::Duration timeout,
    absl::FunctionRef<absl::Status(int64_t)> ready,
    absl::FunctionRef<absl::Status(int64_t)> done) {
  SHOAL_RETURN_IF_ERROR(CheckArgs("all_reduce", count, dtype, true));
  if (sync_context_ == nullptr || op == ReduceOp::kAvg || piece <= 0 ||
      static_cast<uint64_t>(piece * DTypeSize(dtype)) > kSyncChunkBytes) {
    return absl::InvalidArgumentError(
        "pipelined exchange: needs the sync exchange, a piece of at most "
        "one chunk and a reduction other than avg");
  }
  if (count == 0) return Usable();
  absl::Status reduced;
  SHOAL_RETURN_IF_ERROR(
      Guarded("all_reduce", timeout, [&](std::chrono::milliseconds t) {
        auto* p = static_cast<uint8_t*>(base);
        reduced =
            SyncChunks(p, p, count, piece, stride, dtype, op, t, ready, done);
      }));
  return reduced;
}

absl::Status GlooCommunicator::SyncChunks(
    const uint8_t* src, uint8_t* dst, int64_t count, int64_t piece,
    int64_t stride, DType dtype, ReduceOp combine, std::chrono::milliseconds t,
    absl::FunctionRef<absl::Status(int64_t)> ready,
    absl::FunctionRef<absl::Status(int64_t)> done) {
  const int64_t elem = DTypeSize(dtype);
  const int64_t chunks = (count + piece - 1) / piece;
  SetSyncTimeouts(t);
  // Stages chunk k (`dst` may be `src`, and a send must not see the
  // reduction) in this rank's staging of parity k % 2 and writes it to
  // every peer.
  auto send_chunk = [&](int64_t k) {
    const int64_t n = std::min(piece, count - k * piece);
    const size_t nbytes = static_cast<size_t>(n * elem);
    std::memcpy(SyncStaging(k % 2), src + k * stride * elem, nbytes);
    for (int peer = 0; peer < world_; ++peer) {
      if (peer == rank_) continue;
      sync_send_[2 * peer + k % 2]->send(0, nbytes, 0);
      sync_send_[2 * peer + k % 2]->waitSend();
    }
    // Gloo sizes a pair's send buffer to a message larger than any before
    // it (at its first send): enlarge it again after such a message.
    if (nbytes > sync_sized_for_) {
      SizeSyncSockets(/*receive=*/false);
      sync_sized_for_ = nbytes;
    }
  };
  // Two chunks in flight: chunk k+1 is written before chunk k is read, so
  // the network carries the next chunk while this rank waits for and
  // reduces this one. At most two chunks per peer are unread at once, which
  // fits in a socket's buffers (kSyncChunkBytes), so no write waits for a
  // peer that is writing too. Each read is this thread's own recv() on the
  // peer's socket, in the order sent; a chunk sent early stays in the
  // socket until this rank reads it. Every rank reduces the same chunks in
  // rank order: the same bits everywhere.
  std::vector<const void*> inputs(world_);
  SHOAL_RETURN_IF_ERROR(ready(0));
  send_chunk(0);
  for (int64_t k = 0; k < chunks; ++k) {
    sync_chunk_times_.Start();
    if (k + 1 < chunks) {
      SHOAL_RETURN_IF_ERROR(ready(k + 1));
      send_chunk(k + 1);
    }
    sync_chunk_times_.Lap(0);
    for (int peer = 0; peer < world_; ++peer) {
      if (peer != rank_) sync_recv_[peer]->waitRecv();
    }
    sync_chunk_times_.Lap(1);
    for (int r = 0; r < world_; ++r) {
      inputs[r] = r == rank_ ? SyncStaging(k % 2)
                             : sync_recv_storage_.data() +
                                   static_cast<size_t>(r) * kSyncChunkBytes;
    }
    const int64_t n = std::min(piece, count - k * piece);
    SHOAL_RETURN_IF_ERROR(ReduceN(dtype, combine, inputs.data(), world_,
                                  dst + k * stride * elem, n, 1));
    sync_chunk_times_.Lap(2);
    SHOAL_RETURN_IF_ERROR(done(k));
  }
  return absl::OkStatus();
}

void GlooCommunicator::SizeSyncSockets(bool receive) {
  // Both chunks a rank writes ahead of its reads, with the kernel's
  // per-packet overhead, must fit in what the two ends hold without the
  // peer reading. With gloo's sizes (a send buffer of one message, a
  // receive window that starts at 64 KiB and grows with use) they do not:
  // the rest of a chunk that waits for the window can go out from the
  // softirq of whichever CPU takes the window update, beside the writer's
  // own sends, so segments arrive out of order (TcpExtTCPOFOQueue) and an
  // exchange can stall for tens of milliseconds in TCP's recovery.
  // Linux doubles the value and caps it at net.core.{w,r}mem_max.
  const int bytes = static_cast<int>(kSyncSocketBytes);
  for (const GlooConnections::Socket& s : sync_connections_.sockets()) {
    if (!sync_connections_.Same(s)) continue;
    setsockopt(s.fd, SOL_SOCKET, receive ? SO_RCVBUF : SO_SNDBUF, &bytes,
               sizeof(bytes));
  }
}

void GlooCommunicator::SetSyncTimeouts(std::chrono::milliseconds t) {
  // Each call's deadline differs by the little its earlier steps took:
  // the sockets are set again only when the timeout grew, or shrank by
  // more than 1/16 (a syscall per socket and direction saved per call).
  if (t <= sync_timeout_ && t >= sync_timeout_ - sync_timeout_ / 16) return;
  timeval tv = {};
  tv.tv_sec = t.count() / 1000;
  tv.tv_usec = (t.count() % 1000) * 1000;
  if (tv.tv_sec == 0 && tv.tv_usec == 0) tv.tv_usec = 1000;
  for (const GlooConnections::Socket& s : sync_connections_.sockets()) {
    if (!sync_connections_.Same(s)) continue;
    setsockopt(s.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(s.fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  }
  sync_timeout_ = t;
}

void GlooCommunicator::ShutdownSync() {
  // Wakes a read or write blocked on a sync pair's socket (it returns end
  // of file or EPIPE, and gloo throws); the peer reads end of file too.
  for (const GlooConnections::Socket& s : sync_connections_.sockets()) {
    if (sync_connections_.Same(s)) shutdown(s.fd, SHUT_RDWR);
  }
}

void GlooCommunicator::CreateSyncExchange(
    std::shared_ptr<gloo::Context> context) {
  sync_send_storage_.assign(2 * kSyncChunkBytes, 0);
  sync_recv_storage_.assign(kSyncChunkBytes * world_, 0);
  sync_send_.resize(2 * world_);
  sync_recv_.resize(world_);
  for (int peer = 0; peer < world_; ++peer) {
    if (peer == rank_) continue;
    std::unique_ptr<gloo::transport::Pair>& pair = context->getPair(peer);
    // Off the event loop, the socket blocking: only the caller reads it.
    pair->setSync(true, /*busyPoll=*/false);
    // A send buffer per staging parity (only a receive is matched by its
    // slot; messages on a pair are read in the order sent).
    for (int parity = 0; parity < 2; ++parity) {
      sync_send_[2 * peer + parity] = pair->createSendBuffer(
          kSyncSlot, SyncStaging(parity), kSyncChunkBytes);
    }
    sync_recv_[peer] = pair->createRecvBuffer(
        kSyncSlot,
        sync_recv_storage_.data() + static_cast<size_t>(peer) * kSyncChunkBytes,
        kSyncChunkBytes);
  }
  sync_connections_ = GlooConnections::Find(*context, rank_);
  SizeSyncSockets(/*receive=*/true);
  sync_context_ = std::move(context);
}

}  // namespace shoal::collectives
