// Running a command the way the process tests do: stdout piped and read line
// by line, stderr kept in a file under the test's temp dir (so a chatty child
// never blocks on a full pipe), then the exit code.
#ifndef SHOAL_TESTS_TESTING_COMMAND_H_
#define SHOAL_TESTS_TESTING_COMMAND_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/subprocess.h"

namespace shoal::testing {

struct CommandResult {
  int code = -1;                 // exit code, 128 + signal, -1 if not known
  std::vector<std::string> out;  // stdout, a line each
  std::string err;               // stderr, whole

  // stdout with each line ended by '\n'.
  std::string OutText() const;
};

// A started command (the test may signal it or read stdout itself first).
struct RunningCommand {
  Subprocess process;
  std::string stderr_path;

  // Reads stdout until it closes (or no line for `line_timeout`), waits up to
  // a minute for the exit, then reads stderr. Failures are test failures.
  CommandResult Finish(absl::Duration line_timeout = absl::Seconds(60));
};

// Starts `argv`; `tag` names the stderr file. A failure to start is a test
// failure (and the returned process is not running).
RunningCommand StartCommand(
    const std::vector<std::string>& argv, absl::string_view tag,
    std::map<std::string, std::optional<std::string>> env = {});

// StartCommand then Finish.
CommandResult RunCommand(
    const std::vector<std::string>& argv, absl::string_view tag,
    absl::Duration line_timeout = absl::Seconds(60),
    std::map<std::string, std::optional<std::string>> env = {});

// The whole file, or "" if it cannot be read.
std::string ReadFile(const std::string& path);

}  // namespace shoal::testing

#endif  // SHOAL_TESTS_TESTING_COMMAND_H_
