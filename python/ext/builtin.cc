#include "python/ext/builtin.h"

#include <pybind11/pybind11.h>

#include "absl/strings/str_cat.h"
#include "python/ext/module.h"

namespace shoal::pyext {
namespace py = pybind11;
namespace {

void (*g_report_blocked_wait)(bool) = nullptr;
int (*g_help_while_waiting)() = nullptr;

// Frames each task run inline may add to Python's recursion limit: the
// limit counts the frames of all tasks on this thread's stack together.
constexpr int kFramesPerInlineTask = 200;

int HelpWhileWaiting() {
  if (g_help_while_waiting == nullptr) return -1;
  const int limit = Py_GetRecursionLimit();
  Py_SetRecursionLimit(limit + kFramesPerInlineTask);
  int ran;
  {
    py::gil_scoped_release unlocked;  // the task takes it back to run
    ran = g_help_while_waiting();
  }
  Py_SetRecursionLimit(limit);
  return ran;
}

}  // namespace

void SetBlockedWaitReporter(void (*report)(bool begins)) {
  g_report_blocked_wait = report;
}

void SetWaitHelper(int (*help)()) { g_help_while_waiting = help; }

absl::Status InstallBuiltinModule() {
  try {
    // Lives as long as the module (the whole process).
    static auto* def = new py::module_::module_def();
    py::module_ m = py::module_::create_extension_module(
        "shoal._shoal",
        "shoal's C++ runtime for Python, built into the worker.", def);
    DefineStore(m);
    DefineClient(m);
    DefineJob(m);
    DefineCollectives(m);
    DefineActors(m);
    DefineTimeline(m);
    m.def(
        "_report_blocked_wait",
        [](bool begins) {
          if (g_report_blocked_wait != nullptr) g_report_blocked_wait(begins);
        },
        "Tells the node this worker's task starts (True) or ends (False) "
        "waiting for tasks.");
    m.def("_help_while_waiting", &HelpWhileWaiting,
          "Inside a wait for tasks: runs one queued task this worker can run "
          "inline; 1 if it ran one, 0 if none is queued, -1 if it cannot "
          "help (docs/actors.md, \"Nested tasks\").");
    py::module_::import("sys").attr("modules")["shoal._shoal"] = m;
  } catch (py::error_already_set& e) {
    return absl::InternalError(
        absl::StrCat("making the built-in shoal._shoal: ", e.what()));
  }
  return absl::OkStatus();
}

}  // namespace shoal::pyext
