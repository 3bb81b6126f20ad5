#include "base/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

extern char** environ;

namespace shoal {
namespace {

void CloseFd(int& fd) {
  if (fd >= 0) {
    close(fd);
    fd = -1;
  }
}

// Builds the child's environment before fork (no allocation after fork).
std::vector<std::string> ChildEnv(const SubprocessOptions& options) {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const char* eq = strchr(*e, '=');
    if (eq == nullptr) continue;
    env[std::string(*e, eq - *e)] = eq + 1;
  }
  for (const auto& [k, v] : options.env) {
    if (v.has_value()) {
      env[k] = *v;
    } else {
      env.erase(k);
    }
  }
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [k, v] : env) out.push_back(absl::StrCat(k, "=", v));
  return out;
}

// execvpe's argv and envp, built before fork: the child must not allocate.
// Not copyable or movable: the pointers point into the strings.
class ExecArgs {
 public:
  ExecArgs(const std::vector<std::string>& argv,
           const SubprocessOptions& options)
      : env_(ChildEnv(options)), args_(argv) {
    for (std::string& s : env_) envp_.push_back(s.data());
    envp_.push_back(nullptr);
    for (std::string& s : args_) argvp_.push_back(s.data());
    argvp_.push_back(nullptr);
  }
  ExecArgs(const ExecArgs&) = delete;
  ExecArgs& operator=(const ExecArgs&) = delete;

  char* const* argv() const { return argvp_.data(); }
  char* const* envp() const { return envp_.data(); }

 private:
  std::vector<std::string> env_;
  std::vector<std::string> args_;
  std::vector<char*> envp_;
  std::vector<char*> argvp_;
};

// The descriptors a child starts with; -1 where unused.
struct ChildFds {
  int in_pipe[2] = {-1, -1};      // options.pipe_stdin
  int out_pipe[2] = {-1, -1};     // options.pipe_stdout
  int stderr_pipe[2] = {-1, -1};  // options.pipe_stderr
  // Reports an exec failure to the parent; closed (by O_CLOEXEC) on success.
  int err_pipe[2] = {-1, -1};
  int out_file = -1;  // options.stdout_file
  int err_file = -1;  // options.stderr_file

  // For the paths where no child was started.
  void CloseAll() {
    for (int* fd :
         {&in_pipe[0], &in_pipe[1], &out_pipe[0], &out_pipe[1], &stderr_pipe[0],
          &stderr_pipe[1], &err_pipe[0], &err_pipe[1], &out_file, &err_file}) {
      CloseFd(*fd);
    }
  }
};

absl::Status OpenChildFds(const SubprocessOptions& options, ChildFds* fds) {
  if (options.pipe_stdin && pipe2(fds->in_pipe, O_CLOEXEC) != 0)
    return SHOAL_ERRNO("pipe");
  if (options.pipe_stdout && pipe2(fds->out_pipe, O_CLOEXEC) != 0)
    return SHOAL_ERRNO("pipe");
  if (options.pipe_stderr && pipe2(fds->stderr_pipe, O_CLOEXEC) != 0) {
    return SHOAL_ERRNO("pipe");
  }
  if (pipe2(fds->err_pipe, O_CLOEXEC) != 0) return SHOAL_ERRNO("pipe");
  if (!options.stdout_file.empty()) {
    fds->out_file = open(options.stdout_file.c_str(),
                         O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fds->out_file < 0)
      return SHOAL_ERRNO(absl::StrCat("open ", options.stdout_file));
  }
  if (!options.stderr_file.empty()) {
    fds->err_file = open(options.stderr_file.c_str(),
                         O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fds->err_file < 0)
      return SHOAL_ERRNO(absl::StrCat("open ", options.stderr_file));
  }
  return absl::OkStatus();
}

// In the forked child: only async-signal-safe calls from here to exec. On a
// failure, writes errno to the exec-report pipe and exits 127.
[[noreturn]] void ExecChild(const SubprocessOptions& options, pid_t parent,
                            const ChildFds& fds, const ExecArgs& exec) {
  if (options.parent_death_signal != 0) {
    prctl(PR_SET_PDEATHSIG, options.parent_death_signal);
    if (getppid() != parent) raise(options.parent_death_signal);
  }
  if (options.new_process_group) setpgid(0, 0);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  if (fds.in_pipe[0] >= 0) dup2(fds.in_pipe[0], STDIN_FILENO);
  if (fds.out_pipe[1] >= 0) dup2(fds.out_pipe[1], STDOUT_FILENO);
  if (fds.out_file >= 0) dup2(fds.out_file, STDOUT_FILENO);
  if (fds.err_file >= 0) dup2(fds.err_file, STDERR_FILENO);
  if (fds.stderr_pipe[1] >= 0) dup2(fds.stderr_pipe[1], STDERR_FILENO);
  if (!options.cwd.empty() && chdir(options.cwd.c_str()) != 0) {
    const int err = errno;
    ssize_t unused = write(fds.err_pipe[1], &err, sizeof(err));
    (void)unused;
    _exit(127);
  }
  execvpe(exec.argv()[0], exec.argv(), exec.envp());
  const int err = errno;
  ssize_t unused = write(fds.err_pipe[1], &err, sizeof(err));
  (void)unused;
  _exit(127);
}

// The child's errno if it failed to exec (it wrote one to the report pipe),
// nullopt if it exec'd (the pipe closed empty). Closes the pipe.
std::optional<int> ReadExecFailure(int& report_fd) {
  int exec_errno = 0;
  ssize_t n;
  do {
    n = read(report_fd, &exec_errno, sizeof(exec_errno));
  } while (n < 0 && errno == EINTR);
  CloseFd(report_fd);
  if (n == sizeof(exec_errno)) return exec_errno;
  return std::nullopt;
}

}  // namespace

