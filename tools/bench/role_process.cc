#include "tools/bench/role_process.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace shoal::bench {

absl::StatusOr<Subprocess> StartRole(const char* role,
                                     const std::string& endpoint) {
  SubprocessOptions o;
  o.pipe_stdin = true;
  o.pipe_stdout = true;
  return Subprocess::Start(
      {SelfExePath(), "bench", "store-role", role, endpoint}, o);
}

absl::StatusOr<std::vector<std::string>> Ask(Subprocess& role,
                                             const std::string& cmd) {
  if (absl::Status s = role.WriteLine(cmd); !s.ok()) return s;
  absl::StatusOr<std::string> line = role.ReadLine(absl::Minutes(2));
  if (!line.ok()) {
    return absl::InternalError(absl::StrCat("benchmark role failed on '", cmd,
                                            "': ", line.status().message()));
  }
  return std::vector<std::string>(absl::StrSplit(*line, ' '));
}

}  // namespace shoal::bench
