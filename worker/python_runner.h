// PythonRunner: runs Python functions as tasks inside this worker's own
// embedded CPython interpreter (one per worker process, so N workers run N
// tasks truly in parallel, each under its own GIL).
//
// A task named "py:package.module:function" (the function may be a dotted
// attribute path, "py:pkg.mod:Class.method") is imported once and cached. The
// task's python_path (its client's sys.path) is added to sys.path first; a
// python_path of "@<object id>" names a store object whose bytes are the
// path (local Python clients put a long path once that way, so that it does
// not take a payload chunk of the task table in every task).
//
// Arguments → Python: none/bool/int/float/str/bytes as such; tensors as
// read-only numpy arrays — store objects are viewed in place (no copy; the
// array keeps its store reference until it is garbage collected), inline ones
// copied; raw byte objects (from large bytes) as read-only memoryviews.
// Return values → outputs: None (no output), a scalar, str, bytes, an
// array-like object (buffer protocol or __dlpack__: numpy, torch, ...), or a
// tuple of those (one output each). Arrays up to 64 KiB travel inline; larger
// ones are copied once into a new store object the submitting client then
// holds.
// A Python exception fails the task with Unknown and the readable message
// "<Type>: <message>\n<traceback>"; its qualified type, message and traceback
// also ride along as fields (ipc::TaskException, attached to the status with
// ipc::WithTaskException), from which clients rebuild it. Output written to
// sys.stdout and sys.stderr goes to the worker's log (line-buffered).
//
// The interpreter starts at the first Python task. The GIL is held only while
// Python code runs: never while the worker waits for work or for the store.
#ifndef SHOAL_WORKER_PYTHON_RUNNER_H_
#define SHOAL_WORKER_PYTHON_RUNNER_H_

#include <memory>

#include "worker/executor.h"

namespace shoal::worker {

// The prefix that routes a task to the Python runner.
inline constexpr char kPythonTaskPrefix[] = "py:";
// TaskSpec::python_path "@<32 hex digits>": the path is that store object's
// bytes (python/shoal/_client.py makes these).
inline constexpr char kPythonPathObjectPrefix[] = "@";

std::unique_ptr<TaskRunner> MakePythonRunner();

}  // namespace shoal::worker

#endif  // SHOAL_WORKER_PYTHON_RUNNER_H_
