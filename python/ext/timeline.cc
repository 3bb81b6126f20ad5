// shoal._shoal's timeline functions (python/shoal/_timeline.py): this
// process's ring (observe/timeline.h) and the gathering of a job's rings
// (observe/timeline_read.h).
#include "observe/timeline.h"

#include <pybind11/pybind11.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "observe/timeline_read.h"
#include "python/ext/common.h"
#include "python/ext/module.h"

namespace shoal::pyext {

void DefineTimeline(py::module_& m) {
  m.def(
      "timeline_start",
      [](const std::string& job_id, const std::string& label) {
        Check(observe::StartTimeline(job_id, label));
        return observe::TimelineSegment();
      },
      py::arg("job_id"), py::arg("label"),
      "Starts this process's timeline ring (once; later calls keep the "
      "first). Returns its /dev/shm name.");
  m.def("timeline_on", &observe::TimelineOn,
        "Whether this process records a timeline.");
  m.def("timeline_now", &observe::TimelineNowNs,
        "CLOCK_MONOTONIC in nanoseconds, as the timeline reads it.");
  m.def(
      "timeline_span",
      [](const std::string& name, int64_t start_ns, const std::string& detail,
         int code) {
        observe::RecordSpan(observe::EventKind::kSpan, start_ns, name, detail,
                            0, code);
      },
      py::arg("name"), py::arg("start_ns"), py::arg("detail") = "",
      py::arg("code") = 0,
      "Records a span from start_ns to now on the calling thread's track.");
  m.def(
      "timeline_json",
      [](const std::string& job_id, double seconds) {
        absl::StatusOr<observe::Timeline> t;
        {
          py::gil_scoped_release release;
          t = observe::GatherTimeline(job_id, seconds <= 0
                                                  ? absl::InfiniteDuration()
                                                  : absl::Seconds(seconds));
        }
        Check(t.status());
        return py::bytes(observe::TimelineToChromeJson(*t));
      },
      py::arg("job_id"), py::arg("seconds"),
      "The Chrome trace-event JSON of job_id's last `seconds` (0: all).");
}

}  // namespace shoal::pyext
