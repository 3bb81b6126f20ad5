#include "observe/timeline_read.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/monotonic_clock.h"

namespace shoal::observe {
namespace {

// `s` as a JSON string's contents: quotes, backslashes and control
// characters escaped, and every byte above 0x7f written as \u00XX, so the
// output is valid JSON (and ASCII) whatever a ring holds.
void AppendJsonString(std::string* out, absl::string_view s) {
  out->push_back('"');
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(static_cast<char>(c));
    } else if (c < 0x20 || c > 0x7e) {
      absl::StrAppendFormat(out, "\\u%04x", c);
    } else {
      out->push_back(static_cast<char>(c));
    }
  }
  out->push_back('"');
}

std::string Field(const char* f, size_t size) {
  return std::string(f, strnlen(f, size));
}

double Micros(int64_t ns) { return static_cast<double>(ns) / 1000.0; }

void AppendMeta(std::string* out, const char* what, int pid, uint32_t tid,
                absl::string_view name) {
  absl::StrAppendFormat(out,
                        "{\"ph\":\"M\",\"name\":\"%s\",\"pid\":%d,\"tid\":%u,"
                        "\"ts\":0,\"args\":{\"name\":",
                        what, pid, tid);
  AppendJsonString(out, name);
  out->append("}},\n");
}

// The event's "args" object.
void AppendArgs(std::string* out, const TimelineEvent& e) {
  const auto kind = static_cast<EventKind>(e.kind);
  const std::string detail = Field(e.detail, sizeof(e.detail));
  out->append("\"args\":{");
  absl::StrAppendFormat(
      out, "\"outcome\":\"%s\"",
      e.code == 0
          ? "ok"
          : absl::StatusCodeToString(static_cast<absl::StatusCode>(e.code)));
  switch (kind) {
    case EventKind::kTask:
    case EventKind::kActorCall:
      absl::StrAppendFormat(out, ",\"task_id\":%u", e.id);
      if (e.aux_ns > 0 && e.aux_ns <= e.start_ns) {
        absl::StrAppendFormat(out, ",\"queued_us\":%.3f",
                              Micros(e.start_ns - e.aux_ns));
      }
      break;
    case EventKind::kCollective:
      absl::StrAppendFormat(out, ",\"bytes\":%u,\"wait_us\":%.3f", e.bytes,
                            Micros(e.aux_ns));
      break;
    case EventKind::kStorePut:
    case EventKind::kStoreGet:
      absl::StrAppendFormat(out, ",\"bytes\":%u", e.bytes);
      break;
    default:
      if (e.bytes != 0) absl::StrAppendFormat(out, ",\"bytes\":%u", e.bytes);
      break;
  }
  if (!detail.empty()) {
    out->append(kind == EventKind::kCollective ? ",\"backend\":"
                                               : ",\"detail\":");
    AppendJsonString(out, detail);
  }
  out->append("}");
}

// The job's ring names in /dev/shm, sorted; `pids` gets their writers.
std::vector<std::string> JobRings(absl::string_view job_id,
                                  std::vector<int>* pids) {
  std::vector<std::pair<std::string, int>> found;
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return {};
  while (dirent* ent = readdir(dir)) {
    int pid = 0;
    if (IsTimelineSegmentOf(ent->d_name, job_id, &pid))
      found.emplace_back(ent->d_name, pid);
  }
  closedir(dir);
  std::sort(found.begin(), found.end());
  std::vector<std::string> names;
  for (auto& [name, pid] : found) {
    names.push_back(name);
    if (pids != nullptr) pids->push_back(pid);
  }
  return names;
}

// Copies `segments` (at most kMaxTimelineRings; the rest and the unreadable
// counted in t->skipped_rings) into t->processes, by pid: their tallies, and
// with `events` their events that ended since t->since_ns.
void ReadRings(std::vector<std::string> segments, bool events, Timeline* t) {
  if (segments.size() > kMaxTimelineRings) {
    t->skipped_rings = segments.size() - kMaxTimelineRings;
    segments.resize(kMaxTimelineRings);
  }
  for (const std::string& seg : segments) {
    absl::StatusOr<RingSnapshot> snap = ReadRing(seg, t->since_ns, events);
    if (!snap.ok()) {
      ++t->skipped_rings;
      continue;
    }
    ProcessTimeline p;
    p.pid = snap->pid;
    p.label = std::move(snap->label);
    p.dropped = snap->dropped;
    p.overwritten = snap->written > snap->capacity;
    p.events = std::move(snap->events);
    p.collectives = std::move(snap->collectives);
    t->processes.push_back(std::move(p));
  }
  std::sort(t->processes.begin(), t->processes.end(),
            [](const ProcessTimeline& a, const ProcessTimeline& b) {
              return a.pid < b.pid;
            });
}

}  // namespace

const char* EventKindName(uint16_t kind) {
  switch (static_cast<EventKind>(kind)) {
    case EventKind::kSpan:
      return "span";
    case EventKind::kTask:
      return "task";
    case EventKind::kActorCall:
      return "actor_call";
    case EventKind::kStorePut:
      return "store_put";
    case EventKind::kStoreGet:
      return "store_get";
    case EventKind::kCollective:
      return "collective";
    case EventKind::kLauncher:
      return "launcher";
    case EventKind::kInstant:
      return "instant";
  }
  return "other";
}

