// ShmCommunicator::Impl (internal): the segment, the sync machinery and the
// algorithms. shm_communicator.cc holds creation, sync points, waits and
// failure handling; shm_algorithms.cc the collectives and send/recv.
//
// Threads: collectives run on one thread at a time. A Send to one peer and a
// Recv from one peer each may run on their own thread beside them (each
// direction and peer one at a time), so a program can post a send and a
// receive at once without deadlocking on full buffers.
#ifndef SHOAL_COLLECTIVES_SHM_SHM_COMMUNICATOR_IMPL_H_
#define SHOAL_COLLECTIVES_SHM_SHM_COMMUNICATOR_IMPL_H_

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "base/mutex.h"
#include "base/spin_turn.h"
#include "base/status_macros.h"
#include "collectives/reduce_op.h"
#include "collectives/shm/shm_communicator.h"
#include "collectives/shm/shm_layout.h"
#include "ipc/tensor_meta.h"
#include "observe/timeline.h"
#include "shm/segment.h"

namespace shoal::collectives {

void SpinPause();  // the CPU's spin-wait hint

class ShmCommunicator::Impl {
 public:
  // What a waiting call is, for deadlines and error messages.
  struct Call {
    CallKind kind = CallKind::kBarrier;
    uint64_t seq = 0;
    int64_t deadline_ns = 0;  // on observe::TimelineNowNs's clock
  };

  Impl(std::unique_ptr<shm::Segment> seg, int rank, int world,
       const ShmCommOptions& o);

  void UnlinkSegment() { seg_->Unlink(); }
  // Records this process in its RankControl (pid, start time).
  void RegisterSelf();
  // Fails the communicator from outside a call (ShmCommunicator::Abort).
  absl::Status Abort(absl::Status s) { return Fail(std::move(s)); }

  // ---- the algorithms (shm_algorithms.cc) ----
  absl::Status AllReduce(const void* in, void* out, int64_t count, DType dtype,
                         ReduceOp op, absl::Duration timeout);
  absl::Status Reduce(const void* in, void* out, int64_t count, DType dtype,
                      ReduceOp op, int root, absl::Duration timeout);
  absl::Status Broadcast(const void* in, void* out, int64_t count, DType dtype,
                         int root, absl::Duration timeout);
  absl::Status AllGather(const void* in, void* out, int64_t count, DType dtype,
                         absl::Duration timeout);
  absl::Status ReduceScatter(const void* in, void* out, int64_t count,
                             DType dtype, ReduceOp op, absl::Duration timeout);
  absl::Status AllToAll(const void* in, void* out, int64_t count, DType dtype,
                        absl::Duration timeout);
  absl::Status Barrier(absl::Duration timeout);
  absl::Status Send(const void* in, int64_t count, DType dtype, int peer,
                    absl::Duration timeout);
  absl::Status Recv(void* out, int64_t count, DType dtype, int peer,
                    absl::Duration timeout);
  // ShmCommunicator::PeerFailed.
  absl::Status PeerFailed() const {
    // PeerFailure names the call ("barrier #0: "); outside one there is none.
    absl::Status s = PeerFailure(Call{}, [](int) { return true; });
    if (s.ok()) return s;
    const size_t at = s.message().find(": ");
    return absl::Status(s.code(), s.message().substr(at + 2));
  }

 private:
  RankControl& ctl(int r) const {
    return reinterpret_cast<RankControl*>(seg_->base() +
                                          h_->controls_offset)[r];
  }
  P2pBox& box(int src, int dst) const {
    return reinterpret_cast<P2pBox*>(seg_->base() +
                                     h_->boxes_offset)[src * world_ + dst];
  }
  uint8_t* slot(int parity, int r) const {
    return seg_->base() + h_->data_offset +
           (uint64_t(parity) * world_ + r) * h_->slot_bytes;
  }
  uint8_t* p2p_buffer(int src, int dst, uint64_t n) const {
    const uint64_t per = sizeof(ChunkHeader) + h_->p2p_bytes;
    return seg_->base() + h_->p2p_offset +
           ((uint64_t(src) * world_ + dst) * 2 + n % 2) * per;
  }
  uint64_t slot_bytes() const { return h_->slot_bytes; }
  uint64_t p2p_bytes() const { return h_->p2p_bytes; }
  // `timeout` (zero: the communicator's) from the call's start: the
  // reading its communicator took for the timeline (observe::SetCallStart),
  // else now.
  int64_t DeadlineAfter(absl::Duration timeout) const {
    int64_t start = observe::TakeCallStart();
    if (start == 0) start = observe::TimelineNowNs();
    const absl::Duration t =
        timeout == absl::ZeroDuration() ? o_.timeout : timeout;
    const int64_t span = absl::ToInt64Nanoseconds(t);
    return span >= INT64_MAX - start ? INT64_MAX : start + span;
  }

