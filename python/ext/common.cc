#include "python/ext/common.h"

#include <future>
#include <thread>

namespace shoal::pyext {
namespace {

std::atomic<bool> g_exiting{false};

}  // namespace

bool InterpreterExiting() { return g_exiting.load(std::memory_order_relaxed); }

void WatchInterpreterExit() {
  py::module_::import("atexit").attr("register")(py::cpp_function(
      [] { g_exiting.store(true, std::memory_order_relaxed); }));
}

void ThrowStatus(const absl::Status& s) {
  py::object from_status =
      py::module_::import("shoal._errors").attr("from_status");
  py::object exc = from_status(static_cast<int>(s.code()),
                               py::bytes(std::string(s.message())));
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
  throw py::error_already_set();
}

absl::Duration TimeoutFromPython(const py::object& seconds) {
  if (seconds.is_none()) return absl::InfiniteDuration();
  const double s = seconds.cast<double>();
  if (s <= 0) return absl::ZeroDuration();
  if (s > 1e9) return absl::InfiniteDuration();
  return absl::Seconds(s);
}

void CheckSignals() {
  if (PyErr_CheckSignals() != 0) throw py::error_already_set();
}

absl::Status RunInterruptibly(std::function<absl::Status()> fn) {
  auto task =
      std::make_shared<std::packaged_task<absl::Status()>>(std::move(fn));
  std::future<absl::Status> done = task->get_future();
  std::thread([task] { (*task)(); }).detach();
  while (true) {
    {
      py::gil_scoped_release release;
      if (done.wait_for(std::chrono::milliseconds(absl::ToInt64Milliseconds(
              kSignalCheckInterval))) == std::future_status::ready) {
        break;
      }
    }
    CheckSignals();
  }
  return done.get();
}

}  // namespace shoal::pyext
