// What the dashboard's endpoints answer (observe/dashboard_server.h): a
// node's status and a job's timeline as the JSON the page reads. The shapes
// are the page's contract (observe/dashboard_page.html reads them).
//
// /api/status:
//   {"ok":true,"job_id":"...","coordinator_pid":N,"uptime_ms":N,
//    "queued":N,"running":N,"submitted":N,"completed":N,"results_held":N,
//    "store":{"capacity_bytes":N,"used_bytes":N,"objects":N,"evictions":N,
//             "clients":N},
//    "workers":[{"id":N,"pid":N,"state":"idle","cpu":12.5|null,
//                "rss_bytes":N,"gpus":"0,1","done":N,"failed":N,
//                "restarts":N,"role":"pool"|"actor <id> <class>"}]}
//   or {"ok":false,"error":"..."} when the node did not answer.
//
// /api/timeline:
//   {"ok":true,"job_id":"...","window_ms":60000,
//    "processes":[{"pid":N,"label":"worker 0","omitted":N,"dropped":N,
//      "events":[{"k":"task","n":"name","d":"detail","s":-1234.5,
//                 "e":-1200.25,"c":0,"id":N,"b":N,"m":N,"u":1.5}]}]}
//   Times are milliseconds before the gathering (so 0 is now, -60000 a
//   minute ago); "c" is the outcome's absl::StatusCode (0: ok); "m" (only
//   above 1) counts the short events merged into one span (below) and "u"
//   adds their own durations in milliseconds;
//   "omitted" counts the process's older spans left out past
//   kMaxDashboardEvents.
//
//   A span narrower than a pixel of a page-wide chart shows nothing of its
//   own, and a worker running thousands of tiny tasks a second would send
//   megabytes a poll: successive events of one thread with the same kind
//   and name, each ok and shorter than the window / kDashboardMergeSlices,
//   less than that apart, become one span counting them.
//   Or {"ok":false,"error":"..."}: no ring of the job on this machine.
#ifndef SHOAL_OBSERVE_DASHBOARD_DATA_H_
#define SHOAL_OBSERVE_DASHBOARD_DATA_H_

#include <cstddef>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "ipc/messages.h"
#include "observe/timeline_read.h"

namespace shoal::observe {

// Events per process /api/timeline sends at most (the newest): a Gantt row
// a page wide shows no more, and a busy worker's minute stays one response.
inline constexpr size_t kMaxDashboardEvents = 4000;
// The window divided by this is the shortest event sent on its own.
inline constexpr int64_t kDashboardMergeSlices = 4000;

// The CPU each worker used since the previous sample, in percent of one
// core, from /proc/<pid>/stat (so only for a node on this machine, as `shoal
// top` shows it). Not thread-safe: one sampler per status source.
class CpuSampler {
 public:
  // Samples the pids of `st`'s workers; returns pid -> percent for those
  // also sampled last time (the first sample knows none).
  std::map<int, double> Sample(const ipc::NodeStatus& st);

 private:
  int64_t last_ns_ = 0;            // CLOCK_MONOTONIC of the last sample
  std::map<int, long long> last_;  // pid -> clock ticks then
};

// /api/status for `st`; `cpu` by pid (a worker without an entry: null).
std::string DashboardStatusJson(const ipc::NodeStatus& st,
                                const std::map<int, double>& cpu);

// /api/timeline for `t`, at most `max_events` per process (the newest).
std::string DashboardTimelineJson(const Timeline& t,
                                  size_t max_events = kMaxDashboardEvents);

// {"ok":false,"error":"<message of s>"}.
std::string DashboardErrorJson(const absl::Status& s);

// `s` as a JSON string literal (quotes included): quotes, backslashes and
// control characters escaped, bytes above 0x7e as \u00XX, so any input
// gives valid ASCII JSON.
std::string JsonString(absl::string_view s);

}  // namespace shoal::observe

#endif  // SHOAL_OBSERVE_DASHBOARD_DATA_H_