  // Starts a collective: checks that the communicator is healthy and the
  // arguments, and publishes this rank's CallDesc.
  absl::Status Begin(CallKind kind, DType dtype, int64_t count, int root,
                     ReduceOp op, absl::Duration timeout);
  // After the first sync of a collective: every rank's CallDesc must match.
  absl::Status CheckPeers();
  // One sync point of a collective: announce arrival, wait for the others.
  absl::Status Sync();
  int NextParity() { return static_cast<int>(uses_++ % 2); }
  // One chunk of a reduction (`n` elements at `src`, slots of parity `p`):
  // stages the slices the other ranks reduce, syncs, reduces this rank's
  // slice (inputs in rank order) into its slot, syncs. Afterwards rank r's
  // slot holds the reduced slice [n·r/world, n·(r+1)/world).
  absl::Status ReduceChunk(const uint8_t* src, int64_t n, DType dtype,
                           ReduceOp op, int p);
  // Reduce_scatter's and all_to_all's pass over `src` (world_ blocks of
  // `count` elements), a chunk at a time: stages `n` elements of every block
  // in this rank's slot of parity p, syncs, then `consume(begin, n, p)` reads
  // the slots.
  absl::Status BlockChunks(
      const uint8_t* src, int64_t count, int64_t elem,
      const std::function<absl::Status(int64_t, int64_t, int)>& consume);
  // Copies every rank's reduced slice of chunk `p` to `dst`; `stream`: with
  // non-temporal stores.
  void GatherChunk(uint8_t* dst, int64_t n, int64_t elem, int p, bool stream);

  // Waits until `ready()`: spins, then yields, then sleeps on this rank's
  // bell, checking `call`'s deadline and the other ranks' health. `needs(r)`
  // says whether the wait depends on rank r still running: a dead rank
  // fails the wait only then (a sync needs the ranks that have not arrived
  // yet, a send or receive its peer; a rank that finished its part and
  // exited is no failure of a wait on the others). `peer_cpu` (may be null)
  // is where the awaited peer last ran: a peer on this thread's own CPU
  // cannot arrive while this thread spins there, so the wait skips the
  // pause loop and yields to it at once.
  // The pauses at the start of a wait that the timeline does not time (about
  // a microsecond): see WaitFor.
  static constexpr int kUntimedPauses = 16;
  template <typename Ready>
  absl::Status WaitFor(Ready ready, int peer, const Call& call,
                       absl::FunctionRef<bool(int)> needs,
                       const std::atomic<int32_t>* peer_cpu = nullptr);
  // Unavailable naming a rank that died while `needs` it; for a rank that
  // gave up (any rank: the communicator is then unusable), its failure's
  // code with its reason; OK otherwise.
  absl::Status PeerFailure(const Call& call,
                           absl::FunctionRef<bool(int)> needs) const;
  absl::Status TimedOut(const Call& call, int peer) const;
  // Marks the communicator failed here (the first failure wins) and tells
  // the other ranks; returns `s`.
  absl::Status Fail(absl::Status s) ABSL_LOCKS_EXCLUDED(broken_mu_);
  // OK, or FailedPrecondition carrying the earlier failure.
  absl::Status Usable() ABSL_LOCKS_EXCLUDED(broken_mu_);
  void Ring(int r);
  void RingAll();
  absl::Status CheckP2p(int peer);

