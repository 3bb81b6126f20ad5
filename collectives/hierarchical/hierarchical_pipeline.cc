// HierarchicalCommunicator::PipelinedColumns: the columns' all_reduce on 2
// nodes as a pipeline of pieces (hierarchical_communicator.h,
// docs/collectives.md).
#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "base/status_macros.h"
#include "collectives/hierarchical/hierarchical_communicator.h"

namespace shoal::collectives {

namespace {

const uint8_t* Bytes(const void* p) { return static_cast<const uint8_t*>(p); }
uint8_t* Bytes(void* p) { return static_cast<uint8_t*>(p); }

}  // namespace

absl::Status HierarchicalCommunicator::PipelinedColumns(
    const void* in, void* out, int64_t count, DType dtype, ReduceOp combine,
    absl::Time deadline) {
  // The buffer in pieces of L·c elements; local rank k owns elements
  // [k·c, (k+1)·c) of each piece (c = o_.pipeline_piece_bytes / element, the
  // last piece shorter). Piece i: shm reduce_scatter, the column's
  // exchange, shm all_gather, with the reduce_scatter of piece i+1 run
  // after piece i is sent and before it is received (the pipeline), so
  // the peer's piece travels while this node reduces the next one. Each
  // element is still reduced in the same order (node sums in local rank
  // order, then nodes in order): the same bits as the unpipelined path.
  const int64_t es = DTypeSize(dtype);
  const int64_t L = local_size_;
  const int64_t slice = count / L;
  const int64_t c = std::max<int64_t>(
      1, std::min<int64_t>(o_.pipeline_piece_bytes,
                           GlooCommunicator::kSyncChunkBytes) /
             es);
  const int64_t stride = L * c;
  auto piece_of = [&](int64_t i) { return std::min(c, slice - i * c); };
  absl::Status shm_failure;
  auto ready = [&](int64_t i) {
    const int64_t n = piece_of(i);
    uint8_t* base = Bytes(out) + i * stride * es;
    shm_failure =
        shm_->ReduceScatter(Bytes(in) + i * stride * es, base + local_ * n * es,
                            n, dtype, combine, Left(deadline));
    return shm_failure;
  };
  auto done = [&](int64_t i) {
    const int64_t n = piece_of(i);
    uint8_t* base = Bytes(out) + i * stride * es;
    shm_failure =
        shm_->AllGather(base + local_ * n * es, base, n, dtype, Left(deadline));
    return shm_failure;
  };
  // The exchange sees this rank's part of every piece: c elements every
  // L·c (the last piece's part is shorter but starts at local_·n of its
  // piece, which the offset below does not give): so the last piece, when
  // shorter, runs on its own after the others.
  const int64_t full = slice / c;
  if (full > 0) {
    absl::Status s = column_->PipelinedExchange(
        Bytes(out) + local_ * c * es, full * c, c, stride, dtype, combine,
        Left(deadline), ready, done);
    if (!shm_failure.ok()) return Shm(shm_failure);
    SHOAL_RETURN_IF_ERROR(Net(s));
  }
  if (full * c < slice) {
    const int64_t n = slice - full * c;
    auto last_ready = [&](int64_t) { return ready(full); };
    auto last_done = [&](int64_t) { return done(full); };
    absl::Status s = column_->PipelinedExchange(
        Bytes(out) + (full * stride + local_ * n) * es, n, n, n, dtype, combine,
        Left(deadline), last_ready, last_done);
    if (!shm_failure.ok()) return Shm(shm_failure);
    SHOAL_RETURN_IF_ERROR(Net(s));
  }
  // The last count % L elements: a tiny all_reduce of their own (in place,
  // they are still this rank's input).
  const int64_t finished = slice * L;
  if (finished < count) {
    uint8_t* tail = Bytes(out) + finished * es;
    SHOAL_RETURN_IF_ERROR(
        Shm(shm_->AllReduce(Bytes(in) + finished * es, tail, count - finished,
                            dtype, combine, Left(deadline))));
    SHOAL_RETURN_IF_ERROR(Net(column_->ExchangeAllReduce(
        tail, tail, count - finished, dtype, combine, Left(deadline))));
  }
  return absl::OkStatus();
}

}  // namespace shoal::collectives
