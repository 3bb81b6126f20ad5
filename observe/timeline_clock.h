// The timeline's clock: CLOCK_MONOTONIC in nanoseconds, as every ring's
// events carry it, read from the CPU's time-stamp counter where the kernel
// itself keeps time with it (an invariant TSC, the clock source "tsc").
//
// A collective call's span takes two timestamps around a call of a couple of
// microseconds, so the clock's cost is part of what recording costs. The
// counter is read without a fence and turned into nanoseconds with the
// thread's anchor (a CLOCK_MONOTONIC reading and the counter beside it) and
// the process's rate (nanoseconds per tick, measured against CLOCK_MONOTONIC
// over the process's life so far). A thread takes a fresh anchor once its
// last is older than an eighth of the time the rate was measured over (at
// most a second), so the extrapolation's error stays within a few
// nanoseconds of the kernel's clock; readings of one thread are monotonic
// between anchors and may step back by that much at one.
//
// Elsewhere (another architecture, a clock source other than the TSC, the
// process's first milliseconds while the rate is measured) it reads
// CLOCK_MONOTONIC.
#ifndef SHOAL_OBSERVE_TIMELINE_CLOCK_H_
#define SHOAL_OBSERVE_TIMELINE_CLOCK_H_

#include <cstdint>

namespace shoal::observe {

// CLOCK_MONOTONIC now, in nanoseconds, as the timeline reads it. Lock-free,
// no system call. Thread-safe.
int64_t TimelineNowNs();

// Whether TimelineNowNs reads the time-stamp counter (false until the
// process's rate is measured, and always where the counter is not used).
bool TimelineClockUsesTsc();

}  // namespace shoal::observe

#endif  // SHOAL_OBSERVE_TIMELINE_CLOCK_H_