  std::unique_ptr<shm::Segment> seg_;
  CollHeader* h_;
  const int rank_;
  const int world_;
  const ShmCommOptions o_;

  // The collective thread's state.
  uint64_t step_ = 0;
  uint64_t seq_ = 0;
  uint64_t uses_ = 0;
  bool checked_ = false;
  Call call_;
  std::vector<uint8_t> staging_;

  std::atomic<bool> failed_{false};
  Mutex broken_mu_;
  absl::Status broken_ ABSL_GUARDED_BY(broken_mu_);
};

template <typename Ready>
absl::Status ShmCommunicator::Impl::WaitFor(
    Ready ready, int peer, const Call& call, absl::FunctionRef<bool(int)> needs,
    const std::atomic<int32_t>* peer_cpu) {
  if (ready()) return absl::OkStatus();  // no wait: nothing to count
  // Spin first: the peer is usually a few hundred nanoseconds away, on
  // another CPU. On this one it would wait for the spin to end (~100 µs
  // here) before it runs.
  const bool shares_cpu =
      peer_cpu != nullptr &&
      peer_cpu->load(std::memory_order_relaxed) == sched_getcpu();
  // The first pauses are not timed: a wait that ends within them (the
  // peers of a call in step) reads no clock, and the timeline's wait_us
  // counts the waits that last longer than them.
  const int untimed = std::min(kUntimedPauses, o_.spin_pauses);
  int i = 0;
  for (; !shares_cpu && i < untimed; ++i) {
    if (ready()) return absl::OkStatus();
    SpinPause();
  }
  // The rest of this wait, for the call's span on the timeline (when this
  // process records one).
  struct CountWait {
    int64_t start_ns = observe::TimelineOn() ? observe::TimelineNowNs() : 0;
    ~CountWait() {
      if (start_ns != 0)
        observe::AddPeerWait(observe::TimelineNowNs() - start_ns);
    }
  } count_wait;
  for (; !shares_cpu && i < o_.spin_pauses; ++i) {
    if (ready()) return absl::OkStatus();
    SpinPause();
  }
  // Then yield, unless the CPU is contended: each yield would then wait out
  // another thread's time slice, and a sleeping rank, rung, preempts it
  // (base/spin_turn.h).
  const absl::Time spin_until = absl::Now() + o_.spin;
  bool spinning = SpinAllowed();
  while (spinning && absl::Now() < spin_until) {
    if (ready()) return absl::OkStatus();
    spinning = YieldTurn();
  }
  // The deadline and the health checks read the call's clock, once a look.
  constexpr int64_t kHealthEveryNs = 20'000'000;
  int64_t now_ns = observe::TimelineNowNs();
  int64_t next_health_ns = now_ns;
  shm::Doorbell& bell = ctl(rank_).bell;
  while (true) {
    const uint32_t armed = bell.Arm();
    // Orders the arming before the look at the condition (Ring's fence is
    // the other half): either this rank sees the condition or the ringer
    // sees it armed.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    const bool now_ready = ready();
    if (!now_ready) {
      bell.Sleep(armed, std::min(absl::Milliseconds(10),
                                 absl::Nanoseconds(call.deadline_ns - now_ns)));
    }
    bell.Disarm();
    if (now_ready || ready()) return absl::OkStatus();
    now_ns = observe::TimelineNowNs();
    if (now_ns >= call.deadline_ns) return Fail(TimedOut(call, peer));
    if (now_ns >= next_health_ns) {
      next_health_ns = now_ns + kHealthEveryNs;
      if (absl::Status s = PeerFailure(call, needs); !s.ok()) {
        // The peer may have arrived between our last look and giving up
        // (a rank that finds a mismatch gives up right after the sync that
        // this wait is part of): then this wait is over, and this rank's
        // own checks report what the peer found.
        if (ready()) return absl::OkStatus();
        return Fail(std::move(s));
      }
      // Another thread of this rank (a send beside a collective) may have
      // failed.
      SHOAL_RETURN_IF_ERROR(Usable());
    }
  }
}

}  // namespace shoal::collectives

#endif  // SHOAL_COLLECTIVES_SHM_SHM_COMMUNICATOR_IMPL_H_
