// Conversions between the task protocol's structs and the task table's
// entries, shared by the coordinator (remote clients) and the C++ client
// (local fast path).
#ifndef SHOAL_TASKS_TASK_RESULTS_H_
#define SHOAL_TASKS_TASK_RESULTS_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "ipc/messages.h"
#include "tasks/task_table.h"

namespace shoal::tasks {

// A TaskSpec as the task table stores it. Errors: InvalidArgument when it asks
// for more cpus or gpus than any worker has (it could never run).
absl::StatusOr<tasks::TaskSubmission> ToSubmission(const ipc::TaskSpec& spec,
                                                   uint32_t cpus_per_worker,
                                                   uint32_t gpus_per_worker);

// A finished task's result from what Take returned.
ipc::TaskResult ToResult(uint64_t id,
                         absl::StatusOr<tasks::TaskOutcome> outcome);

}  // namespace shoal::tasks

#endif  // SHOAL_TASKS_TASK_RESULTS_H_
