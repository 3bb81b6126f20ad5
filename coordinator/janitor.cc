#include "coordinator/janitor.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>

#include "absl/strings/str_cat.h"

namespace shoal::coordinator {
namespace {

// What the janitor needs, laid out before fork(): after a fork in a process
// with threads the child may only make async-signal-safe calls, so it
// allocates nothing and uses raw system calls.
struct Plan {
  std::vector<std::string> paths;  // /dev/shm/<segment>
  std::string coll_prefix;         // "shoal-<job>-"
  std::string coll_suffix = "-coll";
};

// Names the coordinator sends after Start ("name\n" each), read into a
// buffer that needs no allocation in the forked child.
char g_watched[8192];
size_t g_watched_bytes = 0;

// Unlinks `path` if it is this user's: a name another user took first (the
// reason a fallback name exists) is never removed. /dev/shm is sticky, so a
// file of ours cannot be swapped for another user's between the two calls.
void UnlinkIfMine(const char* path) {
  struct stat st;
  if (lstat(path, &st) == 0 && st.st_uid == geteuid()) unlink(path);
}

bool HasPrefix(const char* s, const std::string& prefix) {
  return strncmp(s, prefix.c_str(), prefix.size()) == 0;
}

bool HasSuffix(const char* s, size_t n, const std::string& suffix) {
  return n >= suffix.size() &&
         memcmp(s + n - suffix.size(), suffix.c_str(), suffix.size()) == 0;
}

// The pid in "...-<pid>-coll", or 0.
pid_t CollCreator(const char* name, size_t n, size_t suffix_len) {
  size_t end = n - suffix_len;
  size_t begin = end;
  while (begin > 0 && name[begin - 1] >= '0' && name[begin - 1] <= '9') {
    --begin;
  }
  if (begin == end || begin == 0 || name[begin - 1] != '-') return 0;
  int64_t pid = 0;
  for (size_t i = begin; i < end && pid < (int64_t{1} << 31); ++i) {
    pid = pid * 10 + (name[i] - '0');
  }
  return pid < (int64_t{1} << 31) ? static_cast<pid_t>(pid) : 0;
}

// Unlinks this job's collective segments whose creator is gone; returns how
// many remain (creator still alive).
int SweepCollSegments(const Plan& plan) {
  int dir = open("/dev/shm", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return 0;
  int alive = 0;
  alignas(8) char buf[8192];
  char path[300];
  for (;;) {
    long n = syscall(SYS_getdents64, dir, buf, sizeof(buf));
    if (n <= 0) break;
    for (long off = 0; off < n;) {
      // struct linux_dirent64: ino (8), off (8), reclen (2), type (1), name.
      const char* rec = buf + off;
      uint16_t reclen;
      memcpy(&reclen, rec + 16, sizeof(reclen));
      const char* name = rec + 19;
      off += reclen;
      const size_t len = strlen(name);
      if (!HasPrefix(name, plan.coll_prefix) ||
          !HasSuffix(name, len, plan.coll_suffix) || len + 10 > sizeof(path)) {
        continue;
      }
      const pid_t creator = CollCreator(name, len, plan.coll_suffix.size());
      if (creator > 0 && (kill(creator, 0) == 0 || errno != ESRCH)) {
        ++alive;
        continue;
      }
      memcpy(path, "/dev/shm/", 9);
      memcpy(path + 9, name, len + 1);
      UnlinkIfMine(path);
    }
  }
  close(dir);
  return alive;
}

// True for "shoal-<job>-<pid>-<12 hex digits>-timeline" of this job (a
// process's timeline ring, observe/timeline_ring.h): `prefix` then digits
// only, so another job whose id starts with this one's is not matched.
bool IsJobTimelineRing(const char* name, size_t n, const std::string& prefix) {
  static constexpr char kSuffix[] = "-timeline";
  constexpr size_t kSuffixLen = sizeof(kSuffix) - 1, kHex = 12;
  if (n < prefix.size() + 1 + 1 + kHex + kSuffixLen ||
      !HasPrefix(name, prefix) ||
      memcmp(name + n - kSuffixLen, kSuffix, kSuffixLen) != 0) {
    return false;
  }
  const size_t hex = n - kSuffixLen - kHex;
  for (size_t i = hex; i < hex + kHex; ++i) {
    const char c = name[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  if (name[hex - 1] != '-') return false;
  for (size_t i = prefix.size(); i < hex - 1; ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
  }
  return true;
}

// Unlinks this job's timeline rings: they outlive their processes while the
// node runs, and go with it.
void SweepTimelineRings(const Plan& plan) {
  int dir = open("/dev/shm", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return;
  alignas(8) char buf[8192];
  char path[300];
  for (;;) {
    long n = syscall(SYS_getdents64, dir, buf, sizeof(buf));
    if (n <= 0) break;
    for (long off = 0; off < n;) {
      const char* rec = buf + off;
      uint16_t reclen;
      memcpy(&reclen, rec + 16, sizeof(reclen));
      const char* name = rec + 19;
      off += reclen;
      const size_t len = strlen(name);
      if (len + 10 > sizeof(path) ||
          !IsJobTimelineRing(name, len, plan.coll_prefix)) {
        continue;
      }
      memcpy(path, "/dev/shm/", 9);
      memcpy(path + 9, name, len + 1);
      UnlinkIfMine(path);
    }
  }
  close(dir);
}

[[noreturn]] void RunJanitor(int read_fd, const Plan& plan) {
  setsid();
  struct sigaction ignore = {};
  ignore.sa_handler = SIG_IGN;
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE}) {
    sigaction(sig, &ignore, nullptr);
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  int null_fd = open("/dev/null", O_RDWR);
  if (null_fd >= 0) {
    for (int fd = 0; fd < 3; ++fd) dup2(null_fd, fd);
    if (null_fd > 2) close(null_fd);
  }
  // Nothing else of the coordinator's (sockets, segments) is held open.
  if (read_fd > 3) syscall(SYS_close_range, 3u, read_fd - 1u, 0u);
  syscall(SYS_close_range, read_fd + 1u, ~0u, 0u);

  char overflow[256];
  for (;;) {
    const bool room = g_watched_bytes < sizeof(g_watched);
    ssize_t r = room ? read(read_fd, g_watched + g_watched_bytes,
                            sizeof(g_watched) - g_watched_bytes)
                     : read(read_fd, overflow, sizeof(overflow));
    if (r == 0 || (r < 0 && errno != EINTR)) break;
    if (r > 0 && room) g_watched_bytes += static_cast<size_t>(r);
  }
  for (const std::string& path : plan.paths) UnlinkIfMine(path.c_str());
  char path[300];
  size_t start = 0;
  for (size_t i = 0; i < g_watched_bytes; ++i) {
    if (g_watched[i] != '\n') continue;
    const size_t len = i - start;
    if (len > 0 && len + 10 < sizeof(path) &&
        memchr(g_watched + start, '/', len) == nullptr) {
      memcpy(path, "/dev/shm/", 9);
      memcpy(path + 9, g_watched + start, len);
      path[9 + len] = '\0';
      UnlinkIfMine(path);
    }
    start = i + 1;
  }
  // Workers die with the coordinator (PR_SET_PDEATHSIG) a moment later: give
  // their collective segments up to 10 s to lose their creators.
  const struct timespec step = {0, 50 * 1000 * 1000};
  for (int i = 0; i < 200 && SweepCollSegments(plan) > 0; ++i) {
    nanosleep(&step, nullptr);
  }
  SweepTimelineRings(plan);
  _exit(0);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Janitor>> Janitor::Start(
    absl::string_view job_id, std::vector<std::string> segments) {
  Plan plan;
  for (const std::string& s : segments) {
    plan.paths.push_back(absl::StrCat("/dev/shm/", s));
  }
  plan.coll_prefix = absl::StrCat("shoal-", job_id, "-");
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(
        absl::StrCat("pipe2 for the node's janitor: ", strerror(errno)));
  }
  const pid_t pid = fork();
  if (pid < 0) {
    const int e = errno;
    close(fds[0]);
    close(fds[1]);
    return absl::InternalError(
        absl::StrCat("fork of the node's janitor: ", strerror(e)));
  }
  if (pid == 0) {
    close(fds[1]);
    RunJanitor(fds[0], plan);
  }
  close(fds[0]);
  return std::unique_ptr<Janitor>(new Janitor(fds[1], pid));
}

absl::Status Janitor::Watch(absl::string_view segment) {
  if (segment.empty() || segment.find('/') != absl::string_view::npos ||
      segment.find('\n') != absl::string_view::npos || segment.size() > 255) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a /dev/shm segment name: '", segment, "'"));
  }
  const std::string line = absl::StrCat(segment, "\n");
  // A janitor that is gone (SIGKILLed) must not take the coordinator with it
  // through SIGPIPE: blocked here, and a SIGPIPE this write raised is taken.
  sigset_t pipe_only, old_mask;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_only, &old_mask);
  absl::Status s;
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = write(write_fd_, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      if (err == EPIPE) {
        const struct timespec zero = {0, 0};
        sigtimedwait(&pipe_only, nullptr, &zero);
      }
      s = absl::InternalError(absl::StrCat("telling the node's janitor about ",
                                           segment, ": ", strerror(err)));
      break;
    }
    done += static_cast<size_t>(n);
  }
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  return s;
}

Janitor::~Janitor() { close(write_fd_); }

}  // namespace shoal::coordinator
