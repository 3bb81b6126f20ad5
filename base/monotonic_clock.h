// The monotonic clock in nanoseconds: what deadlines in shared memory are
// written in (every process of a node reads the same clock), and what spin
// turns are timed with.
#ifndef SHOAL_BASE_MONOTONIC_CLOCK_H_
#define SHOAL_BASE_MONOTONIC_CLOCK_H_

#include <time.h>

#include <cstdint>

namespace shoal {

// CLOCK_MONOTONIC now, in nanoseconds (a vDSO call, no system call).
inline int64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace shoal

#endif  // SHOAL_BASE_MONOTONIC_CLOCK_H_
