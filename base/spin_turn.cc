#include "base/spin_turn.h"

#include <sched.h>

#include <algorithm>

#include "base/cpu_relax.h"
#include "base/monotonic_clock.h"

namespace shoal {

bool SpinContention::Record(int64_t start_ns, int64_t end_ns) {
  if (end_ns - start_ns <= kStolenTurnNs) return true;
  // Found again within a back-off of the last off period's end: the same
  // episode, probed too soon; else a new one.
  if (backoff_ns_ == 0 || end_ns - off_until_ns_ > backoff_ns_) {
    backoff_ns_ = kMinBackoffNs;
  } else {
    backoff_ns_ = std::min(backoff_ns_ * 2, kMaxBackoffNs);
  }
  off_until_ns_ = end_ns + backoff_ns_;
  return false;
}

SpinContention& ThisThreadSpinContention() {
  thread_local SpinContention state;
  return state;
}

bool SpinAllowed() { return ThisThreadSpinContention().Allows(MonotonicNs()); }

bool YieldTurn() {
  const int64_t start = MonotonicNs();
  sched_yield();
  return ThisThreadSpinContention().Record(start, MonotonicNs());
}

bool RelaxTurn(int pauses) {
  const int64_t start = MonotonicNs();
  for (int i = 0; i < pauses; ++i) CpuRelax();
  return ThisThreadSpinContention().Record(start, MonotonicNs());
}

}  // namespace shoal
