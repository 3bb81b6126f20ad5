// Executor: runs one claimed task in this worker process — decodes its
// arguments, finds the function in one of the language runners, runs it, and
// encodes the outcome. C++ functions run through the CppRunner, Python
// functions through the PythonRunner (worker/python_runner.h), each a
// TaskRunner.
#ifndef SHOAL_WORKER_EXECUTOR_H_
#define SHOAL_WORKER_EXECUTOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "shm/store_client.h"
#include "tasks/task_table.h"
#include "worker/task.h"

namespace shoal::worker {

// A language that can run task functions.
class TaskRunner {
 public:
  virtual ~TaskRunner() = default;
  // Whether `function` names one of this runner's functions.
  virtual bool Handles(absl::string_view function) const = 0;
  // Runs it. The returned status becomes the task's; a language exception
  // attached to it (ipc::WithTaskException) becomes the outcome's exception.
  virtual absl::Status Run(absl::string_view function, TaskContext& ctx) = 0;
  // For error messages: what this runner offers ("noop, echo, ...").
  virtual std::string Describe() const = 0;
};

// Functions registered with SHOAL_TASK (built-ins and plugins).
std::unique_ptr<TaskRunner> MakeCppRunner();

struct TaskOutcome {
  int32_t code = 0;     // absl::StatusCode
  std::string payload;  // ipc::EncodeTaskOutcome(message, outputs)
};

class Executor {
 public:
  // `store` may be null (then store-object arguments and large outputs fail
  // with FailedPrecondition); `table` is used to watch for cancellation.
  Executor(uint32_t worker_id, shm::StoreClient* store, tasks::TaskTable* table,
           std::vector<std::unique_ptr<TaskRunner>> runners);

  // Runs `claim` to completion. Never fails itself: every problem becomes the
  // task's error outcome.
  TaskOutcome Execute(const tasks::TaskClaim& claim);

 private:
  uint32_t worker_id_;
  shm::StoreClient* store_;
  tasks::TaskTable* table_;
  std::vector<std::unique_ptr<TaskRunner>> runners_;
};

}  // namespace shoal::worker

#endif  // SHOAL_WORKER_EXECUTOR_H_
