// Internal to the Python runner: a task's arguments as Python objects and its
// return value as outputs. REQUIRES (unless noted): the GIL is held.
#ifndef SHOAL_WORKER_PYTHON_TASK_IO_H_
#define SHOAL_WORKER_PYTHON_TASK_IO_H_

#include <Python.h>

#include <cstddef>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "shm/store_client.h"
#include "worker/task.h"

namespace shoal::worker::python_io {

// The store objects among a task's arguments, mapped before the GIL is
// taken. Each holds one store reference, handed to the Python array built
// over it (or released by ~StoreArgs if that never happens).
class StoreArgs {
 public:
  // Maps every object argument (waiting up to 30 s for unsealed ones).
  // REQUIRES: the GIL is NOT held. Errors: the store's Get errors.
  static absl::StatusOr<StoreArgs> Map(TaskContext& ctx);
  StoreArgs() = default;
  StoreArgs(StoreArgs&&) = default;
  StoreArgs& operator=(StoreArgs&&) = default;
  ~StoreArgs();

  // The mapped buffer of argument i, or nullptr if it is not an object.
  const shm::ObjectBuffer* buffer(size_t i) const;
  // Gives up the reference of argument i (now owned by a Python object).
  void Disown(size_t i);

 private:
  shm::StoreClient* store_ = nullptr;
  std::vector<shm::ObjectBuffer> buffers_;  // id nil: not an object
  std::vector<bool> owned_;
};

// The arguments as a new tuple. Errors: InvalidArgument (a value Python
// cannot represent), Internal (numpy missing or failing).
absl::StatusOr<PyObject*> ArgsTuple(TaskContext& ctx, StoreArgs& store_args);

// Adds the function's return value to ctx's outputs (see python_runner.h).
// Errors: InvalidArgument naming what could not be converted; the store's
// (ResourceExhausted) for large outputs.
absl::Status AddOutputs(PyObject* result, TaskContext& ctx);

}  // namespace shoal::worker::python_io

#endif  // SHOAL_WORKER_PYTHON_TASK_IO_H_
