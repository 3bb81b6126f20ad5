#include "launch/local_group.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "base/process_info.h"
#include "base/status_macros.h"
#include "base/temp_dir.h"

namespace shoal::launch {
namespace {

void WriteAll(int fd, const char* data, size_t n) {
  while (n > 0) {
    const ssize_t w = write(fd, data, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    data += w;
    n -= static_cast<size_t>(w);
  }
}

}  // namespace

LocalGroup::~LocalGroup() {
  for (Proc& p : procs_) {
    if (!p.exited) p.process.Signal(SIGKILL);
    if (p.pidfd >= 0) close(p.pidfd);
    if (p.out.log_fd >= 0) close(p.out.log_fd);
    if (p.err.log_fd >= 0) close(p.err.log_fd);
  }
}

absl::Status LocalGroup::Start(const std::vector<RankSpec>& specs) {
  procs_.clear();
  first_failure_.reset();
  kill_at_.reset();
  procs_.reserve(specs.size());
  // The rank files: opened through the folder's descriptor, never through a
  // link, mode 0600 (OpenPrivateFileAt), before the rank starts.
  int log_dir_fd = -1;
  if (!o_.log_dir.empty()) {
    absl::StatusOr<int> dir =
        OpenPrivateFolder(o_.log_dir, /*create=*/true, "--log-dir");
    if (!dir.ok()) return dir.status();
    log_dir_fd = *dir;
  }
  absl::Status status = StartEach(specs, log_dir_fd);
  if (log_dir_fd >= 0) close(log_dir_fd);
  return status;
}

absl::Status LocalGroup::StartEach(const std::vector<RankSpec>& specs,
                                   int log_dir_fd) {
  for (const RankSpec& spec : specs) {
    int log_fds[2] = {-1, -1};
    if (log_dir_fd >= 0) {
      for (int k = 0; k < 2; ++k) {
        absl::StatusOr<int> fd = OpenPrivateFileAt(
            log_dir_fd, o_.log_dir,
            absl::StrCat("rank", spec.rank, k == 0 ? ".stdout" : ".stderr"),
            O_APPEND);
        if (!fd.ok()) {
          if (k == 1) close(log_fds[0]);
          StopAll();
          return absl::Status(fd.status().code(),
                              absl::StrCat("rank ", spec.rank,
                                           "'s log: ", fd.status().message()));
        }
        log_fds[k] = *fd;
      }
    }
    SubprocessOptions so;
    for (const auto& [k, v] : spec.env) so.env[k] = v;
    so.pipe_stdout = true;
    so.pipe_stderr = true;
    // Its own process group (a stop reaches its children too), and it dies
    // with the launcher.
    so.new_process_group = true;
    so.parent_death_signal = SIGKILL;
    absl::StatusOr<Subprocess> proc = Subprocess::Start(o_.command, so);
    if (!proc.ok()) {
      for (int fd : log_fds) {
        if (fd >= 0) close(fd);
      }
      StopAll();
      return absl::Status(proc.status().code(),
                          absl::StrCat("starting rank ", spec.rank, ": ",
                                       proc.status().message()));
    }
    Proc p;
    p.spec = spec;
    p.process = *std::move(proc);
    p.pidfd = OpenPidFd(p.process.pid()).value_or(-1);
    p.out.fd = p.process.stdout_fd();
    p.err.fd = p.process.stderr_fd();
    p.out.out_fd = STDOUT_FILENO;
    p.err.out_fd = STDERR_FILENO;
    SetNonBlocking(p.out.fd);
    SetNonBlocking(p.err.fd);
    p.out.log_fd = log_fds[0];
    p.err.log_fd = log_fds[1];
    procs_.push_back(std::move(p));
  }
  return absl::OkStatus();
}

void LocalGroup::AppendPollItems(std::vector<zmq_pollitem_t>* items) {
  for (Proc& p : procs_) {
    items->push_back({nullptr, p.exited ? -1 : p.pidfd, ZMQ_POLLIN, 0});
    items->push_back({nullptr, p.out.fd, ZMQ_POLLIN, 0});
    items->push_back({nullptr, p.err.fd, ZMQ_POLLIN, 0});
  }
}

void LocalGroup::Handle(const std::vector<zmq_pollitem_t>& items,
                        size_t first) {
  for (size_t i = 0; i < procs_.size(); ++i) {
    Proc& p = procs_[i];
    const zmq_pollitem_t* it = &items[first + 3 * i];
    if (it[1].revents & (ZMQ_POLLIN | ZMQ_POLLERR))
      Pump(p, p.out, false, false);
    if (it[2].revents & (ZMQ_POLLIN | ZMQ_POLLERR)) Pump(p, p.err, true, false);
    if (!p.exited && (it[0].revents & ZMQ_POLLIN)) OnExit(p);
  }
}

void LocalGroup::Emit(Proc& p, Stream& s, bool is_stderr, const char* data,
                      size_t n) {
  if (s.log_fd >= 0) WriteAll(s.log_fd, data, n);
  // Complete lines feed the stderr tail (and the tee prefix).
  std::string& partial = s.partial;
  partial.append(data, n);
  size_t start = 0;
  std::string out;
  for (size_t nl; (nl = partial.find('\n', start)) != std::string::npos;
       start = nl + 1) {
    const absl::string_view line(partial.data() + start, nl - start);
    if (is_stderr) {
      p.tail.emplace_back(line);
      if (static_cast<int>(p.tail.size()) > o_.tail_lines) p.tail.pop_front();
    }
    if (o_.tee) absl::StrAppend(&out, "[", p.spec.rank, "] ", line, "\n");
  }
  if (!o_.tee) {
    WriteAll(s.out_fd, data, n);
  } else if (!out.empty()) {
    WriteAll(s.out_fd, out.data(), out.size());
  }
  partial.erase(0, start);
}

void LocalGroup::Pump(Proc& p, Stream& s, bool is_stderr, bool final) {
  if (s.fd < 0) return;
  char buf[65536];
  while (true) {
    const ssize_t n = read(s.fd, buf, sizeof(buf));
    if (n > 0) {
      Emit(p, s, is_stderr, buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN && !final) return;
    // EOF (or nothing more after exit): flush an unfinished last line.
    if (!s.partial.empty()) {
      Emit(p, s, is_stderr, "\n", 1);
    }
    if (is_stderr) {
      p.process.CloseStderr();
    } else {
      p.process.CloseStdout();
    }
    s.fd = -1;
    return;
  }
}

void LocalGroup::OnExit(Proc& p) {
  absl::StatusOr<int> status = p.process.Wait(absl::Seconds(1));
  if (!status.ok()) return;
  p.exited = true;
  close(p.pidfd);
  p.pidfd = -1;
  // What it wrote just before dying belongs in the output and the tail.
  Pump(p, p.out, false, true);
  Pump(p, p.err, true, true);
  const bool failed = !(WIFEXITED(*status) && WEXITSTATUS(*status) == 0);
  if (failed && !first_failure_) {
    first_failure_ =
        RankExit{p.spec.rank, p.spec.local_rank, *status,
                 std::vector<std::string>(p.tail.begin(), p.tail.end())};
  }
}

void LocalGroup::StopAll() {
  if (!kill_at_) kill_at_ = absl::Now() + o_.grace;
  Forward(SIGTERM);
}

void LocalGroup::Forward(int sig) {
  for (Proc& p : procs_) {
    if (!p.exited) p.process.Signal(sig);
  }
}

absl::Time LocalGroup::Tick(absl::Time now) {
  if (!kill_at_) return absl::InfiniteFuture();
  if (now < *kill_at_) return *kill_at_;
  Forward(SIGKILL);
  kill_at_ = now + absl::Seconds(1);  // again if something still runs
  return *kill_at_;
}

bool LocalGroup::AllExited() const {
  for (const Proc& p : procs_) {
    if (!p.exited) return false;
  }
  return true;
}

}  // namespace shoal::launch
