// `shoal top`: a live view of a node, refreshed each second — its tasks per
// second, queue, store use and workers (state, CPU, memory, GPUs, task
// counts). Keys: q quits; c, m, d, i sort the workers by CPU, memory, tasks
// done or id. The figures are the node's status (`shoal status`), asked once
// per refresh; CPU comes from each worker's /proc/<pid>/stat when the node
// is on this machine.
#include <poll.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "coordinator/client.h"
#include "tools/bench/bench_util.h"
#include "tools/cli/args.h"
#include "tools/commands.h"

namespace shoal::cli {
namespace {

// A process's CPU time (user + system) in clock ticks, or -1.
long long CpuTicks(int pid) {
  std::ifstream f(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (pid <= 0 || !std::getline(f, line)) return -1;
  // Fields after the command name (which may hold spaces and parentheses):
  // state is the 3rd field; utime and stime the 14th and 15th.
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return -1;
  std::vector<std::string> rest =
      absl::StrSplit(line.substr(close + 2), ' ', absl::SkipEmpty());
  if (rest.size() < 13) return -1;
  long long utime = 0, stime = 0;
  if (!absl::SimpleAtoi(rest[11], &utime) ||
      !absl::SimpleAtoi(rest[12], &stime)) {
    return -1;
  }
  return utime + stime;
}

struct Sample {
  ipc::NodeStatus status;
  absl::Time at;
  std::map<int, long long> cpu;  // by pid
};

enum class SortBy { kId, kCpu, kMemory, kDone };

const char* SortName(SortBy s) {
  switch (s) {
    case SortBy::kCpu:
      return "cpu";
    case SortBy::kMemory:
      return "memory";
    case SortBy::kDone:
      return "done";
    default:
      return "id";
  }
}

// The screen for `cur` (rates against `prev`, if any).
std::string Render(const Sample* prev, const Sample& cur, SortBy sort) {
  const ipc::NodeStatus& st = cur.status;
  std::string out;
  double tasks_per_s = 0;
  double seconds = 0;
  if (prev != nullptr) {
    seconds = absl::ToDoubleSeconds(cur.at - prev->at);
    if (seconds > 0 && st.completed() >= prev->status.completed()) {
      tasks_per_s = (st.completed() - prev->status.completed()) / seconds;
    }
  }
  absl::StrAppendFormat(
      &out, "shoal top — job %s  up %.0f s  (%s)\n", st.job_id(),
      st.uptime_ms() / 1000.0,
      absl::FormatTime("%H:%M:%S", cur.at, absl::LocalTimeZone()));
  absl::StrAppendFormat(
      &out, "tasks: %.0f/s  queued %u  running %u  submitted %d  done %d\n",
      tasks_per_s, st.queued(), st.running(), st.submitted(), st.completed());
  const ipc::StoreStats& s = st.store();
  absl::StrAppendFormat(
      &out, "store: %s of %s used (%.1f%%)  %d objects  %d evictions\n",
      FormatBytes(s.used_bytes()), FormatBytes(s.capacity_bytes()),
      s.capacity_bytes() ? 100.0 * s.used_bytes() / s.capacity_bytes() : 0.0,
      s.objects(), s.evictions());
  const long hz = sysconf(_SC_CLK_TCK);
  struct Row {
    const ipc::WorkerStatus* w;
    double cpu;  // percent of one CPU, -1 unknown
  };
  std::vector<Row> rows;
  for (const ipc::WorkerStatus& w : st.workers()) {
    double cpu = -1;
    auto now = cur.cpu.find(w.pid());
    if (prev != nullptr && seconds > 0 && now != cur.cpu.end() && hz > 0) {
      auto then = prev->cpu.find(w.pid());
      if (then != prev->cpu.end() && now->second >= then->second) {
        cpu = 100.0 * (now->second - then->second) / hz / seconds;
      }
    }
    rows.push_back({&w, cpu});
  }
  std::stable_sort(rows.begin(), rows.end(),
                   [sort](const Row& a, const Row& b) {
                     switch (sort) {
                       case SortBy::kCpu:
                         return a.cpu > b.cpu;
                       case SortBy::kMemory:
                         return a.w->rss_bytes() > b.w->rss_bytes();
                       case SortBy::kDone:
                         return a.w->tasks_done() > b.w->tasks_done();
                       default:
                         return a.w->id() < b.w->id();
                     }
                   });
  absl::StrAppendFormat(&out, "workers: %d  (sorted by %s)\n\n", rows.size(),
                        SortName(sort));
  bench::Table t({"worker", "pid", "state", "cpu%", "rss", "gpus", "done",
                  "failed", "restarts", "role"});
  for (const Row& r : rows) {
    const ipc::WorkerStatus& w = *r.w;
    t.AddRow({absl::StrCat(w.id()), w.pid() ? absl::StrCat(w.pid()) : "-",
              w.state(), r.cpu < 0 ? "-" : absl::StrFormat("%.0f", r.cpu),
              w.rss_bytes() ? FormatBytes(w.rss_bytes()) : "-",
              w.gpus().empty() ? "-" : w.gpus(), absl::StrCat(w.tasks_done()),
              absl::StrCat(w.tasks_failed()), absl::StrCat(w.restarts()),
              w.role().empty() ? "pool" : w.role()});
  }
  out += t.Render();
  out += "\nq quit  c cpu  m memory  d done  i id\n";
  return out;
}

// Puts stdin in non-canonical, no-echo mode while alive (when a terminal).
class RawStdin {
 public:
  RawStdin() {
    if (!isatty(STDIN_FILENO) || tcgetattr(STDIN_FILENO, &saved_) != 0) return;
    termios raw = saved_;
    raw.c_lflag &= ~(ICANON | ECHO);
    raw.c_cc[VMIN] = 0;
    raw.c_cc[VTIME] = 0;
    active_ = tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
  }
  ~RawStdin() {
    if (active_) tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
  }

 private:
  termios saved_{};
  bool active_ = false;
};

}  // namespace

int TopCommand(int argc, char** argv) {
  ArgParser p("shoal top [flags]",
              "A live view of a node: tasks per second, queue, store and "
              "workers,\nrefreshed each --interval. Keys: q quit; c, m, d, i "
              "sort by CPU, memory,\ntasks done, id.");
  std::string& job_id =
      p.String("job-id", "", "which node (default: the one started last)");
  std::string& endpoint =
      p.String("endpoint", "", "the coordinator's frontend (tcp://...)");
  absl::Duration& interval =
      p.Duration("interval", absl::Seconds(1), "time between refreshes");
  int64_t& iterations =
      p.Int("iterations", 0, "refreshes before exiting (default 0: until q)");
  if (absl::Status s = p.Parse(argc, argv); !s.ok()) return Fail(s);
  if (interval <= absl::ZeroDuration()) {
    return Fail(absl::InvalidArgumentError("--interval must be more than 0"));
  }
  coordinator::ClientOptions co;
  co.job_id = job_id;
  co.endpoint = endpoint;
  co.force_remote = true;  // figures only: no fast path
  co.name = "top";
  co.rpc_timeout = absl::Seconds(10);
  auto client = coordinator::Client::Connect(co);
  if (!client.ok()) return Fail(client.status());
  const bool tty = isatty(STDOUT_FILENO);
  RawStdin raw;
  SortBy sort = SortBy::kId;
  std::optional<Sample> prev;
  for (int64_t n = 0; iterations == 0 || n < iterations; ++n) {
    absl::StatusOr<ipc::NodeStatus> st = (*client)->Status();
    if (!st.ok()) return Fail(st.status());
    Sample cur{*std::move(st), absl::Now(), {}};
    for (const ipc::WorkerStatus& w : cur.status.workers()) {
      const long long t = CpuTicks(w.pid());
      if (t >= 0) cur.cpu[w.pid()] = t;
    }
    const std::string screen =
        Render(prev.has_value() ? &*prev : nullptr, cur, sort);
    // Home, the screen, then clear what an older, longer screen left.
    std::fputs(tty ? "\x1b[H" : "", stdout);
    std::fputs(screen.c_str(), stdout);
    std::fputs(tty ? "\x1b[J" : "\n", stdout);
    std::fflush(stdout);
    prev = std::move(cur);
    if (iterations != 0 && n + 1 == iterations) break;
    // Keys until the next refresh.
    const absl::Time next = absl::Now() + interval;
    bool quit = false;
    for (absl::Time now = absl::Now(); now < next && !quit; now = absl::Now()) {
      pollfd pf = {STDIN_FILENO, POLLIN, 0};
      const int ms = static_cast<int>(
          std::max<int64_t>(1, absl::ToInt64Milliseconds(next - now)));
      if (poll(&pf, 1, ms) <= 0 || !(pf.revents & POLLIN)) {
        if (pf.revents & (POLLHUP | POLLERR | POLLNVAL)) {
          absl::SleepFor(next - absl::Now());  // stdin closed: no keys
        }
        continue;
      }
      char c = 0;
      if (read(STDIN_FILENO, &c, 1) != 1) {
        absl::SleepFor(next - absl::Now());
        continue;
      }
      SortBy before = sort;
      switch (c) {
        case 'q':
        case 'Q':
          quit = true;
          break;
        case 'c':
          sort = SortBy::kCpu;
          break;
        case 'm':
          sort = SortBy::kMemory;
          break;
        case 'd':
          sort = SortBy::kDone;
          break;
        case 'i':
          sort = SortBy::kId;
          break;
        default:
          break;
      }
      if (sort != before) break;  // show the new order at once
    }
    if (quit) break;
  }
  return 0;
}

}  // namespace shoal::cli
