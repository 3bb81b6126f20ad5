// The task functions a worker process knows: registered by SHOAL_TASK in the
// worker itself (built-ins) and in plugins loaded with --plugin.
#ifndef SHOAL_WORKER_REGISTRY_H_
#define SHOAL_WORKER_REGISTRY_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "worker/task.h"

namespace shoal::worker {

// The function registered under `name`, or nullptr. The pointer stays valid
// for the life of the process, even if the name is registered again (a later
// FindTask then returns the new function).
const TaskFunction* FindTask(absl::string_view name);

// Registered names, sorted.
std::vector<std::string> RegisteredTasks();

// dlopen()s a plugin; its SHOAL_TASK registrations run as it loads.
// Errors: NotFound / FailedPrecondition with dlerror()'s text.
absl::Status LoadPlugin(const std::string& path);

// Registers the built-in functions (noop, echo, fill, add, scale, sum,
// matmul, sleep, fail, crash). Idempotent.
void RegisterBuiltins();

}  // namespace shoal::worker

#endif  // SHOAL_WORKER_REGISTRY_H_
