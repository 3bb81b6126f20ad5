#include "collectives/shm/shm_communicator.h"

#include <immintrin.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/process_info.h"
#include "base/status_macros.h"
#include "collectives/shm/shm_communicator_impl.h"

namespace shoal::collectives {

const char* CallKindName(CallKind k) {
  switch (k) {
    case CallKind::kAllReduce:
      return "all_reduce";
    case CallKind::kBroadcast:
      return "broadcast";
    case CallKind::kReduce:
      return "reduce";
    case CallKind::kAllGather:
      return "all_gather";
    case CallKind::kReduceScatter:
      return "reduce_scatter";
    case CallKind::kAllToAll:
      return "all_to_all";
    case CallKind::kBarrier:
      return "barrier";
    case CallKind::kSend:
      return "send";
    case CallKind::kRecv:
      return "recv";
  }
  return "?";
}

void SpinPause() { _mm_pause(); }

ShmCommunicator::Impl::Impl(std::unique_ptr<shm::Segment> seg, int rank,
                            int world, const ShmCommOptions& o)
    : seg_(std::move(seg)), rank_(rank), world_(world), o_(o) {
  h_ = reinterpret_cast<CollHeader*>(seg_->base());
}

void ShmCommunicator::Impl::RegisterSelf() {
  RankControl& me = ctl(rank_);
  me.pid = getpid();
  me.start_ticks = ProcessStartTicks(getpid()).value_or(0);
  me.cpu.store(-1, std::memory_order_relaxed);  // none before the first sync
}

// ---- failure ---------------------------------------------------------------

absl::Status ShmCommunicator::Impl::Usable() {
  if (!failed_.load(std::memory_order_acquire)) return absl::OkStatus();
  MutexLock lock(&broken_mu_);
  return absl::FailedPreconditionError(
      absl::StrCat("this communicator failed earlier and cannot be used: ",
                   broken_.message()));
}

absl::Status ShmCommunicator::Impl::Fail(absl::Status s) {
  RankControl& me = ctl(rank_);
  {
    // The reason is written under the lock: a second thread of this rank
    // failing at once publishes `aborted` only after it, so a peer that sees
    // `aborted` reads a whole reason.
    MutexLock lock(&broken_mu_);
    if (broken_.ok()) {
      broken_ = s;
      const std::string why(s.message().substr(0, sizeof(me.reason) - 1));
      std::memcpy(me.reason, why.data(), why.size());
      me.reason[why.size()] = '\0';
      me.code = static_cast<uint32_t>(s.code());
    }
  }
  failed_.store(true, std::memory_order_release);
  me.aborted.store(1, std::memory_order_release);
  RingAll();
  return s;
}

absl::Status ShmCommunicator::Impl::TimedOut(const Call& call, int peer) const {
  return absl::DeadlineExceededError(
      absl::StrCat(CallKindName(call.kind), " #", call.seq, ": rank ", peer,
                   " did not arrive within the timeout"));
}

absl::Status ShmCommunicator::Impl::PeerFailure(
    const Call& call, absl::FunctionRef<bool(int)> needs) const {
  // Deaths first: when one rank dies and another gives up because of it, the
  // death is the news. A rank that gave up and then exited did not die: its
  // reason is the news (else a rank that times out and returns a moment
  // before this one would be reported dead).
  for (int r = 0; r < world_; ++r) {
    const RankControl& c = ctl(r);
    if (r != rank_ && needs(r) &&
        c.aborted.load(std::memory_order_acquire) == 0 &&
        !ProcessIsAlive(c.pid, c.start_ticks)) {
      return absl::UnavailableError(absl::StrCat(CallKindName(call.kind), " #",
                                                 call.seq, ": rank ", r,
                                                 " (pid ", c.pid, ") died"));
    }
  }
  // A peer that gave up passes on its error's code with its reason. When a
  // third rank stalls, every waiting rank times out at about the same moment,
  // and which of them notices first that another gave up is a race: with the
  // code passed on, each reports DeadlineExceeded naming the stalled rank
  // either way (and a mismatch InvalidArgument), not a race-dependent
  // Unavailable.
  for (int r = 0; r < world_; ++r) {
    const RankControl& c = ctl(r);
    if (r != rank_ && c.aborted.load(std::memory_order_acquire)) {
      const std::string why(c.reason, strnlen(c.reason, sizeof(c.reason)));
      absl::StatusCode code = static_cast<absl::StatusCode>(c.code);
      if (code == absl::StatusCode::kOk) code = absl::StatusCode::kUnavailable;
      return absl::Status(
          code, absl::StrCat(CallKindName(call.kind), " #", call.seq, ": rank ",
                             r, " gave up (", why, ")"));
    }
  }
  return absl::OkStatus();
}

void ShmCommunicator::Impl::Ring(int r) {
  // The caller has just made a waiter's condition true (a step counter, a
  // p2p counter, an abort flag: release stores). Without a full fence the
  // load of `sleepers` below may be ordered before that store (x86 reorders
  // a store with a later load of another address): it can read 0 while the
  // waiter, arming at that moment, still reads the old counter and sleeps
  // — a lost wake-up, the waiter's whole 10 ms sleep slice. The waiter's
  // side (Doorbell::Arm, then the fence in WaitFor) pairs with this one.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  // Only a sleeper needs the system call.
  if (ctl(r).bell.sleepers.load(std::memory_order_seq_cst) != 0) {
    ctl(r).bell.Ring();
  }
}

void ShmCommunicator::Impl::RingAll() {
  for (int r = 0; r < world_; ++r) {
    if (r != rank_) Ring(r);
  }
}

// ---- collectives' bookkeeping
// ------------------------------------------------

absl::Status ShmCommunicator::Impl::Begin(CallKind kind, DType dtype,
                                          int64_t count, int root, ReduceOp op,
                                          absl::Duration timeout) {
  SHOAL_RETURN_IF_ERROR(Usable());
  if (count < 0) return absl::InvalidArgumentError("negative count");
  if (root < 0 || root >= world_) {
    return absl::InvalidArgumentError(
        absl::StrCat("root ", root, " is not a rank of ", world_));
  }
  ++seq_;
  call_ = Call{kind, seq_, DeadlineAfter(timeout)};
  ctl(rank_).desc[seq_ % 2] = CallDesc{
      seq_, static_cast<uint32_t>(kind), static_cast<uint32_t>(dtype), count,
      root, static_cast<uint32_t>(op)};
  checked_ = false;
  return absl::OkStatus();
}

absl::Status ShmCommunicator::Impl::CheckPeers() {
  if (checked_) return absl::OkStatus();
  checked_ = true;
  // Every rank has published this call's descriptor (it passed the sync
  // after Begin) and cannot overwrite it before the next call's sync.
  const CallDesc& mine = ctl(rank_).desc[seq_ % 2];
  for (int r = 0; r < world_; ++r) {
    const CallDesc& d = ctl(r).desc[seq_ % 2];
    if (d.seq != mine.seq || d.kind != mine.kind) {
      return Fail(absl::InvalidArgumentError(absl::StrCat(
          "collective mismatch: rank ", rank_, " called ",
          CallKindName(call_.kind), " #", seq_, " but rank ", r, " called ",
          CallKindName(static_cast<CallKind>(d.kind)), " #", d.seq)));
    }
    if (d.dtype != mine.dtype || d.count != mine.count || d.root != mine.root ||
        d.op != mine.op) {
      return Fail(absl::InvalidArgumentError(absl::StrCat(
          CallKindName(call_.kind), " mismatch: rank ", rank_, " has ",
          mine.count, " x ", DTypeName(static_cast<DType>(mine.dtype)),
          " (root ", mine.root, ", ",
          ReduceOpName(static_cast<ReduceOp>(mine.op)), "), rank ", r, " has ",
          d.count, " x ", DTypeName(static_cast<DType>(d.dtype)), " (root ",
          d.root, ", ", ReduceOpName(static_cast<ReduceOp>(d.op)), ")")));
    }
  }
  return absl::OkStatus();
}

absl::Status ShmCommunicator::Impl::Sync() {
  ++step_;
  RankControl& me = ctl(rank_);
  me.cpu.store(sched_getcpu(), std::memory_order_relaxed);
  me.step.store(step_, std::memory_order_release);
  RingAll();
  for (int r = 0; r < world_; ++r) {
    if (r == rank_) continue;
    std::atomic<uint64_t>& s = ctl(r).step;
    SHOAL_RETURN_IF_ERROR(WaitFor(
        [&] { return s.load(std::memory_order_acquire) >= step_; }, r, call_,
        [&](int other) {
          // A rank that reached this sync point and then died did its part.
          return ctl(other).step.load(std::memory_order_acquire) < step_;
        },
        &ctl(r).cpu));
  }
  return CheckPeers();
}

absl::Status ShmCommunicator::Impl::CheckP2p(int peer) {
  SHOAL_RETURN_IF_ERROR(Usable());
  if (peer < 0 || peer >= world_ || peer == rank_) {
    return absl::InvalidArgumentError(
        absl::StrCat("peer ", peer, " is not another rank of ", world_));
  }
  return absl::OkStatus();
}

// ---- creation
// ----------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<ShmCommunicator>> ShmCommunicator::Create(
    Rendezvous& rendezvous, const std::string& job_id, const std::string& name,
    int rank, int world, const ShmCommOptions& o) {
  if (world < 1 || world > kMaxCollRanks || rank < 0 || rank >= world) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", rank, " of ", world, " (at most ", kMaxCollRanks, " ranks)"));
  }
  if (o.slot_bytes < 4096 || o.p2p_bytes < 4096 || o.slot_bytes % 64 != 0) {
    return absl::InvalidArgumentError(
        "slot and p2p sizes must be ≥ 4 KiB, multiples of 64");
  }
  const std::string key = absl::StrCat("__shoal/coll/", name);
  std::unique_ptr<shm::Segment> seg;
  if (rank == 0) {
    const uint64_t controls = shm::AlignUp(sizeof(CollHeader), 64);
    const uint64_t boxes =
        shm::AlignUp(controls + sizeof(RankControl) * world, 64);
    const uint64_t data =
        shm::AlignUp(boxes + sizeof(P2pBox) * world * world, shm::kPageSize);
    const uint64_t p2p = data + 2ull * world * o.slot_bytes;
    const uint64_t total = shm::AlignUp(
        p2p + 2ull * world * world * (sizeof(ChunkHeader) + o.p2p_bytes),
        shm::kPageSize);
    const std::string seg_name =
        absl::StrCat("shoal-", job_id, "-", name, "-", getpid(), "-coll");
    SHOAL_ASSIGN_OR_RETURN(seg, shm::Segment::Create(seg_name, total));
    seg->InitPrefix(job_id, kCollLayoutVersion, sizeof(CollHeader));
    auto* h = reinterpret_cast<CollHeader*>(seg->base());
    h->world = static_cast<uint32_t>(world);
    h->slot_bytes = o.slot_bytes;
    h->p2p_bytes = o.p2p_bytes;
    h->controls_offset = controls;
    h->boxes_offset = boxes;
    h->data_offset = data;
    h->p2p_offset = p2p;
    seg->Publish(kCollMagic);
    SHOAL_RETURN_IF_ERROR(rendezvous.Set(key, seg->name()));
  } else {
    SHOAL_ASSIGN_OR_RETURN(std::string seg_name,
                           rendezvous.Get(key, o.timeout));
    SHOAL_ASSIGN_OR_RETURN(
        seg, shm::Segment::Open(seg_name, kCollMagic, kCollLayoutVersion));
    const auto* h = reinterpret_cast<const CollHeader*>(seg->base());
    if (h->world != static_cast<uint32_t>(world)) {
      return absl::InvalidArgumentError(
          absl::StrCat("communicator '", name, "' has ", h->world,
                       " ranks; this rank says ", world));
    }
  }
  auto impl = std::make_unique<Impl>(std::move(seg), rank, world, o);
  impl->RegisterSelf();
  // Everyone mapped it; rank 0 then unlinks (the mapping lives on, and a
  // crash leaves no segment behind). Its key goes too, so the name can be
  // reused by a later communicator.
  SHOAL_RETURN_IF_ERROR(
      rendezvous.Barrier(absl::StrCat(key, "/ready"), world, o.timeout));
  if (rank == 0) {
    impl->UnlinkSegment();
    (void)rendezvous.Delete(key);
  }
  return std::unique_ptr<ShmCommunicator>(
      new ShmCommunicator(std::move(impl), rank, world));
}

