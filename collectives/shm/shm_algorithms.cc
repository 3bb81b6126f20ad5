// The shared-memory collectives' algorithms and send/recv. Every algorithm
// follows one rule that makes double-buffering safe: a rank reads another
// rank's slot only between the sync that follows the slot's write and its own
// next sync, and a slot (parity p) is rewritten only after a sync of the next
// use (parity 1-p) — which no rank passes before it finished reading. Every
// call passes at least one sync: the call descriptors (by call parity) and
// the slots are reused two calls later, and only a sync in between keeps a
// fast rank from overwriting what a slow one still reads.
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "collectives/reduce/reduce_kernels.h"
#include "collectives/shm/shm_communicator_impl.h"
#include "shm/stream_copy.h"

namespace shoal::collectives {
namespace {

int64_t ElemSize(DType t) { return static_cast<int64_t>(DTypeSize(t)); }

// memcpy and memmove that do nothing for zero bytes: an empty buffer may come
// as a null pointer, and null is undefined behaviour for memcpy even then.
void CopyBytes(void* dst, const void* src, uint64_t n) {
  if (n != 0) std::memcpy(dst, src, n);
}
void MoveBytes(void* dst, const void* src, uint64_t n) {
  if (n != 0) std::memmove(dst, src, n);
}

// InvalidArgument unless `dtype` can be reduced.
absl::Status CheckReducible(const char* what, DType dtype) {
  if (IsReducible(dtype)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(what, " of ", DTypeName(dtype),
                   " (reducible: f16, bf16, f32, f64, i32, i64)"));
}

}  // namespace

absl::Status ShmCommunicator::Impl::AllReduce(const void* in, void* out,
                                              int64_t count, DType dtype,
                                              ReduceOp op,
                                              absl::Duration timeout) {
  SHOAL_RETURN_IF_ERROR(CheckReducible("all_reduce", dtype));
  SHOAL_RETURN_IF_ERROR(
      Begin(CallKind::kAllReduce, dtype, count, 0, op, timeout));
  const int64_t elem = ElemSize(dtype);
  const uint64_t bytes = static_cast<uint64_t>(count * elem);
  if (world_ == 1) {
    if (out != in) CopyBytes(out, in, bytes);
    return absl::OkStatus();
  }
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  if (bytes <= o_.one_step_bytes && bytes <= slot_bytes()) {
    // One step: everyone posts its data, everyone reduces all of it.
    const int p = NextParity();
    CopyBytes(slot(p, rank_), src, bytes);
    SHOAL_RETURN_IF_ERROR(Sync());
    const void* inputs[kMaxCollRanks];
    for (int r = 0; r < world_; ++r) inputs[r] = slot(p, r);
    return ReduceN(dtype, op, inputs, world_, dst, count, world_);
  }
  // Reduce-scatter then all-gather, a slot-sized chunk at a time.
  const int64_t chunk_elems = static_cast<int64_t>(slot_bytes()) / elem;
  // In place, the destination lines are cached (just read): streaming
  // stores would evict them first, which costs more than it saves.
  const bool stream = bytes >= o_.stream_bytes && in != out;
  for (int64_t begin = 0; begin < count; begin += chunk_elems) {
    const int64_t n = std::min(chunk_elems, count - begin);
    const int p = NextParity();
    SHOAL_RETURN_IF_ERROR(ReduceChunk(src + begin * elem, n, dtype, op, p));
    GatherChunk(dst + begin * elem, n, elem, p, stream);
  }
  return absl::OkStatus();
}

absl::Status ShmCommunicator::Impl::ReduceChunk(const uint8_t* src, int64_t n,
                                                DType dtype, ReduceOp op,
                                                int p) {
  const int64_t elem = ElemSize(dtype);
  // Stage the slices the others reduce; our own is read from `src`.
  for (int r = 0; r < world_; ++r) {
    if (r == rank_) continue;
    const int64_t a = n * r / world_, b = n * (r + 1) / world_;
    CopyBytes(slot(p, rank_) + a * elem, src + a * elem, (b - a) * elem);
  }
  SHOAL_RETURN_IF_ERROR(Sync());
  const int64_t lo = n * rank_ / world_, hi = n * (rank_ + 1) / world_;
  const void* inputs[kMaxCollRanks];
  for (int r = 0; r < world_; ++r) {
    inputs[r] = r == rank_ ? src + lo * elem : slot(p, r) + lo * elem;
  }
  SHOAL_RETURN_IF_ERROR(ReduceN(dtype, op, inputs, world_,
                                slot(p, rank_) + lo * elem, hi - lo, world_));
  return Sync();
}

void ShmCommunicator::Impl::GatherChunk(uint8_t* dst, int64_t n, int64_t elem,
                                        int p, bool stream) {
  for (int r = 0; r < world_; ++r) {
    const int64_t a = n * r / world_, b = n * (r + 1) / world_;
    if (stream) {
      shm::StreamCopy(dst + a * elem, slot(p, r) + a * elem, (b - a) * elem);
    } else {
      CopyBytes(dst + a * elem, slot(p, r) + a * elem, (b - a) * elem);
    }
  }
}

absl::Status ShmCommunicator::Impl::Reduce(const void* in, void* out,
                                           int64_t count, DType dtype,
                                           ReduceOp op, int root,
                                           absl::Duration timeout) {
  SHOAL_RETURN_IF_ERROR(CheckReducible("reduce", dtype));
  SHOAL_RETURN_IF_ERROR(
      Begin(CallKind::kReduce, dtype, count, root, op, timeout));
  const int64_t elem = ElemSize(dtype);
  if (world_ == 1) {
    if (out != in) CopyBytes(out, in, count * elem);
    return absl::OkStatus();
  }
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  // Every call passes at least one sync, even an empty one (see the top).
  if (count == 0) return Sync();
  const uint64_t bytes = static_cast<uint64_t>(count * elem);
  if (bytes <= o_.one_step_bytes && bytes <= slot_bytes()) {
    // One step, as all_reduce's: everyone posts its data, the root reduces
    // all of it (one sync where the chunked path takes two). The slot is
    // rewritten only after a sync of the other parity, which the root
    // passes only once it has read this one.
    const int p = NextParity();
    CopyBytes(slot(p, rank_), src, bytes);
    SHOAL_RETURN_IF_ERROR(Sync());
    if (rank_ != root) return absl::OkStatus();
    const void* inputs[kMaxCollRanks];
    for (int r = 0; r < world_; ++r) inputs[r] = slot(p, r);
    return ReduceN(dtype, op, inputs, world_, dst, count, world_);
  }
  const int64_t chunk_elems = static_cast<int64_t>(slot_bytes()) / elem;
  const bool stream =
      static_cast<uint64_t>(count * elem) >= o_.stream_bytes && in != out;
  for (int64_t begin = 0; begin < count; begin += chunk_elems) {
    const int64_t n = std::min(chunk_elems, count - begin);
    const int p = NextParity();
    SHOAL_RETURN_IF_ERROR(ReduceChunk(src + begin * elem, n, dtype, op, p));
    if (rank_ == root) GatherChunk(dst + begin * elem, n, elem, p, stream);
  }
  return absl::OkStatus();
}

absl::Status ShmCommunicator::Impl::Broadcast(const void* in, void* out,
                                              int64_t count, DType dtype,
                                              int root,
                                              absl::Duration timeout) {
  SHOAL_RETURN_IF_ERROR(
      Begin(CallKind::kBroadcast, dtype, count, root, ReduceOp::kSum, timeout));
  const int64_t bytes = count * ElemSize(dtype);
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  if (rank_ == root && out != in) CopyBytes(dst, src, bytes);
  if (world_ == 1) return absl::OkStatus();
  const int64_t chunk = static_cast<int64_t>(slot_bytes());
  for (int64_t begin = 0; begin < bytes || (bytes == 0 && begin == 0);
       begin += chunk) {
    const int64_t n = std::min(chunk, bytes - begin);
    const int p = NextParity();
    if (rank_ == root) CopyBytes(slot(p, root), src + begin, n);
    SHOAL_RETURN_IF_ERROR(Sync());
    if (rank_ != root) CopyBytes(dst + begin, slot(p, root), n);
    if (bytes == 0) break;
  }
  return absl::OkStatus();
}

absl::Status ShmCommunicator::Impl::AllGather(const void* in, void* out,
                                              int64_t count, DType dtype,
                                              absl::Duration timeout) {
  SHOAL_RETURN_IF_ERROR(
      Begin(CallKind::kAllGather, dtype, count, 0, ReduceOp::kSum, timeout));
  const int64_t bytes = count * ElemSize(dtype);
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  if (world_ == 1) {
    if (out != in) MoveBytes(dst, src, bytes);
    return absl::OkStatus();
  }
  const int64_t chunk = static_cast<int64_t>(slot_bytes());
  for (int64_t begin = 0; begin < bytes || (bytes == 0 && begin == 0);
       begin += chunk) {
    const int64_t n = std::min(chunk, bytes - begin);
    const int p = NextParity();
    CopyBytes(slot(p, rank_), src + begin, n);
    SHOAL_RETURN_IF_ERROR(Sync());
    for (int r = 0; r < world_; ++r)
      CopyBytes(dst + r * bytes + begin, slot(p, r), n);
    if (bytes == 0) break;
  }
  return absl::OkStatus();
}

absl::Status ShmCommunicator::Impl::ReduceScatter(const void* in, void* out,
                                                  int64_t count, DType dtype,
                                                  ReduceOp op,
                                                  absl::Duration timeout) {
  SHOAL_RETURN_IF_ERROR(CheckReducible("reduce_scatter", dtype));
  SHOAL_RETURN_IF_ERROR(
      Begin(CallKind::kReduceScatter, dtype, count, 0, op, timeout));
  const int64_t elem = ElemSize(dtype);
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  if (world_ == 1) {
    if (out != in) MoveBytes(dst, src, count * elem);
    return absl::OkStatus();
  }
  return BlockChunks(src, count, elem, [&](int64_t begin, int64_t n, int p) {
    const void* inputs[kMaxCollRanks];
    for (int r = 0; r < world_; ++r) {
      inputs[r] = slot(p, r) + rank_ * n * elem;
    }
    return ReduceN(dtype, op, inputs, world_, dst + begin * elem, n, world_);
  });
}

absl::Status ShmCommunicator::Impl::AllToAll(const void* in, void* out,
                                             int64_t count, DType dtype,
                                             absl::Duration timeout) {
  SHOAL_RETURN_IF_ERROR(
      Begin(CallKind::kAllToAll, dtype, count, 0, ReduceOp::kSum, timeout));
  const int64_t elem = ElemSize(dtype);
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  if (world_ == 1) {
    if (out != in) MoveBytes(dst, src, count * elem);
    return absl::OkStatus();
  }
  if (out == in) {
    // In place: stage our input first (every block is read by someone else).
    staging_.assign(src, src + world_ * count * elem);
    src = staging_.data();
  }
  return BlockChunks(src, count, elem, [&](int64_t begin, int64_t n, int p) {
    for (int r = 0; r < world_; ++r) {
      CopyBytes(dst + (r * count + begin) * elem, slot(p, r) + rank_ * n * elem,
                n * elem);
    }
    return absl::OkStatus();
  });
}

absl::Status ShmCommunicator::Impl::BlockChunks(
    const uint8_t* src, int64_t count, int64_t elem,
    const std::function<absl::Status(int64_t, int64_t, int)>& consume) {
  // Each chunk carries `n` elements of every rank's block.
  const int64_t chunk_elems =
      std::max<int64_t>(1, static_cast<int64_t>(slot_bytes()) / elem / world_);
  for (int64_t begin = 0; begin < count || (count == 0 && begin == 0);
       begin += chunk_elems) {
    const int64_t n = std::min(chunk_elems, count - begin);
    const int p = NextParity();
    for (int k = 0; k < world_; ++k) {
      CopyBytes(slot(p, rank_) + k * n * elem, src + (k * count + begin) * elem,
                n * elem);
    }
    SHOAL_RETURN_IF_ERROR(Sync());
    SHOAL_RETURN_IF_ERROR(consume(begin, n, p));
    if (count == 0) break;
  }
  return absl::OkStatus();
}

absl::Status ShmCommunicator::Impl::Barrier(absl::Duration timeout) {
  SHOAL_RETURN_IF_ERROR(
      Begin(CallKind::kBarrier, DType::kRaw, 0, 0, ReduceOp::kSum, timeout));
  if (world_ == 1) return absl::OkStatus();
  return Sync();
}

absl::Status ShmCommunicator::Impl::Send(const void* in, int64_t count,
                                         DType dtype, int peer,
                                         absl::Duration timeout) {
  SHOAL_RETURN_IF_ERROR(CheckP2p(peer));
  const Call call{CallKind::kSend, 0, DeadlineAfter(timeout)};
  const uint64_t bytes = static_cast<uint64_t>(count * ElemSize(dtype));
  const auto* src = static_cast<const uint8_t*>(in);
  P2pBox& b = box(rank_, peer);
  uint64_t off = 0;
  do {
    const uint64_t n = std::min<uint64_t>(p2p_bytes(), bytes - off);
    const uint64_t seq = b.sent.load(std::memory_order_relaxed);
    // Both buffers in use: wait for the receiver to consume one.
    SHOAL_RETURN_IF_ERROR(WaitFor(
        [&] { return seq - b.acked.load(std::memory_order_acquire) < 2; }, peer,
        call, [peer](int r) { return r == peer; }));
    uint8_t* buf = p2p_buffer(rank_, peer, seq);
    *reinterpret_cast<ChunkHeader*>(buf) = ChunkHeader{bytes, n};
    CopyBytes(buf + sizeof(ChunkHeader), src + off, n);
    b.sent.store(seq + 1, std::memory_order_release);
    Ring(peer);
    off += n;
  } while (off < bytes);
  return absl::OkStatus();
}

absl::Status ShmCommunicator::Impl::Recv(void* out, int64_t count, DType dtype,
                                         int peer, absl::Duration timeout) {
  SHOAL_RETURN_IF_ERROR(CheckP2p(peer));
  const Call call{CallKind::kRecv, 0, DeadlineAfter(timeout)};
  const uint64_t bytes = static_cast<uint64_t>(count * ElemSize(dtype));
  auto* dst = static_cast<uint8_t*>(out);
  P2pBox& b = box(peer, rank_);
  uint64_t off = 0;
  do {
    const uint64_t seq = b.acked.load(std::memory_order_relaxed);
    SHOAL_RETURN_IF_ERROR(
        WaitFor([&] { return b.sent.load(std::memory_order_acquire) > seq; },
                peer, call, [peer](int r) { return r == peer; }));
    const uint8_t* buf = p2p_buffer(peer, rank_, seq);
    const ChunkHeader header = *reinterpret_cast<const ChunkHeader*>(buf);
    if (header.message_bytes != bytes) {
      return Fail(absl::InvalidArgumentError(
          absl::StrCat("recv of ", bytes, " bytes from rank ", peer,
                       " matched a send of ", header.message_bytes, " bytes")));
    }
    CopyBytes(dst + off, buf + sizeof(ChunkHeader), header.chunk_bytes);
    b.acked.store(seq + 1, std::memory_order_release);
    Ring(peer);
    off += header.chunk_bytes;
  } while (off < bytes);
  return absl::OkStatus();
}

}  // namespace shoal::collectives
