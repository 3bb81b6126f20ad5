// shoal._shoal built into the `shoal` binary, for the interpreter a worker
// embeds: a task uses the client API (submit, get, put, actors) through it as
// a local client of its node (docs/actors.md, "Nested tasks").
//
// Why not load the extension (_shoal.so) in a worker: the worker binary and
// the extension would both register proto/shoal.proto in Debian's one shared
// libprotobuf, and the second registration aborts the process. Built in,
// there is one copy of shoal's C++ code and one registration.
#ifndef SHOAL_PYTHON_EXT_BUILTIN_H_
#define SHOAL_PYTHON_EXT_BUILTIN_H_

#include "absl/status/status.h"

namespace shoal::pyext {

// Makes the module "shoal._shoal" (the classes the extension defines) and
// puts it into sys.modules, so `from . import _shoal` in the shoal package
// finds it without a file. REQUIRES: the GIL is held; the interpreter runs.
// Errors: Internal (the Python error's text) when the module cannot be made.
absl::Status InstallBuiltinModule();

// What the module's `_report_blocked_wait(begins)` calls: the worker's
// worker::ReportBlockedWait (python/shoal/_client.py wraps its waits in it).
// Set before InstallBuiltinModule; unset, the function does nothing.
void SetBlockedWaitReporter(void (*report)(bool begins));

// What the module's `_help_while_waiting()` calls: the worker's
// worker::HelpWhileWaiting (1 ran a task inline, 0 none queued, -1 cannot
// help). Set before InstallBuiltinModule; unset, the function returns -1.
void SetWaitHelper(int (*help)());

}  // namespace shoal::pyext

#endif  // SHOAL_PYTHON_EXT_BUILTIN_H_
