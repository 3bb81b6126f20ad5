// The timeline's recording side: this process's ring (observe/timeline_ring.h)
// and the calls that put events in it. Recording is always on once a process
// started its ring; before that, and in a process that never does, every
// Record* call is one predictable branch.
//
// Who starts a ring: a worker ("worker <id>", "actor <id>"), a launched rank
// ("rank <r>", at launch::Init), a launcher ("launcher <node>"), and a
// process that marks a span of its own code (Python's shoal.span). The node
// (coordinator's janitor) or the launcher removes the rings of its job when
// it ends.
#ifndef SHOAL_OBSERVE_TIMELINE_H_
#define SHOAL_OBSERVE_TIMELINE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "observe/timeline_clock.h"
#include "observe/timeline_ring.h"

namespace shoal::observe {

// Events a ring holds: $SHOAL_TIMELINE_EVENTS when set (64 to 1 Mi, rounded
// up to a power of two), else this. Each event takes 128 bytes of /dev/shm,
// touched only when written: 2 MiB per process once the ring has wrapped.
inline constexpr uint64_t kDefaultTimelineEvents = 16384;

// Starts this process's ring for job `job_id`, labelled `label`. Once per
// process: later calls return OK and keep the first ring (the label stays).
// With SHOAL_TIMELINE=0 in the environment it starts none (OK: the process
// records nothing). Errors: TimelineRing::Create's.
absl::Status StartTimeline(absl::string_view job_id, absl::string_view label);

// Whether this process records (StartTimeline succeeded).
bool TimelineOn();

// The ring's /dev/shm name, or "" when not recording.
std::string TimelineSegment();

// The calling thread's id as events carry it (gettid, read once per thread).
uint32_t TimelineThreadId();

// Appends an event of `head`'s numbers named `name` and `detail` (cut to
// their fields) to this process's ring, its tid set to the caller's when 0.
// No-op when not recording.
void Record(TimelineEventHead head, absl::string_view name,
            absl::string_view detail = {});

// A span of `kind` from `start_ns` to now (CLOCK_MONOTONIC, as
// TimelineNowNs reads it). No-op when not
// recording.
void RecordSpan(EventKind kind, int64_t start_ns, absl::string_view name,
                absl::string_view detail = {}, uint64_t bytes = 0,
                int code = 0);

// One collective call from `start_ns` to now: its span (kCollective: `op`,
// `backend`, `bytes`, the outcome, the time it waited for peers, taken with
// TakePeerWait) and its tally in the ring's header (what the launcher's
// metrics read). No-op when not recording.
void RecordCollective(int64_t start_ns, absl::string_view op,
                      absl::string_view backend, uint64_t bytes, int code);

// The time the calling thread waited for its peers in the collective call it
// runs: a backend adds each wait (AddPeerWait), the communicator takes the
// sum when the call starts (to clear it) and when it records the call.
void AddPeerWait(int64_t ns);
int64_t TakePeerWait();

// A collective call's start (TimelineNowNs), handed by the communicator that
// times the call to the backend that sets its deadline, so that one clock
// reading serves both: SetCallStart before running the call (0: none),
// TakeCallStart where the deadline is set (then 0 until the next set).
void SetCallStart(int64_t ns);
int64_t TakeCallStart();

// A moment (a restart, a failure). No-op when not recording.
void RecordInstant(absl::string_view name, absl::string_view detail = {},
                   int code = 0);

// Marks the scope as a span of `kind` named `name` (copied at the end).
class ScopedSpan {
 public:
  explicit ScopedSpan(absl::string_view name, EventKind kind = EventKind::kSpan)
      : name_(name),
        kind_(kind),
        start_ns_(TimelineOn() ? TimelineNowNs() : 0) {}
  ~ScopedSpan() {
    if (start_ns_ != 0) RecordSpan(kind_, start_ns_, name_);
  }
  ScopedSpan(const ScopedSpan&) = delete;
  ScopedSpan& operator=(const ScopedSpan&) = delete;

 private:
  absl::string_view name_;
  EventKind kind_;
  int64_t start_ns_;
};

}  // namespace shoal::observe

#endif  // SHOAL_OBSERVE_TIMELINE_H_
