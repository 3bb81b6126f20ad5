#include "observe/dashboard_data.h"

#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>
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
  bool first_process = true;
  for (const ProcessTimeline& p : t.processes) {
    if (!first_process) out.push_back(',');
    first_process = false;
    const size_t omitted =
        p.events.size() > max_events ? p.events.size() - max_events : 0;
    absl::StrAppendFormat(
        &out,
        "{\"pid\":%d,\"label\":%s,\"omitted\":%u,\"dropped\":%u,\"events\":[",
        p.pid, JsonString(p.label), omitted, p.dropped);
    for (size_t i = omitted; i < p.events.size(); ++i) {
      const TimelineEvent& e = p.events[i];
      if (i > omitted) out.push_back(',');
      absl::StrAppendFormat(
          &out,
          "{\"k\":\"%s\",\"n\":%s,\"d\":%s,\"s\":%.3f,\"e\":%.3f,\"c\":%d,"
          "\"id\":%u,\"b\":%u}",
          EventKindName(e.kind), JsonString(Field(e.name, sizeof(e.name))),
          JsonString(Field(e.detail, sizeof(e.detail))),
          MillisBefore(e.start_ns, t.until_ns),
          MillisBefore(e.end_ns, t.until_ns), e.code, e.id, e.bytes);
    }
    out += "]}";
  }
  out += "]}";
  return out;
}

}  // namespace shoal::observe