absl::StatusOr<Timeline> GatherTimeline(absl::string_view job_id,
                                        absl::Duration last) {
  if (job_id.empty()) return absl::InvalidArgumentError("no job id");
  Timeline t;
  t.job_id = std::string(job_id);
  t.until_ns = MonotonicNs();
  t.since_ns =
      last == absl::InfiniteDuration()
          ? 0
          : std::max<int64_t>(0, t.until_ns - absl::ToInt64Nanoseconds(last));
  std::vector<std::string> segments = JobRings(job_id, nullptr);
  if (segments.empty()) {
    return absl::NotFoundError(absl::StrCat(
        "no timeline of job ", job_id,
        " on this machine (is it running here, and started by this user?)"));
  }
  ReadRings(std::move(segments), /*events=*/true, &t);
  return t;
}

std::string TimelineToChromeJson(const Timeline& t) {
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  // Times count from the window's start, or from the earliest span's start
  // when one began before it, so no time is negative.
  int64_t base_ns = t.since_ns;
  for (const ProcessTimeline& p : t.processes) {
    for (const TimelineEvent& e : p.events)
      base_ns = std::min(base_ns, e.start_ns);
  }
  int sort_index = 0;
  for (const ProcessTimeline& p : t.processes) {
    AppendMeta(&out, "process_name", p.pid, 0,
               p.label.empty() ? absl::StrCat("pid ", p.pid)
                               : absl::StrCat(p.label, " (pid ", p.pid, ")"));
    absl::StrAppendFormat(&out,
                          "{\"ph\":\"M\",\"name\":\"process_sort_index\","
                          "\"pid\":%d,\"tid\":0,\"ts\":0,"
                          "\"args\":{\"sort_index\":%d}},\n",
                          p.pid, sort_index++);
    std::set<uint32_t> tids;
    for (const TimelineEvent& e : p.events) tids.insert(e.tid);
    for (uint32_t tid : tids) {
      AppendMeta(&out, "thread_name", p.pid, tid,
                 static_cast<int>(tid) == p.pid ? std::string("main")
                                                : absl::StrCat("thread ", tid));
    }
    for (const TimelineEvent& e : p.events) {
      const double ts = Micros(e.start_ns - base_ns);
      out.append("{\"name\":");
      AppendJsonString(&out, Field(e.name, sizeof(e.name)));
      absl::StrAppendFormat(&out, ",\"cat\":\"%s\",", EventKindName(e.kind));
      if (static_cast<EventKind>(e.kind) == EventKind::kInstant) {
        absl::StrAppendFormat(&out, "\"ph\":\"i\",\"s\":\"t\",\"ts\":%.3f,",
                              ts);
      } else {
        absl::StrAppendFormat(&out, "\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,",
                              ts, Micros(e.end_ns - e.start_ns));
      }
      absl::StrAppendFormat(&out, "\"pid\":%d,\"tid\":%u,", p.pid, e.tid);
      AppendArgs(&out, e);
      out.append("},\n");
    }
  }
  // A last metadata event closes the list without a trailing comma.
  absl::StrAppendFormat(&out,
                        "{\"ph\":\"M\",\"name\":\"shoal_timeline\",\"pid\":0,"
                        "\"tid\":0,\"ts\":0,\"args\":{\"job\":");
  AppendJsonString(&out, t.job_id);
  absl::StrAppendFormat(&out,
                        ",\"monotonic_start_ns\":%d,\"monotonic_end_ns\":%d,"
                        "\"skipped_rings\":%u}}\n]}\n",
                        base_ns, t.until_ns, t.skipped_rings);
  return out;
}

absl::Status WriteTimelineFile(const std::string& path,
                               const std::string& json) {
  const int fd =
      path == "-"
          ? STDOUT_FILENO
          : open(path.c_str(),
                 O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("cannot write ", path, ": ", strerror(errno)));
  }
  size_t done = 0;
  while (done < json.size()) {
    const ssize_t n = write(fd, json.data() + done, json.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      if (fd != STDOUT_FILENO) close(fd);
      return absl::InternalError(
          absl::StrCat("writing ", path, ": ", strerror(err)));
    }
    done += static_cast<size_t>(n);
  }
  if (fd != STDOUT_FILENO && close(fd) != 0) {
    return absl::InternalError(
        absl::StrCat("closing ", path, ": ", strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status WriteJobTimeline(absl::string_view job_id,
                              const std::string& path) {
  absl::StatusOr<Timeline> t = GatherTimeline(job_id, absl::InfiniteDuration());
  if (!t.ok()) return t.status();
  return WriteTimelineFile(path, TimelineToChromeJson(*t));
}

absl::StatusOr<Timeline> GatherCollectiveTallies(absl::string_view job_id) {
  if (job_id.empty()) return absl::InvalidArgumentError("no job id");
  Timeline t;
  t.job_id = std::string(job_id);
  t.since_ns = t.until_ns = MonotonicNs();
  ReadRings(JobRings(job_id, nullptr), /*events=*/false, &t);
  return t;
}

int RemoveTimelineRings(absl::string_view job_id, bool only_dead) {
  std::vector<int> pids;
  const std::vector<std::string> names = JobRings(job_id, &pids);
  int removed = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    if (only_dead && pids[i] != getpid() &&
        (kill(pids[i], 0) == 0 || errno != ESRCH)) {
      continue;
    }
    const std::string path = absl::StrCat("/dev/shm/", names[i]);
    struct stat st;
    // /dev/shm is sticky: a file of ours cannot be swapped for another
    // user's between the two calls.
    if (lstat(path.c_str(), &st) == 0 && st.st_uid == geteuid() &&
        unlink(path.c_str()) == 0) {
      ++removed;
    }
  }
  return removed;
}

}  // namespace shoal::observe
