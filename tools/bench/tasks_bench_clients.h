// Many remote clients at once on a node's tcp+CURVE frontend:
// `clients` threads, each its own coordinator::Client (its own connection
// and peer), each runs `per_client` echo tasks through SubmitAsync with up
// to `window` in flight, taking results in order. Every result is checked
// against its own task's argument, and every task id must be distinct.
#ifndef SHOAL_TOOLS_BENCH_TASKS_BENCH_CLIENTS_H_
#define SHOAL_TOOLS_BENCH_TASKS_BENCH_CLIENTS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace shoal::bench {

struct ManyClients {
  double tasks_per_s = 0;  // all clients' tasks over the wall time
  double p50_us = 0;       // per task: SubmitAsync to its result taken
  double p99_us = 0;
  int64_t tasks = 0;
  int64_t wrong = 0;  // failed, missing, someone else's, or a repeated id
};

// Errors: a client that could not connect (its status).
absl::StatusOr<ManyClients> MeasureManyClients(const std::string& job,
                                               int clients, int per_client,
                                               int window);

}  // namespace shoal::bench

#endif  // SHOAL_TOOLS_BENCH_TASKS_BENCH_CLIENTS_H_
