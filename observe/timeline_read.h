// Gathering a job's timeline on this machine: every ring of the job
// (observe/timeline_ring.h) copied for the last N seconds, and its Chrome
// trace-event JSON (what `shoal timeline` writes; Perfetto and
// chrome://tracing open it). The dashboard draws its task stream from
// GatherTimeline.
#ifndef SHOAL_OBSERVE_TIMELINE_READ_H_
#define SHOAL_OBSERVE_TIMELINE_READ_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "observe/timeline_ring.h"

namespace shoal::observe {

// Rings a gathering reads at most (the newest by writer pid are not
// preferred: /dev/shm's order); the rest are counted in skipped_rings.
inline constexpr size_t kMaxTimelineRings = 1024;

// One process's events (a track per thread: TimelineEvent::tid).
struct ProcessTimeline {
  int pid = 0;
  std::string label;         // "worker 3", "rank 1", "launcher 0", "client"
  uint64_t dropped = 0;      // events lost to a busy slot since the ring began
  bool overwritten = false;  // the ring wrapped: older events are gone
  std::vector<TimelineEvent> events;  // oldest first (by when they ended)
  std::vector<CollectiveCount> collectives;  // its collective tallies
};

struct Timeline {
  std::string job_id;
  int64_t since_ns = 0;  // CLOCK_MONOTONIC: the window's start
  int64_t until_ns = 0;  // ... and end (when gathered)
  std::vector<ProcessTimeline> processes;  // by pid
  size_t skipped_rings = 0;  // unreadable or over kMaxTimelineRings
};

// The events of job `job_id` on this machine that ended in the last `last`
// (absl::InfiniteDuration(): all the rings hold). Rings of another user, or
// with group/other permissions, are skipped. Errors: InvalidArgument (an
// empty job id), NotFound (no ring of that job here).
absl::StatusOr<Timeline> GatherTimeline(absl::string_view job_id,
                                        absl::Duration last);

// The collective tallies of every ring of job `job_id` on this machine (no
// events: `events` stay empty), by pid. Rings that cannot be read are
// counted in skipped_rings. No ring of the job is an empty Timeline.
// Errors: InvalidArgument (an empty job id).
absl::StatusOr<Timeline> GatherCollectiveTallies(absl::string_view job_id);

// The Chrome trace-event JSON of `t`: a process (pid, named by its label)
// per ring, a thread track per writing thread, spans as complete events
// ("ph":"X") and moments as instant events ("ph":"i"), times in
// microseconds from t.since_ns (or the earliest span's start, if earlier).
std::string TimelineToChromeJson(const Timeline& t);

// Gathers all the rings of job `job_id` hold and writes their JSON to
// `path` (made 0600, a link refused; "-": stdout). Errors: GatherTimeline's,
// Internal (the file).
absl::Status WriteJobTimeline(absl::string_view job_id,
                              const std::string& path);

// Writes `json` to `path` as WriteJobTimeline does.
absl::Status WriteTimelineFile(const std::string& path,
                               const std::string& json);

// Unlinks job `job_id`'s rings of this user on this machine: all of them, or
// with `only_dead` those whose writer is gone or is this process (a launcher
// at its end leaves another live launcher's ranks alone). Returns how many.
int RemoveTimelineRings(absl::string_view job_id, bool only_dead);

// The names the JSON gives event kinds ("task", "collective", ...).
const char* EventKindName(uint16_t kind);

}  // namespace shoal::observe

#endif  // SHOAL_OBSERVE_TIMELINE_READ_H_
