// PhaseTimes: where one kind of collective call spends its time, phase by
// phase, for finding what a small call waits on. Off unless the environment
// names a directory in SHOAL_COLL_TRACE; then every call's phases are
// timed (clock_gettime(CLOCK_MONOTONIC), ~20 ns each) and the destructor
// writes `<dir>/<label>.<pid>.txt`: per phase the count, the 10th, 50th, 90th
// and 99th percentiles, the longest and the mean in microseconds. Disabled,
// each call costs one predictable branch.
//
// Not thread-safe: one call at a time (as a communicator's collectives).
#ifndef SHOAL_COLLECTIVES_PHASE_TIMES_H_
#define SHOAL_COLLECTIVES_PHASE_TIMES_H_

#include <sys/resource.h>
#include <time.h>

#include <cstdint>
#include <string>
#include <vector>

namespace shoal::collectives {

class PhaseTimes {
 public:
  // `label` names the output file (letters, digits, '.', '-', '_');
  // `phases` the phases in the order a call passes them.
  PhaseTimes(std::string label, std::vector<std::string> phases);
  ~PhaseTimes();
  PhaseTimes(const PhaseTimes&) = delete;
  PhaseTimes& operator=(const PhaseTimes&) = delete;

  bool enabled() const { return !dir_.empty(); }
  // A call starts: the next Lap ends its first phase.
  void Start() {
    if (enabled()) last_ns_ = NowNs();
  }
  // Phase `phase` ended now (it began at the previous Start or Lap).
  void Lap(int phase) {
    if (!enabled()) return;
    const int64_t now = NowNs();
    if (samples_[phase].size() < kMaxSamples) {
      samples_[phase].push_back(static_cast<float>(now - last_ns_) * 1e-3f);
    }
    if (raw_ && raw_events_.size() < kMaxSamples) {
      rusage ru;
      getrusage(RUSAGE_THREAD, &ru);
      raw_events_.push_back(RawEvent{now, phase, ru.ru_nvcsw, ru.ru_nivcsw});
    }
    last_ns_ = now;
  }

 private:
  static constexpr size_t kMaxSamples = 1 << 20;
  // SHOAL_COLL_TRACE_RAW=1 (with SHOAL_COLL_TRACE): every lap's end time
  // (CLOCK_MONOTONIC, comparable across the processes of one machine, also
  // across network namespaces) and the thread's voluntary and involuntary
  // context switches so far, written to `<label>.<pid>.raw`: to line up one
  // slow call across ranks and tell a preemption from a sleep.
  struct RawEvent {
    int64_t ns;
    int phase;
    long nvcsw, nivcsw;
  };
  bool raw_ = false;
  std::vector<RawEvent> raw_events_;
  static int64_t NowNs() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
  }

  const std::string label_;
  const std::vector<std::string> phases_;
  std::string dir_;
  std::vector<std::vector<float>> samples_;  // µs, per phase
  int64_t last_ns_ = 0;
};

}  // namespace shoal::collectives

#endif  // SHOAL_COLLECTIVES_PHASE_TIMES_H_
