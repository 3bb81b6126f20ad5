#include "observe/dashboard_data.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/monotonic_clock.h"

namespace shoal::observe {
namespace {

// A process's CPU time (user + system) in clock ticks, or -1.
long long CpuTicks(int pid) {
  if (pid <= 0) return -1;
  std::ifstream f(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (!std::getline(f, line)) return -1;
  // After the command name (which may hold spaces and parentheses), utime
  // and stime are the 12th and 13th fields.
  const size_t close = line.rfind(')');
  if (close == std::string::npos || close + 2 > line.size()) return -1;
  std::vector<absl::string_view> rest = absl::StrSplit(
      absl::string_view(line).substr(close + 2), ' ', absl::SkipEmpty());
  long long utime = 0, stime = 0;
  if (rest.size() < 13 || !absl::SimpleAtoi(rest[11], &utime) ||
      !absl::SimpleAtoi(rest[12], &stime)) {
    return -1;
  }
  return utime + stime;
}

std::string Field(const char* f, size_t size) {
  return std::string(f, strnlen(f, size));
}

double MillisBefore(int64_t ns, int64_t until_ns) {
  return static_cast<double>(ns - until_ns) / 1e6;
}

// One bar of the page: an event, or successive short ones merged.
struct Span {
  const TimelineEvent* first;
  int64_t start_ns;
  int64_t end_ns;
  uint64_t bytes;
  int64_t busy_ns;  // the events' own durations, added
  uint32_t count;
  bool short_tail;  // its last event was shorter than the threshold
};

bool Mergeable(EventKind k) {
  return k == EventKind::kTask || k == EventKind::kActorCall ||
         k == EventKind::kCollective || k == EventKind::kSpan;
}

// `events` (ordered by end) as spans, successive short ok events of one
// thread, kind and name within `merge_ns` of each other merged.
std::vector<Span> Spans(const std::vector<TimelineEvent>& events,
                        int64_t merge_ns) {
  std::vector<Span> out;
  out.reserve(events.size());
  // The open span of each (thread, kind): where the next event may join.
  std::map<std::pair<uint32_t, uint16_t>, size_t> open;
  for (const TimelineEvent& e : events) {
    const bool is_short = e.code == 0 && e.end_ns - e.start_ns < merge_ns &&
                          Mergeable(static_cast<EventKind>(e.kind));
    auto it = open.find({e.tid, e.kind});
    if (is_short && it != open.end()) {
      Span& s = out[it->second];
      if (s.short_tail && e.start_ns >= s.start_ns &&
          e.start_ns - s.end_ns < merge_ns &&
          std::strncmp(s.first->name, e.name, sizeof(e.name)) == 0) {
        s.end_ns = std::max(s.end_ns, e.end_ns);
        s.bytes += e.bytes;
        s.busy_ns += e.end_ns - e.start_ns;
        ++s.count;
        continue;
      }
    }
    out.push_back(Span{&e, e.start_ns, e.end_ns, e.bytes, e.end_ns - e.start_ns,
                       1, is_short});
    open[{e.tid, e.kind}] = out.size() - 1;
  }
  return out;
}

}  // namespace

std::map<int, double> CpuSampler::Sample(const ipc::NodeStatus& st) {
  const int64_t now = MonotonicNs();
  const long hz = sysconf(_SC_CLK_TCK);
  const double seconds = static_cast<double>(now - last_ns_) / 1e9;
  std::map<int, long long> ticks;
  std::map<int, double> out;
  for (const ipc::WorkerStatus& w : st.workers()) {
    const long long t = CpuTicks(w.pid());
    if (t < 0) continue;
    ticks[w.pid()] = t;
    auto then = last_.find(w.pid());
    if (then != last_.end() && last_ns_ > 0 && seconds > 0 && hz > 0 &&
        t >= then->second) {
      out[w.pid()] =
          100.0 * static_cast<double>(t - then->second) / hz / seconds;
    }
  }
  last_ = std::move(ticks);
  last_ns_ = now;
  return out;
}

std::string JsonString(absl::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c < 0x20 || c > 0x7e) {
      absl::StrAppendFormat(&out, "\\u%04x", c);
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  out.push_back('"');
  return out;
}

std::string DashboardErrorJson(const absl::Status& s) {
  return absl::StrCat("{\"ok\":false,\"error\":", JsonString(s.message()), "}");
}

std::string DashboardStatusJson(const ipc::NodeStatus& st,
                                const std::map<int, double>& cpu) {
  std::string out = absl::StrFormat(
      "{\"ok\":true,\"job_id\":%s,\"coordinator_pid\":%d,\"uptime_ms\":%d,"
      "\"queued\":%u,\"running\":%u,\"submitted\":%u,\"completed\":%u,"
      "\"results_held\":%u,",
      JsonString(st.job_id()), st.coordinator_pid(), st.uptime_ms(),
      st.queued(), st.running(), st.submitted(), st.completed(),
      st.results_held());
  const ipc::StoreStats& s = st.store();
  absl::StrAppendFormat(
      &out,
      "\"store\":{\"capacity_bytes\":%u,\"used_bytes\":%u,\"objects\":%u,"
      "\"evictions\":%u,\"clients\":%u},\"workers\":[",
      s.capacity_bytes(), s.used_bytes(), s.objects(), s.evictions(),
      s.clients());
  bool first = true;
  for (const ipc::WorkerStatus& w : st.workers()) {
    if (!first) out.push_back(',');
    first = false;
    auto c = cpu.find(w.pid());
    absl::StrAppendFormat(
        &out,
        "{\"id\":%u,\"pid\":%d,\"state\":%s,\"cpu\":%s,\"rss_bytes\":%u,"
        "\"gpus\":%s,\"done\":%u,\"failed\":%u,\"restarts\":%u,\"role\":%s}",
        w.id(), w.pid(), JsonString(w.state()),
        c == cpu.end() ? std::string("null")
                       : absl::StrFormat("%.1f", c->second),
        w.rss_bytes(), JsonString(w.gpus()), w.tasks_done(), w.tasks_failed(),
        w.restarts(), JsonString(w.role().empty() ? "pool" : w.role()));
  }
  out += "]}";
  return out;
}

std::string DashboardTimelineJson(const Timeline& t, size_t max_events) {
  std::string out = absl::StrFormat(
      "{\"ok\":true,\"job_id\":%s,\"window_ms\":%.0f,\"processes\":[",
      JsonString(t.job_id), static_cast<double>(t.until_ns - t.since_ns) / 1e6);
  const int64_t merge_ns = (t.until_ns - t.since_ns) / kDashboardMergeSlices;
  bool first_process = true;
  for (const ProcessTimeline& p : t.processes) {
    if (!first_process) out.push_back(',');
    first_process = false;
    const std::vector<Span> spans = Spans(p.events, merge_ns);
    const size_t omitted =
        spans.size() > max_events ? spans.size() - max_events : 0;
    absl::StrAppendFormat(
        &out,
        "{\"pid\":%d,\"label\":%s,\"omitted\":%u,\"dropped\":%u,\"events\":[",
        p.pid, JsonString(p.label), omitted, p.dropped);
    for (size_t i = omitted; i < spans.size(); ++i) {
      const Span& s = spans[i];
      const TimelineEvent& e = *s.first;
      if (i > omitted) out.push_back(',');
      absl::StrAppendFormat(
          &out,
          "{\"k\":\"%s\",\"n\":%s,\"d\":%s,\"s\":%.3f,\"e\":%.3f,\"c\":%d,"
          "\"id\":%u,\"b\":%u",
          EventKindName(e.kind), JsonString(Field(e.name, sizeof(e.name))),
          JsonString(Field(e.detail, sizeof(e.detail))),
          MillisBefore(s.start_ns, t.until_ns),
          MillisBefore(s.end_ns, t.until_ns), e.code, e.id, s.bytes);
      if (s.count > 1) {
        absl::StrAppendFormat(&out, ",\"m\":%u,\"u\":%.3f", s.count,
                              static_cast<double>(s.busy_ns) / 1e6);
      }
      out.push_back('}');
    }
    out += "]}";
  }
  out += "]}";
  return out;
}

}  // namespace shoal::observe
