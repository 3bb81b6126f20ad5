// Force cancellation of a running Python task (shoal.cancel(f, force=True),
// docs/tasks.md "Cancelling a task").
//
// The client cancels the task in the task table (its cancel flag), then sends
// each busy pool worker of the node the signal ForceCancelSignal() carrying
// the task id (sigqueue). In the worker, a handler hands the id to a watch
// thread; when the id is a Python task this worker runs now and its cancel
// flag is set, the watch:
//   1. raises shoal.task.TaskCancelledError (a BaseException) in the task's
//      thread: an asynchronous exception (PyThreadState_SetAsyncExc), which
//      stops pure-Python code at its next bytecode but not a call into C
//      (time.sleep, a long numpy call) until that returns;
//   2. if the task still runs after the grace period (ForceCancelGrace()),
//      kills its own process (SIGKILL, from the watch thread: it needs neither
//      the GIL nor the task's thread). The supervisor starts a new worker, and
//      the coordinator completes the task as Cancelled (its flag is set, so it
//      is not retried); other tasks, queued or on other workers, and the
//      store's objects of other tasks are untouched.
// A task that ends by TaskCancelledError completes as Cancelled. Any other id,
// or a task whose flag is not set, is ignored: a late signal cannot touch the
// task the worker runs next.
#ifndef SHOAL_WORKER_PYTHON_INTERRUPT_H_
#define SHOAL_WORKER_PYTHON_INTERRUPT_H_

#include <Python.h>

#include <cstdint>

#include "absl/time/time.h"
#include "worker/task.h"

namespace shoal::worker {

// The signal a client sends to force-cancel task <sigval>: SIGRTMIN + 6
// (python/shoal/_future.py sends signal.SIGRTMIN + 6).
int ForceCancelSignal();

// How long a force-cancelled task may go on after its asynchronous
// exception before its worker is killed. Default 2 s;
// SHOAL_FORCE_CANCEL_GRACE_MS in the worker's environment (a node inherits
// it from `shoal start`'s) sets it, 0 included (kill at once).
absl::Duration ForceCancelGrace();

// Installs the signal handler and starts the watch thread, once per process.
// Called when the interpreter starts.
void StartForceCancelWatch();

// While it lives, `ctx` is a Python task running on this thread (nested ones
// stack). REQUIRES: the GIL is held at construction and destruction.
class RunningPythonTask {
 public:
  explicit RunningPythonTask(const TaskContext& ctx);
  ~RunningPythonTask();
  RunningPythonTask(const RunningPythonTask&) = delete;
  RunningPythonTask& operator=(const RunningPythonTask&) = delete;

  // After the task's function returned or raised (the GIL held): drops an
  // asynchronous exception sent to it that has not fired yet, so it cannot
  // fire in the runner's code or the next task; returns whether one was
  // sent.
  bool TakeInterrupt();

 private:
  uint64_t id_;
};

// The class of the asynchronous exception (_shoal_task.TaskCancelledError),
// made once. REQUIRES: the GIL is held.
PyObject* TaskCancelledErrorType();

}  // namespace shoal::worker

#endif  // SHOAL_WORKER_PYTHON_INTERRUPT_H_
