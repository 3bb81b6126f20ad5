// The public interface of C++ task functions.
//
//   #include "worker/task.h"
//
//   // Returns the sum of its float32 tensor argument, as a double.
//   absl::Status MySum(shoal::worker::TaskContext& ctx) {
//     SHOAL_ASSIGN_OR_RETURN(shoal::worker::TensorView t, ctx.TensorArg(0));
//     ...
//     ctx.AddOutput(total);
//     return absl::OkStatus();
//   }
//   SHOAL_TASK("my_sum", MySum);
//
// Build a plugin as a shared library holding such registrations and start
// workers with `shoal start --plugin libmine.so`; submit with
// `shoal submit my_sum ...`. A function runs on one worker at a time, in that
// worker's process; returning an error status makes the task fail with it.
#ifndef SHOAL_WORKER_TASK_H_
#define SHOAL_WORKER_TASK_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/status_macros.h"
#include "ipc/value.h"

namespace shoal::shm {
class StoreClient;
}

namespace shoal::worker {

// A read-only view of a tensor argument: inline bytes, or a store object mapped
// zero-copy. Valid until the task function returns.
struct TensorView {
  TensorMeta meta;
  const uint8_t* data = nullptr;
  uint64_t nbytes = 0;
};

// A writable tensor output: write `data`, and it is the task's next output.
struct MutableTensorView {
  TensorMeta meta;
  uint8_t* data = nullptr;
  uint64_t nbytes = 0;
};

class TaskContext {
 public:
  virtual ~TaskContext() = default;

  virtual size_t num_args() const = 0;
  // REQUIRES: i < num_args().
  virtual const Value& arg(size_t i) const = 0;

  // Typed accessors. Errors: InvalidArgument naming the argument and what was
  // expected (a float accepts an int; a tensor accepts an inline tensor or a
  // store object, which is mapped without a copy).
  absl::StatusOr<int64_t> IntArg(size_t i) const;
  absl::StatusOr<double> FloatArg(size_t i) const;
  absl::StatusOr<std::string> StringArg(size_t i) const;
  virtual absl::StatusOr<TensorView> TensorArg(size_t i) = 0;

  // Outputs, in order.
  virtual void AddOutput(Value v) = 0;
  // A tensor output to fill: small ones travel inline, large ones are written
  // straight into the store (no copy), charged to the task's store account
  // (account()). Errors: the store's (ResourceExhausted); ResourceExhausted
  // saying the submitting client's store quota would be exceeded when the
  // account's limit refuses it — the task then fails with that error
  // whatever the function returns, and the outputs it created are aborted.
  virtual absl::StatusOr<MutableTensorView> NewTensorOutput(
      const TensorMeta& meta) = 0;

  // True once the task is cancelled or timed out: a long function should
  // check it and return absl::CancelledError().
  virtual bool cancelled() const = 0;
  // 1 on the first run, 2+ when retried after a worker died.
  virtual uint32_t attempt() const = 0;
  virtual uint32_t worker_id() const = 0;
  // The task's id in the node's task table (0 where there is none).
  virtual uint64_t task_id() const { return 0; }
  // The node's store (for functions that manage objects themselves: an
  // object they create is charged to an account only if they pass
  // account() in its shm::CreateOptions).
  virtual shm::StoreClient* store() = 0;
  // The store account the task's outputs are charged to
  // (tasks::TaskSubmission::account; 0: none).
  virtual uint32_t account() const { return 0; }
  // ':'-separated directories the submitter asked the worker to search for
  // Python modules (its client's sys.path); "" for none. Used by the
  // embedded interpreter's runner.
  virtual absl::string_view python_path() const { return ""; }
};

using TaskFunction = std::function<absl::Status(TaskContext&)>;

// Registers `fn` under `name` in this process's registry. Returns true (so it
// can initialise a static). A second registration of a name replaces the
// first, with a warning.
bool RegisterTask(absl::string_view name, TaskFunction fn);

}  // namespace shoal::worker

#define SHOAL_TASK_CONCAT_INNER_(a, b) a##b
#define SHOAL_TASK_CONCAT_(a, b) SHOAL_TASK_CONCAT_INNER_(a, b)

// Registers a task function at load time (of the worker, or of a plugin).
#define SHOAL_TASK(name, fn)                                                  \
  static const bool SHOAL_TASK_CONCAT_(shoal_task_registered_, __COUNTER__) = \
      ::shoal::worker::RegisterTask((name), (fn))

#endif  // SHOAL_WORKER_TASK_H_
