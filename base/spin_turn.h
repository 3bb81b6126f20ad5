// Spin turns that stop when the CPU is contended.
//
// shoal's waits spin a little before they sleep: a futex or eventfd wake-up of
// an idle vCPU costs several times a spin turn. A turn gives the CPU up
// with sched_yield, so that a process of ours on the same CPU (the worker the
// waiter waits for) runs at once. That pays only while the CPU's other
// runnable threads are ours. Beside a thread that uses its whole time slice (a
// data loader, a compiler, `yes`), the scheduler (CFS) hands the CPU to it for
// the rest of its slice on every yield, which is milliseconds; a spinner that
// would have seen its event in microseconds sees it milliseconds late.
// A sleeper, woken, preempts such a thread at once.
//
// So every turn is timed. A turn that kept the thread away longer than
// kStolenTurn means another thread ran a slice: the thread's spins stop
// (SpinAllowed() is false, and its waits go straight to sleep) for a back-off
// that doubles while contention is found again at each probe (kMinBackoff to
// kMaxBackoff), and starts over at kMinBackoff for a new episode. Under a
// steady hog a waiter thus loses one slice per kMaxBackoff. The state is per
// thread: each waiter learns about the CPU it runs on.
#ifndef SHOAL_BASE_SPIN_TURN_H_
#define SHOAL_BASE_SPIN_TURN_H_

#include <cstdint>

namespace shoal {

// The decision, apart from the clock (tests drive it with made-up times).
class SpinContention {
 public:
  // A hog's slice is 1-4 ms (the scheduler tick); our own processes'
  // bursts and a hypervisor's pauses stay mostly below 0.5 ms, and a bound
  // below them would stop spins that pay.
  static constexpr int64_t kStolenTurnNs = 500'000;        // 500 µs
  static constexpr int64_t kMinBackoffNs = 4'000'000;      // 4 ms
  static constexpr int64_t kMaxBackoffNs = 1'000'000'000;  // 1 s

  // Whether a wait may spin at `now_ns`.
  bool Allows(int64_t now_ns) const { return now_ns >= off_until_ns_; }
  // Records a turn that began at `start_ns` and ended at `end_ns`. Returns
  // false when it was stolen (longer than kStolenTurnNs): spinning is then
  // off until end_ns + the back-off.
  bool Record(int64_t start_ns, int64_t end_ns);

  int64_t backoff_ns() const { return backoff_ns_; }
  int64_t off_until_ns() const { return off_until_ns_; }

 private:
  int64_t off_until_ns_ = 0;
  int64_t backoff_ns_ = 0;
};

// The calling thread's SpinContention.
SpinContention& ThisThreadSpinContention();

// Whether the calling thread may spin now.
bool SpinAllowed();

// One spin turn that gives the CPU up (sched_yield), timed. Returns false
// when the turn was stolen: the caller stops spinning and sleeps.
bool YieldTurn();

// One busy turn of `pauses` CPU pauses (the CPU kept), timed likewise: a
// preemption in the middle counts as a stolen turn.
bool RelaxTurn(int pauses);

}  // namespace shoal

#endif  // SHOAL_BASE_SPIN_TURN_H_
