// The store benchmarks' role processes: this binary run as
// `shoal bench store-role ROLE ENDPOINT`, driven one command line at a time
// over its stdin, answering one line each on its stdout — so that every
// timed operation runs alone in its own process.
#ifndef SHOAL_TOOLS_BENCH_ROLE_PROCESS_H_
#define SHOAL_TOOLS_BENCH_ROLE_PROCESS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/subprocess.h"

namespace shoal::bench {

absl::StatusOr<Subprocess> StartRole(const char* role,
                                     const std::string& endpoint);

// Sends `cmd`, returns the reply's words. Errors: Internal naming the command
// when the role does not answer within 2 minutes (it failed: see its stderr).
absl::StatusOr<std::vector<std::string>> Ask(Subprocess& role,
                                             const std::string& cmd);

}  // namespace shoal::bench

#endif  // SHOAL_TOOLS_BENCH_ROLE_PROCESS_H_
