#include "observe/timeline_clock.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "base/monotonic_clock.h"

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace shoal::observe {
namespace {

#if defined(__x86_64__)

// The rate is measured over at least this much of the process's life before
// the counter is used.
constexpr int64_t kMinRateSpanNs = 10'000'000;
// A thread's anchor is used for at most this long.
constexpr int64_t kMaxAnchorSpanNs = 1'000'000'000;
// A pair of readings whose counter reads lie further apart than this was
// interrupted; it is taken again.
constexpr uint64_t kMaxPairTicks = 2000;
constexpr int kPairTries = 5;

inline uint64_t Ticks() { return __rdtsc(); }

// Both clocks read as close together as the tries allow: CLOCK_MONOTONIC and
// the counter's midpoint around it.
void ReadPair(uint64_t* ticks, int64_t* ns) {
  uint64_t best_width = ~uint64_t{0};
  for (int i = 0; i < kPairTries; ++i) {
    const uint64_t a = Ticks();
    const int64_t t = MonotonicNs();
    const uint64_t b = Ticks();
    if (b - a < best_width) {
      best_width = b - a;
      *ticks = a + (b - a) / 2;
      *ns = t;
    }
    if (best_width <= kMaxPairTicks) return;
  }
}

// Whether the kernel keeps CLOCK_MONOTONIC with the TSC: then the counter
// is invariant and in step across the machine's CPUs (the kernel checked).
bool KernelClockIsTsc() {
  FILE* f = std::fopen(
      "/sys/devices/system/clocksource/clocksource0/current_clocksource", "r");
  if (f == nullptr) return false;
  char name[32] = {};
  const bool read = std::fgets(name, sizeof(name), f) != nullptr;
  std::fclose(f);
  return read && std::strcmp(name, "tsc\n") == 0;
}

// The process's first pair of readings, which every thread measures the
// rate from; set once.
struct RateBase {
  bool usable = false;
  uint64_t ticks = 0;
  int64_t ns = 0;
};

const RateBase& Base() {
  static const RateBase base = [] {
    RateBase b;
    b.usable = KernelClockIsTsc();
    if (b.usable) ReadPair(&b.ticks, &b.ns);
    return b;
  }();
  return base;
}

// The calling thread's anchor: nanoseconds at `ticks`, nanoseconds per tick
// (32.32 fixed point) and how many ticks past `ticks` it may be used.
struct Anchor {
  uint64_t ticks = 0;
  int64_t ns = 0;
  uint64_t rate_q32 = 0;
  uint64_t span_ticks = 0;  // 0: none yet
};
thread_local Anchor t_anchor;

// A fresh anchor when the rate can be measured; CLOCK_MONOTONIC either way.
int64_t AnchorNow() {
  const RateBase& base = Base();
  if (!base.usable) return MonotonicNs();
  uint64_t ticks = 0;
  int64_t ns = 0;
  ReadPair(&ticks, &ns);
  const int64_t over_ns = ns - base.ns;
  const uint64_t over_ticks = ticks - base.ticks;
  if (over_ns < kMinRateSpanNs || over_ticks == 0) return ns;
  const uint64_t rate = static_cast<uint64_t>(
      (static_cast<unsigned __int128>(over_ns) << 32) / over_ticks);
  if (rate == 0) return ns;
  const int64_t span_ns = std::min(over_ns / 8, kMaxAnchorSpanNs);
  t_anchor.ticks = ticks;
  t_anchor.ns = ns;
  t_anchor.rate_q32 = rate;
  t_anchor.span_ticks = static_cast<uint64_t>(
      (static_cast<unsigned __int128>(span_ns) << 32) / rate);
  return ns;
}

#endif  // __x86_64__

}  // namespace

int64_t TimelineNowNs() {
#if defined(__x86_64__)
  const Anchor& a = t_anchor;
  const uint64_t since = Ticks() - a.ticks;
  if (since < a.span_ticks) {
    return a.ns +
           static_cast<int64_t>(
               (static_cast<unsigned __int128>(since) * a.rate_q32) >> 32);
  }
  return AnchorNow();
#else
  return MonotonicNs();
#endif
}

bool TimelineClockUsesTsc() {
#if defined(__x86_64__)
  (void)TimelineNowNs();
  return t_anchor.span_ticks != 0;
#else
  return false;
#endif
}

}  // namespace shoal::observe
