// `shoal timeline`: the last N seconds of a node (or a launched job) on this
// machine as Chrome trace-event JSON, which Perfetto (ui.perfetto.dev) and
// chrome://tracing open. It reads the job's rings in /dev/shm
// (observe/timeline_read.h) and asks no process anything.
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "coordinator/discovery.h"
#include "observe/timeline_read.h"
#include "tools/cli/args.h"
#include "tools/commands.h"

namespace shoal::cli {
int TimelineCommand(int argc, char** argv) {
  ArgParser p("shoal timeline [flags]",
              "Writes the last --seconds of a node (or of a launched job) on "
              "this machine\nas Chrome trace-event JSON: open it in "
              "ui.perfetto.dev or chrome://tracing.\nA track per worker, "
              "rank and thread; a span per task, actor call, collective\n"
              "call and shoal.span.");
  std::string& job_id = p.String(
      "job", "", "the node's or launched job's id (default: the node started last)");
  double& seconds =
      p.Double("seconds", 60, "how far back (0: all the rings hold)");
  std::string& out =
      p.String("out", "timeline.json", "the file to write ('-': stdout)");
  if (absl::Status s = p.Parse(argc, argv); !s.ok()) return Fail(s);
  if (seconds < 0) {
    return Fail(absl::InvalidArgumentError("--seconds must be 0 or more"));
  }
  std::string job = job_id;
  if (job.empty()) {
    absl::StatusOr<coordinator::Discovery> d = coordinator::ReadDiscovery();
    if (!d.ok()) return Fail(d.status());
    job = d->job_id;
  }
  absl::StatusOr<observe::Timeline> t = observe::GatherTimeline(
      job, seconds == 0 ? absl::InfiniteDuration() : absl::Seconds(seconds));
  if (!t.ok()) return Fail(t.status());
  if (absl::Status s =
          observe::WriteTimelineFile(out, observe::TimelineToChromeJson(*t));
      !s.ok()) {
    return Fail(s);
  }
  size_t events = 0;
  for (const observe::ProcessTimeline& pt : t->processes)
    events += pt.events.size();
  if (out != "-") {
    std::fprintf(stderr,
                 "timeline of job %s: %zu events of %zu processes -> %s "
                 "(open in ui.perfetto.dev)\n",
                 job.c_str(), events, t->processes.size(), out.c_str());
  }
  return 0;
}

}  // namespace shoal::cli
