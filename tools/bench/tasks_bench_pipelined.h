// Pipelined submission over a node's TCP frontend, as docs/protocol.md allows
// ("Pipelining") and today's coordinator::Client does not do: one
// SubmitRequest per task, up to `window` in flight, replies matched by request
// id. It shows what the frontend itself sustains for one-call-per-task
// submission, apart from the client's one-request-at-a-time use of it.
#ifndef SHOAL_TOOLS_BENCH_TASKS_BENCH_PIPELINED_H_
#define SHOAL_TOOLS_BENCH_TASKS_BENCH_PIPELINED_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace shoal::bench {

struct PipelinedSubmit {
  double submits_per_s = 0;  // until the last SubmitReply
  double tasks_per_s = 0;    // until the last result (Waits of <= 4096 ids)
  int64_t wrong = 0;         // tasks failed, missing or answered twice
};

// Submits `n` no-op tasks to node `job` over its tcp:// frontend with the
// owner's CURVE key (the discovery file's client_key_file), then takes all
// results with Wait(release=true).
// REQUIRES: n <= the node's --max-queued-per-client and --max-held-per-client.
// Errors: from ReadDiscovery / ReadKeyPair (NotFound, FailedPrecondition);
// DeadlineExceeded if a reply takes over 30 s; Internal if a reply has an
// unexpected body or request id; the node's ErrorReply status otherwise.
absl::StatusOr<PipelinedSubmit> MeasurePipelinedSubmit(const std::string& job,
                                                       int n, int window);

}  // namespace shoal::bench

#endif  // SHOAL_TOOLS_BENCH_TASKS_BENCH_PIPELINED_H_