std::string SelfExePath() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, n) : std::string();
}

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exit ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const char* name = sigabbrev_np(WTERMSIG(status));
    return absl::StrCat("killed by SIG", name ? name : "?", " (signal ",
                        WTERMSIG(status), ")");
  }
  return absl::StrCat("wait status ", status);
}

absl::StatusOr<Subprocess> Subprocess::Start(
    const std::vector<std::string>& argv, const SubprocessOptions& options) {
  if (argv.empty()) return absl::InvalidArgumentError("empty command");
  const ExecArgs exec(argv, options);
  ChildFds fds;
  if (absl::Status s = OpenChildFds(options, &fds); !s.ok()) {
    fds.CloseAll();
    return s;
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    absl::Status s = SHOAL_ERRNO("fork");
    fds.CloseAll();
    return s;
  }
  if (pid == 0) ExecChild(options, parent, fds, exec);
  // Parent.
  if (options.new_process_group)
    setpgid(pid, pid);  // no race with the child's own call
  CloseFd(fds.in_pipe[0]);
  CloseFd(fds.out_pipe[1]);
  CloseFd(fds.stderr_pipe[1]);
  CloseFd(fds.err_pipe[1]);
  CloseFd(fds.out_file);
  CloseFd(fds.err_file);
  Subprocess p;
  p.pid_ = pid;
  p.own_group_ = options.new_process_group;
  p.stdin_fd_ = fds.in_pipe[1];
  p.stdout_fd_ = fds.out_pipe[0];
  p.stderr_fd_ = fds.stderr_pipe[0];
  if (std::optional<int> exec_errno = ReadExecFailure(fds.err_pipe[0])) {
    (void)p.Wait();
    return ErrnoStatus(*exec_errno, absl::StrCat("exec ", argv[0]), __FILE__,
                       __LINE__);
  }
  return p;
}

Subprocess::Subprocess(Subprocess&& o) noexcept
    : pid_(o.pid_),
      exited_(o.exited_),
      wait_status_(o.wait_status_),
      own_group_(o.own_group_),
      stdin_fd_(o.stdin_fd_),
      stdout_fd_(o.stdout_fd_),
      stderr_fd_(o.stderr_fd_),
      buffer_(std::move(o.buffer_)) {
  o.pid_ = -1;
  o.stdin_fd_ = o.stdout_fd_ = o.stderr_fd_ = -1;
}

Subprocess& Subprocess::operator=(Subprocess&& o) noexcept {
  if (this != &o) {
    this->~Subprocess();
    new (this) Subprocess(std::move(o));
  }
  return *this;
}

Subprocess::~Subprocess() {
  if (running()) {
    Signal(SIGKILL);
    (void)Wait();
  }
  CloseFd(stdin_fd_);
  CloseFd(stdout_fd_);
  CloseFd(stderr_fd_);
}

absl::StatusOr<std::string> Subprocess::ReadLine(absl::Duration timeout) {
  if (stdout_fd_ < 0)
    return absl::FailedPreconditionError("stdout is not piped");
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    const size_t nl = buffer_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      return line;
    }
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration() && timeout != absl::InfiniteDuration()) {
      return absl::DeadlineExceededError("no line from the child in time");
    }
    pollfd pfd = {stdout_fd_, POLLIN, 0};
    const int ms = timeout == absl::InfiniteDuration()
                       ? -1
                       : static_cast<int>(absl::ToInt64Milliseconds(left) + 1);
    const int rc = poll(&pfd, 1, ms);
    if (rc < 0 && errno != EINTR) return SHOAL_ERRNO("poll");
    if (rc <= 0) continue;
    char buf[4096];
    const ssize_t n = read(stdout_fd_, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return SHOAL_ERRNO("read");
    if (n == 0) return absl::OutOfRangeError("the child closed its stdout");
    buffer_.append(buf, n);
  }
}

absl::Status Subprocess::WriteLine(const std::string& line) {
  if (stdin_fd_ < 0) return absl::FailedPreconditionError("stdin is not piped");
  const std::string data = line + "\n";
  size_t off = 0;
  while (off < data.size()) {
    const ssize_t n = write(stdin_fd_, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return SHOAL_ERRNO("write to child");
    off += n;
  }
  return absl::OkStatus();
}

void Subprocess::CloseStdin() { CloseFd(stdin_fd_); }
void Subprocess::CloseStdout() { CloseFd(stdout_fd_); }
void Subprocess::CloseStderr() { CloseFd(stderr_fd_); }

void SetNonBlocking(int fd) {
  const int flags = fcntl(fd, F_GETFL);
  if (flags >= 0) fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

void Subprocess::Signal(int sig) {
  if (!running()) return;
  if (own_group_) {
    kill(-pid_, sig);
  } else {
    kill(pid_, sig);
  }
}

absl::StatusOr<int> Subprocess::Wait(absl::Duration timeout) {
  if (pid_ <= 0) return absl::FailedPreconditionError("no child");
  if (exited_) return wait_status_;
  const absl::Time deadline = absl::Now() + timeout;
  absl::Duration nap = absl::Microseconds(200);
  while (true) {
    int status = 0;
    const pid_t r = waitpid(pid_, &status,
                            timeout == absl::InfiniteDuration() ? 0 : WNOHANG);
    if (r == pid_) {
      exited_ = true;
      wait_status_ = status;
      return status;
    }
    if (r < 0 && errno != EINTR) return SHOAL_ERRNO("waitpid");
    if (timeout != absl::InfiniteDuration()) {
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat("pid ", pid_, " still running"));
      }
      absl::SleepFor(nap);
      nap = std::min(nap * 2, absl::Milliseconds(20));
    }
  }
}

}  // namespace shoal
