#include "tests/testing/command.h"

#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace shoal::testing {

std::string CommandResult::OutText() const {
  std::string text;
  for (const std::string& line : out) absl::StrAppend(&text, line, "\n");
  return text;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

RunningCommand StartCommand(
    const std::vector<std::string>& argv, absl::string_view tag,
    std::map<std::string, std::optional<std::string>> env) {
  static int n = 0;
  SubprocessOptions o;
  o.pipe_stdout = true;
  o.env = std::move(env);
  o.stderr_file = absl::StrCat(::testing::TempDir(), "/", tag, "-", getpid(),
                               "-", n++, ".err");
  unlink(o.stderr_file.c_str());
  absl::StatusOr<Subprocess> p = Subprocess::Start(argv, o);
  EXPECT_TRUE(p.ok()) << p.status();
  RunningCommand c;
  if (p.ok()) c.process = *std::move(p);
  c.stderr_path = o.stderr_file;
  return c;
}

CommandResult RunningCommand::Finish(absl::Duration line_timeout) {
  CommandResult r;
  if (process.pid() <= 0) return r;  // did not start
  while (true) {
    absl::StatusOr<std::string> line = process.ReadLine(line_timeout);
    if (!line.ok()) break;
    r.out.push_back(*std::move(line));
  }
  absl::StatusOr<int> status = process.Wait(absl::Minutes(1));
  EXPECT_TRUE(status.ok()) << "the command did not exit";
  if (status.ok()) {
    r.code =
        WIFEXITED(*status) ? WEXITSTATUS(*status) : 128 + WTERMSIG(*status);
  }
  r.err = ReadFile(stderr_path);
  return r;
}

CommandResult RunCommand(
    const std::vector<std::string>& argv, absl::string_view tag,
    absl::Duration line_timeout,
    std::map<std::string, std::optional<std::string>> env) {
  return StartCommand(argv, tag, std::move(env)).Finish(line_timeout);
}

}  // namespace shoal::testing
