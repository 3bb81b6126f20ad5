// PythonRunner: runs Python functions as tasks inside this worker's own
// embedded CPython interpreter (one per worker process, so N workers run N
// tasks truly in parallel, each under its own GIL).
//
// Task names (ipc/task_name.h has their grammar and parser;
// python/shoal/_naming.py and _client.py make them):
//   py:package.module:function   imported by name once and cached (the
//                                function may be a dotted attribute path,
//                                "py:pkg.mod:Class.method");
//   py:=<32 hex>                 a function sent by value: a store object
//                                (that id) holding its pickle (cloudpickle),
//                                put once by a local client; read and
//                                unpickled at the first sight, then cached
//                                by the id (an unguessable capability whose
//                                sealed bytes never change);
//   py:#<32 hex>!                a function sent by value inside the call
//                                envelope (remote clients), named by its
//                                content hash (blake2b-128 of the pickle, as
//                                python/shoal/_serialize.py's dump_function
//                                computes it). The worker checks the hash
//                                before it unpickles or caches the bytes, and
//                                serves the cached function only to a call
//                                carrying the same bytes: bytes that hash to
//                                another value fail the task with
//                                InvalidArgument naming both hashes;
// any of them followed by "!": the call envelope — args[0] is the pickle
// (protocol 5) of (function bytes or None, args, kwargs) and args[1:] its
// out-of-band buffers (store objects viewed in place: numpy arrays and
// torch tensors inside the unpickled arguments share the store's memory).
// python/shoal/_serialize.py describes both envelopes. A python_path of
// "@<object id>" names a store object whose bytes are the path (local Python
// clients put a long path once that way, so that it does not take a payload
// chunk of the task table in every task).
//
// The task's python_path (its client's sys.path) lasts as long as the task:
// the folders of it that the worker's sys.path lacks go to the front of
// sys.path when the task starts and leave it when the task ends, and the
// modules imported from those folders meanwhile leave sys.modules with them
// (kept aside for the next task with the same path, which gets the same
// module objects back). So a later task with another path, or none, imports
// its own modules, and functions are cached per path: a function resolved
// under one python_path is never served to a task with another. A task run
// inside another's wait (nested tasks) with another path takes the outer
// task's path and modules out while it runs. Not undone: what a task's own
// code does to sys.path or sys.modules, and modules a task imported from
// the worker's own folders. An actor's worker (PythonRunnerOptions::
// isolate_tasks false) keeps each path applied for its life instead.
//
// Arguments → Python: none/bool/int/float/str/bytes as such; tensors as
// read-only numpy arrays — store objects are viewed in place (no copy; the
// array keeps its store reference until it is garbage collected), inline ones
// copied; raw byte objects (from large bytes) as read-only memoryviews.
// Return values → outputs: None (no output), a scalar, str, bytes, an
// array-like object (buffer protocol or __dlpack__: numpy, torch, ...), or a
// tuple of those (one output each). Arrays up to 64 KiB travel inline; larger
// ones are copied once into a new store object the submitting client then
// holds. Any other value is pickled (the result envelope: a raw 1 × n output
// holding the pickle, then its out-of-band buffers as raw objects); one that
// cannot be fails the task with InvalidArgument naming its type.
// A Python exception fails the task with Unknown and the readable message
// "<Type>: <message>\n<traceback>"; its qualified type, message and traceback
// also ride along as fields (ipc::TaskException, attached to the status with
// ipc::WithTaskException), from which clients rebuild it. When the exception
// pickles (and unpickles again), TaskException::pickled carries its pickle,
// so a Python client raises the same exception. Output written to
// sys.stdout and sys.stderr goes to the worker's log (line-buffered).
//
// The interpreter starts at the first Python task. The GIL is held only while
// Python code runs: never while the worker waits for work or for the store.
#ifndef SHOAL_WORKER_PYTHON_RUNNER_H_
#define SHOAL_WORKER_PYTHON_RUNNER_H_

#include <memory>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "worker/executor.h"

namespace shoal::worker {

// TaskSpec::python_path "@<32 hex digits>": the path is that store object's
// bytes (python/shoal/_client.py makes these).
inline constexpr char kPythonPathObjectPrefix[] = "@";

struct PythonRunnerOptions {
  // Whether each task's python_path and the modules imported from it are
  // taken back out when the task ends (see above). Default true; an actor's
  // worker, one client's process, sets false.
  bool isolate_tasks = true;
};

std::unique_ptr<TaskRunner> MakePythonRunner(
    const PythonRunnerOptions& options = {});

// Called once, with the GIL held, right after the worker's interpreter
// started and before any task runs: the `shoal` binary installs its built-in
// copy of the extension module (shoal._shoal) there, so a task can use the
// client API (docs/actors.md, "Nested tasks"). Set it before the first task;
// an error it returns is logged and the interpreter runs without it.
void SetPythonStartHook(absl::Status (*hook)());

}  // namespace shoal::worker

#endif  // SHOAL_WORKER_PYTHON_RUNNER_H_
