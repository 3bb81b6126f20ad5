#include "tests/coordinator/node_fixture.h"

#include <signal.h>

#include <fstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "tests/testing/test_env.h"

namespace shoal::testing {

ipc::TaskSpec Task(std::string function, std::vector<Value> args) {
  ipc::TaskSpec t;
  t.function = std::move(function);
  t.args = std::move(args);
  return t;
}

int64_t ProcStatusKb(pid_t pid, absl::string_view field) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.size() <= field.size() || !absl::StartsWith(line, field) ||
        line[field.size()] != ':') {
      continue;
    }
    int64_t kb = 0;
    std::string v(absl::StripAsciiWhitespace(line.substr(field.size() + 1)));
    (void)absl::SimpleAtoi(v.substr(0, v.find(' ')), &kb);
    return kb;
  }
  return -1;
}

absl::StatusOr<std::unique_ptr<NodeProcess>> NodeProcess::Start(
    std::vector<std::string> flags, SubprocessOptions o) {
  auto n = std::make_unique<NodeProcess>();
  n->job_id_ = UniqueJobId();
  std::vector<std::string> argv = {
      RunfilePath("tools/shoal"),
      "start",
      "--job-id",
      n->job_id_,
      "--store-bytes",
      "128M",
      "--plugin",
      RunfilePath("tests/coordinator/libtest_plugin.so")};
  argv.insert(argv.end(), flags.begin(), flags.end());
  o.pipe_stdout = true;
  o.parent_death_signal = SIGKILL;
  absl::StatusOr<Subprocess> p = Subprocess::Start(argv, o);
  if (!p.ok()) return p.status();
  n->process_ = *std::move(p);
  absl::StatusOr<std::string> line = n->process_.ReadLine(absl::Seconds(30));
  if (!line.ok()) return line.status();
  const size_t at = line->find("frontend ");
  if (at == std::string::npos)
    return absl::InternalError(absl::StrCat("node said: ", *line));
  n->frontend_ = line->substr(at + 9, line->find(',', at) - at - 9);
  return n;
}

NodeProcess::~NodeProcess() {
  if (process_.running()) (void)Stop();
}

absl::StatusOr<std::unique_ptr<coordinator::Client>> NodeProcess::Connect(
    bool remote) {
  coordinator::ClientOptions o;
  o.job_id = job_id_;
  o.force_remote = remote;
  o.rpc_timeout = absl::Seconds(20);
  return coordinator::Client::Connect(o);
}

absl::StatusOr<int> NodeProcess::Stop() {
  process_.Signal(SIGTERM);
  return process_.Wait(absl::Seconds(30));
}

}  // namespace shoal::testing