ShmCommunicator::ShmCommunicator(std::unique_ptr<Impl> impl, int rank,
                                 int world)
    : impl_(std::move(impl)), rank_(rank), world_(world) {}
ShmCommunicator::~ShmCommunicator() = default;

absl::Status ShmCommunicator::Abort(absl::Status why) {
  return impl_->Abort(std::move(why));
}

absl::Status ShmCommunicator::PeerFailed() const { return impl_->PeerFailed(); }

absl::Status ShmCommunicator::AllReduce(const void* in, void* out,
                                        int64_t count, DType dtype, ReduceOp op,
                                        absl::Duration timeout) {
  return impl_->AllReduce(in, out, count, dtype, op, timeout);
}
absl::Status ShmCommunicator::Broadcast(const void* in, void* out,
                                        int64_t count, DType dtype, int root,
                                        absl::Duration timeout) {
  return impl_->Broadcast(in, out, count, dtype, root, timeout);
}
absl::Status ShmCommunicator::Reduce(const void* in, void* out, int64_t count,
                                     DType dtype, ReduceOp op, int root,
                                     absl::Duration timeout) {
  return impl_->Reduce(in, out, count, dtype, op, root, timeout);
}
absl::Status ShmCommunicator::AllGather(const void* in, void* out,
                                        int64_t count, DType dtype,
                                        absl::Duration timeout) {
  return impl_->AllGather(in, out, count, dtype, timeout);
}
absl::Status ShmCommunicator::ReduceScatter(const void* in, void* out,
                                            int64_t count, DType dtype,
                                            ReduceOp op,
                                            absl::Duration timeout) {
  return impl_->ReduceScatter(in, out, count, dtype, op, timeout);
}
absl::Status ShmCommunicator::AllToAll(const void* in, void* out, int64_t count,
                                       DType dtype, absl::Duration timeout) {
  return impl_->AllToAll(in, out, count, dtype, timeout);
}
absl::Status ShmCommunicator::Send(const void* in, int64_t count, DType dtype,
                                   int peer, absl::Duration timeout) {
  return impl_->Send(in, count, dtype, peer, timeout);
}
absl::Status ShmCommunicator::Recv(void* out, int64_t count, DType dtype,
                                   int peer, absl::Duration timeout) {
  return impl_->Recv(out, count, dtype, peer, timeout);
}
absl::Status ShmCommunicator::Barrier(absl::Duration timeout) {
  return impl_->Barrier(timeout);
}

}  // namespace shoal::collectives
