// Subprocess: fork+exec of a child with pipes, used by the CLI, the benchmarks,
// the supervisor and the tests. The child is exec'd right after fork, so no
// thread or ZeroMQ context of the parent is ever used in it.
#ifndef SHOAL_BASE_SUBPROCESS_H_
#define SHOAL_BASE_SUBPROCESS_H_

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace shoal {

struct SubprocessOptions {
  // Variables set (or, with an empty optional, removed) in the child's
  // environment on top of the parent's. Default: none.
  std::map<std::string, std::optional<std::string>> env;
  // Pipe the child's stdin / stdout to the parent. Default: inherit both.
  bool pipe_stdin = false;
  bool pipe_stdout = false;
  bool pipe_stderr = false;
  // Redirect stdout / stderr to these files (append). Default "": inherit.
  std::string stdout_file;
  std::string stderr_file;
  // Put the child in its own process group (so a signal reaches all of its
  // descendants). Default false.
  bool new_process_group = false;
  // Signal the child receives when the parent dies (PR_SET_PDEATHSIG).
  // Default 0: none.
  int parent_death_signal = 0;
  // Working directory. Default "": inherit.
  std::string cwd;
};

class Subprocess {
 public:
  // Starts argv[0] (searched in PATH if it has no '/').
  // Errors: InvalidArgument (empty argv), and fork/pipe failures. An exec
  // failure is reported here too (NotFound / PermissionDenied), not as a
  // child exit code.
  static absl::StatusOr<Subprocess> Start(
      const std::vector<std::string>& argv,
      const SubprocessOptions& options = {});

  Subprocess() = default;
  Subprocess(Subprocess&& other) noexcept;
  Subprocess& operator=(Subprocess&& other) noexcept;
  // Kills (SIGKILL) and reaps a child that is still running.
  ~Subprocess();

  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0 && !exited_; }

  // Reads one line (without the newline) from the child's stdout.
  // Errors: DeadlineExceeded, OutOfRange (the child closed stdout).
  absl::StatusOr<std::string> ReadLine(absl::Duration timeout);
  // Writes `line` + '\n' to the child's stdin.
  absl::Status WriteLine(const std::string& line);
  // Closes the child's stdin.
  void CloseStdin();

  // The parent's ends of piped stdout / stderr (-1 if not piped), for callers
  // that poll them; set them non-blocking with SetNonBlocking if needed.
  int stdout_fd() const { return stdout_fd_; }
  int stderr_fd() const { return stderr_fd_; }
  // Closes the parent's end of a pipe (after EOF).
  void CloseStdout();
  void CloseStderr();

  // Sends `sig` to the child (or its process group, if it has its own).
  void Signal(int sig);

  // Waits for the child to exit; returns the raw wait status.
  // Errors: DeadlineExceeded if it is still running after `timeout`.
  absl::StatusOr<int> Wait(absl::Duration timeout = absl::InfiniteDuration());

 private:
  pid_t pid_ = -1;
  bool exited_ = false;
  int wait_status_ = 0;
  bool own_group_ = false;
  int stdin_fd_ = -1;
  int stdout_fd_ = -1;
  int stderr_fd_ = -1;
  std::string buffer_;
};

// "exit 3", "killed by SIGKILL", ... for a raw wait status.
std::string DescribeWaitStatus(int status);

// Sets O_NONBLOCK on a file descriptor.
void SetNonBlocking(int fd);

// The absolute path of this process's executable (/proc/self/exe).
std::string SelfExePath();

}  // namespace shoal

#endif  // SHOAL_BASE_SUBPROCESS_H_
