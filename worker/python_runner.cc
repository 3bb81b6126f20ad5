#include "worker/python_runner.h"

#include <Python.h>
#include <pybind11/embed.h>

#include <functional>
#include <map>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "ipc/object_id.h"
#include "ipc/task_payload.h"
#include "worker/python_task_io.h"
#include "worker/python_values.h"
#include "worker/small_call_pickle.h"

namespace shoal::worker {
namespace py = pybind11;
namespace {

absl::Status (*g_start_hook)() = nullptr;  // SetPythonStartHook

// The task running on this worker's main thread, for the `_shoal_task`
// module (shoal.task in Python). Read and written only with the GIL held.
TaskContext* g_current_task = nullptr;

// Functions this process unpickled (sent by value), for shoal.task's
// functions_loaded(): tests check the cache with it. Under the GIL.
int64_t g_functions_loaded = 0;
// By-value functions a worker keeps (all are dropped beyond this).
constexpr size_t kMaxFunctionsByValue = 4096;

TaskContext& CurrentTask() {
  if (g_current_task == nullptr) {
    throw std::runtime_error(
        "no shoal task is running (shoal.task works only inside a task "
        "function, while it runs)");
  }
  return *g_current_task;
}

// A Python task's name, parsed (grammar in python_runner.h).
struct TaskName {
  enum class Kind { kByName, kStored, kCarried };
  Kind kind = Kind::kByName;
  std::string module, qualname;  // kByName
  std::string hex;               // kStored: object id; kCarried: hash
  std::string cache_key;         // the name without "!"
  bool envelope = false;         // "!": args[0] is the pickled call
};

absl::StatusOr<TaskName> ParseName(absl::string_view function) {
  TaskName n;
  absl::string_view rest = function.substr(sizeof(kPythonTaskPrefix) - 1);
  if (absl::ConsumeSuffix(&rest, kPythonEnvelopeSuffix)) n.envelope = true;
  n.cache_key = std::string(rest);
  auto bad = [&] {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", function,
        "' is not a Python task name: use py:package.module:function"));
  };
  if (absl::ConsumePrefix(&rest, kPythonStoredFunctionPrefix) ||
      absl::ConsumePrefix(&rest, kPythonCarriedFunctionPrefix)) {
    n.kind = function[sizeof(kPythonTaskPrefix) - 1] == '='
                 ? TaskName::Kind::kStored
                 : TaskName::Kind::kCarried;
    if (rest.size() != 32 ||
        (n.kind == TaskName::Kind::kCarried && !n.envelope))
      return bad();
    n.hex = std::string(rest);
    return n;
  }
  std::vector<absl::string_view> parts = absl::StrSplit(rest, ':');
  if (parts.size() != 2 || parts[0].empty() || parts[1].empty()) return bad();
  n.module = std::string(parts[0]);
  n.qualname = std::string(parts[1]);
  return n;
}

// "module.qualname" of an exception type, builtins included
// ("builtins.ValueError"): the name the client's TaskError carries.
std::string QualifiedTypeName(PyObject* type) {
  if (type == nullptr) return "builtins.Exception";
  std::string name;
  PyObject* module = PyObject_GetAttrString(type, "__module__");
  PyObject* qual = PyObject_GetAttrString(type, "__qualname__");
  if (module != nullptr && qual != nullptr && PyUnicode_Check(module) &&
      PyUnicode_Check(qual)) {
    const char* m = PyUnicode_AsUTF8(module);
    const char* q = PyUnicode_AsUTF8(qual);
    if (m != nullptr && q != nullptr) name = absl::StrCat(m, ".", q);
  }
  Py_XDECREF(module);
  Py_XDECREF(qual);
  PyErr_Clear();
  if (name.empty() && PyType_Check(type))
    name = reinterpret_cast<PyTypeObject*>(type)->tp_name;
  return name.empty() ? "builtins.Exception" : name;
}

// `exception` pickled (protocol 5), or "" when it cannot be, or would not
// load again (a class only a closure knows): the client then gets a
// TaskError. No error is left pending.
std::string PickledException(PyObject* exception) {
  if (exception == nullptr) return "";
  try {
    py::module_ pickle = py::module_::import("pickle");
    py::bytes data = pickle.attr("dumps")(py::handle(exception), 5);
    pickle.attr("loads")(data);
    return data;
  } catch (py::error_already_set&) {
    PyErr_Clear();
    return "";
  }
}

// The pending Python exception as a status: Unknown, with the readable
// message "<Type>: <message>\n<context><traceback>" for C++ callers and logs,
// and the exception's fields attached (ipc::WithTaskException) for clients
// that rebuild it. `context` ("(while importing ...)\n") leads the
// traceback.
absl::Status TakePythonError(absl::string_view context) {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  if (tb != nullptr && value != nullptr) PyException_SetTraceback(value, tb);
  ipc::TaskException e;
  e.type = QualifiedTypeName(type);
  if (value != nullptr) {
    if (PyObject* s = PyObject_Str(value)) {
      if (const char* c = PyUnicode_AsUTF8(s)) e.message = c;
      Py_DECREF(s);
    }
  }
  e.traceback = std::string(context);
  try {
    py::object format =
        py::module_::import("traceback").attr("format_exception");
    py::list lines = format(py::handle(type ? type : Py_None),
                            py::handle(value ? value : Py_None),
                            py::handle(tb ? tb : Py_None));
    for (py::handle l : lines) e.traceback += l.cast<std::string>();
  } catch (py::error_already_set&) {
    e.traceback += "(no traceback: formatting it failed)\n";
  }
  const std::string short_type = python::ExceptionTypeName(type);
  e.pickled = PickledException(value);
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
  PyErr_Clear();
  return ipc::WithTaskException(
      absl::UnknownError(
          absl::StrCat(short_type, ": ", e.message, "\n", e.traceback)),
      e);
}

class PythonRunner : public TaskRunner {
 public:
  PythonRunner() = default;
  ~PythonRunner() override {
    if (!started_) return;
    // The cached functions are Python objects: drop them under the GIL. The
    // interpreter itself is never finalized (the process is ending, and
    // finalizing could wait on threads a task left behind).
    PyGILState_STATE g = PyGILState_Ensure();
    functions_.clear();
    load_call_ = py::object();
    loads_ = py::object();
    PyGILState_Release(g);
  }

  bool Handles(absl::string_view function) const override {
    return absl::StartsWith(function, kPythonTaskPrefix);
  }

  std::string Describe() const override {
    return "Python: py:package.module:function";
  }

  absl::Status Run(absl::string_view function, TaskContext& ctx) override {
    SHOAL_ASSIGN_OR_RETURN(TaskName name, ParseName(function));
    // Map store arguments (and a path or a function held in the store)
    // before taking the GIL: waiting on the store must not stop the
    // interpreter's threads. (functions_ is only touched on this thread.)
    SHOAL_ASSIGN_OR_RETURN(python_io::StoreArgs store_args,
                           python_io::StoreArgs::Map(ctx));
    SHOAL_ASSIGN_OR_RETURN(const std::string* path, ResolvePythonPath(ctx));
    std::string stored_function;
    if (name.kind == TaskName::Kind::kStored &&
        functions_.find(name.cache_key) == functions_.end()) {
      SHOAL_ASSIGN_OR_RETURN(stored_function,
                             ReadStoreObject(ctx, name.hex, "function"));
    }
    SHOAL_RETURN_IF_ERROR(EnsureStarted());
    PyGILState_STATE gil = PyGILState_Ensure();
    absl::Status s = RunLocked(name, *path, ctx, store_args, stored_function);
    PyGILState_Release(gil);
    return s;
  }

 private:
  // Starts the interpreter (once per process, for every runner) and leaves
  // the GIL released.
  absl::Status EnsureStarted() {
    static const absl::Status* started = new absl::Status(StartInterpreter());
    if (started->ok()) started_ = true;
    return *started;
  }

  static absl::Status StartInterpreter() {
    if (Py_IsInitialized()) return absl::OkStatus();  // embedded by a host
    PyConfig config;
    PyConfig_InitPythonConfig(&config);
    config.install_signal_handlers = 0;  // SIGINT/SIGTERM stay the worker's
    config.parse_argv = 0;
    // sys.executable is Debian's interpreter of the same version, so
    // multiprocessing and subprocess work from tasks as from a script.
    const std::string exe = absl::StrCat("/usr/bin/python", PY_MAJOR_VERSION,
                                         ".", PY_MINOR_VERSION);
    PyStatus st =
        PyConfig_SetBytesString(&config, &config.program_name, exe.c_str());
    char arg0[] = "shoal-worker";
    char* argv[] = {arg0};
    if (!PyStatus_Exception(st)) st = PyConfig_SetBytesArgv(&config, 1, argv);
    if (!PyStatus_Exception(st)) st = Py_InitializeFromConfig(&config);
    PyConfig_Clear(&config);
    if (PyStatus_Exception(st)) {
      return absl::InternalError(
          absl::StrCat("starting the embedded Python interpreter failed: ",
                       st.err_msg != nullptr ? st.err_msg : "unknown error"));
    }
    // Task output reaches the worker's log line by line, not at exit.
    PyRun_SimpleString(
        "import sys\n"
        "for _s in (sys.stdout, sys.stderr):\n"
        "    try:\n"
        "        _s.reconfigure(line_buffering=True)\n"
        "    except Exception:\n"
        "        pass\n");
    SHOAL_LOG(INFO, "embedded Python %s started", Py_GetVersion());
    if (g_start_hook != nullptr) {
      if (absl::Status hooked = g_start_hook(); !hooked.ok())
        SHOAL_LOG(WARNING, "the interpreter's start hook: %s",
                  hooked.ToString());
    }
    PyEval_SaveThread();  // the GIL is free until the next task
    return absl::OkStatus();
  }

  // The bytes of store object `hex` (a path or a pickled function a client
  // put once). REQUIRES: the GIL is NOT held (Get may wait).
  static absl::StatusOr<std::string> ReadStoreObject(TaskContext& ctx,
                                                     absl::string_view hex,
                                                     absl::string_view what) {
    SHOAL_ASSIGN_OR_RETURN(ObjectId id, ObjectId::FromHex(hex));
    shm::StoreClient* store = ctx.store();
    if (store == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("the task's ", what,
                       " is a store object, and this worker has no store "
                       "connection"));
    }
    absl::StatusOr<shm::ObjectBuffer> buf = store->Get(id, absl::Seconds(30));
    if (!buf.ok()) {
      return absl::Status(buf.status().code(),
                          absl::StrCat("the task's ", what, " (object ", hex,
                                       "): ", buf.status().message()));
    }
    std::string bytes(reinterpret_cast<const char*>(buf->data), buf->nbytes);
    (void)store->Release(id);
    return bytes;
  }

  // The task's search path: python_path itself, or for "@<object id>" the
  // text of that store object (a local client's path, put once instead of
  // riding along in every task). Resolved paths are cached by token.
  // REQUIRES: the GIL is NOT held (a first sight Gets the object).
  absl::StatusOr<const std::string*> ResolvePythonPath(TaskContext& ctx) {
    const absl::string_view path = ctx.python_path();
    if (!absl::StartsWith(path, kPythonPathObjectPrefix)) {
      inline_path_.assign(path.data(), path.size());
      return &inline_path_;
    }
    auto it = stored_paths_.find(path);
    if (it != stored_paths_.end()) return &it->second;
    SHOAL_ASSIGN_OR_RETURN(
        std::string text,
        ReadStoreObject(ctx, path.substr(sizeof(kPythonPathObjectPrefix) - 1),
                        "python path"));
    if (stored_paths_.size() >= 64) stored_paths_.clear();  // stay small
    return &stored_paths_.emplace(std::string(path), std::move(text))
                .first->second;
  }

  // REQUIRES: the GIL is held.
  absl::Status RunLocked(const TaskName& name, const std::string& python_path,
                         TaskContext& ctx, python_io::StoreArgs& store_args,
                         const std::string& stored_function) {
    ApplyPythonPath(python_path);
    py::object fn;
    py::object args, kwargs, carried;
    if (name.kind == TaskName::Kind::kByName) {  // import errors come first
      SHOAL_ASSIGN_OR_RETURN(fn, Resolve(name));
    }
    SHOAL_ASSIGN_OR_RETURN(PyObject * raw_args,
                           python_io::ArgsTuple(ctx, store_args));
    args = py::reinterpret_steal<py::object>(raw_args);
    if (name.envelope) {
      try {
        py::object loaded;
        PyObject* a = args.ptr();
        if (PyTuple_GET_SIZE(a) == 1 && PyBytes_Check(PyTuple_GET_ITEM(a, 0))) {
          // The common small call: its pickle alone, inline in the task (no
          // out-of-band buffers), read without load_call's Python frame:
          // PickleSmallCall's opcodes here, any other pickle by pickle.loads.
          PyObject* bytes = PyTuple_GET_ITEM(a, 0);
          PyObject* l = python::UnpickleSmallCall(
              absl::string_view(PyBytes_AS_STRING(bytes),
                                static_cast<size_t>(PyBytes_GET_SIZE(bytes))));
          if (l == nullptr) {
            if (!loads_) loads_ = py::module_::import("pickle").attr("loads");
            l = PyObject_CallOneArg(loads_.ptr(), bytes);
          }
          if (l == nullptr) throw py::error_already_set();
          loaded = py::reinterpret_steal<py::object>(l);
        } else {
          if (!load_call_) {
            load_call_ =
                py::module_::import("shoal._serialize").attr("load_call");
          }
          loaded = load_call_(*args);
        }
        if (!PyTuple_Check(loaded.ptr()) || PyTuple_GET_SIZE(loaded.ptr()) != 3)
          return absl::InvalidArgumentError(
              "the task's call envelope is not a (function, args, kwargs) "
              "tuple");
        py::tuple call = py::reinterpret_borrow<py::tuple>(loaded);
        carried = call[0];
        args = py::tuple(call[1]);
        kwargs = call[2];
      } catch (py::error_already_set& e) {
        e.restore();
        return TakePythonError("(while unpickling the task's arguments)\n");
      }
    }
    if (!fn) {
      SHOAL_ASSIGN_OR_RETURN(fn, LoadByValue(name, stored_function, carried));
    }
    TaskContext* outer = g_current_task;  // a task run inside a task's wait
    g_current_task = &ctx;
    PyObject* result = PyObject_Call(
        fn.ptr(), args.ptr(),
        kwargs && PyDict_Check(kwargs.ptr()) && PyDict_Size(kwargs.ptr()) > 0
            ? kwargs.ptr()
            : nullptr);
    g_current_task = outer;
    args = py::object();
    if (result == nullptr) return TakePythonError("");
    absl::Status s = python_io::AddOutputs(result, ctx);
    Py_DECREF(result);
    if (PyErr_Occurred()) PyErr_Clear();
    return s;
  }

  // A function sent by value: from the cache, else unpickled from the store
  // object's bytes (kStored) or the call's (kCarried), and cached.
  absl::StatusOr<py::object> LoadByValue(const TaskName& name,
                                         const std::string& stored,
                                         const py::object& carried) {
    auto it = functions_.find(name.cache_key);
    if (it != functions_.end()) return it->second;
    try {
      py::object loads = py::module_::import("pickle").attr("loads");
      py::object fn;
      if (name.kind == TaskName::Kind::kStored) {
        fn = loads(py::bytes(stored));
      } else if (carried && !carried.is_none()) {
        fn = loads(carried);
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("task py:#", name.hex, "! carries no function"));
      }
      if (!PyCallable_Check(fn.ptr())) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the task's function is a ", Py_TYPE(fn.ptr())->tp_name));
      }
      if (++by_value_cached_ > kMaxFunctionsByValue) ForgetByValue();
      ++g_functions_loaded;
      functions_.emplace(name.cache_key, fn);
      return fn;
    } catch (py::error_already_set& e) {
      e.restore();
      return TakePythonError("(while unpickling the task's function)\n");
    }
  }

  // Drops the cached by-value functions (a bound on a long-lived worker's
  // memory; a function still running is held by its caller).
  void ForgetByValue() {
    for (auto it = functions_.begin(); it != functions_.end();) {
      const char c = it->first.empty() ? ' ' : it->first[0];
      it = (c == '=' || c == '#') ? functions_.erase(it) : std::next(it);
    }
    by_value_cached_ = 1;
  }

  // Puts the task's directories at the front of sys.path (once per distinct
  // path string; entries already there stay where they are).
  void ApplyPythonPath(absl::string_view path) {
    if (path.empty() || path == applied_path_) return;
    applied_path_ = std::string(path);
    try {
      py::list sys_path = py::module_::import("sys").attr("path");
      std::vector<std::string> dirs =
          absl::StrSplit(path, ':', absl::SkipEmpty());
      size_t at = 0;
      bool added = false;
      for (const std::string& d : dirs) {
        if (sys_path.contains(py::str(d))) continue;
        sys_path.insert(at++, py::str(d));
        added = true;
      }
      if (added) py::module_::import("importlib").attr("invalidate_caches")();
    } catch (py::error_already_set& e) {
      SHOAL_LOG(WARNING, "applying a task's python_path: %s", e.what());
    }
  }

  // The cached callable of a by-name task, importing its module the first
  // time.
  absl::StatusOr<py::object> Resolve(const TaskName& name) {
    auto it = functions_.find(name.cache_key);
    if (it != functions_.end()) return it->second;
    const std::string function =
        absl::StrCat(kPythonTaskPrefix, name.cache_key);
    try {
      py::module_ importlib = py::module_::import("importlib");
      py::object obj;
      try {
        obj = importlib.attr("import_module")(name.module);
      } catch (py::error_already_set& e) {
        if (!e.matches(PyExc_ModuleNotFoundError)) throw;
        // A module written after this worker last looked at its folder.
        importlib.attr("invalidate_caches")();
        obj = importlib.attr("import_module")(name.module);
      }
      for (absl::string_view part : absl::StrSplit(name.qualname, '.'))
        obj = obj.attr(py::str(std::string(part)));
      if (!PyCallable_Check(obj.ptr())) {
        return absl::InvalidArgumentError(
            absl::StrCat(function, " is a ", Py_TYPE(obj.ptr())->tp_name,
                         ", not a function"));
      }
      functions_.emplace(name.cache_key, obj);
      return obj;
    } catch (py::error_already_set& e) {
      e.restore();
      return TakePythonError(
          absl::StrCat("(while importing ", function, ")\n"));
    }
  }

  bool started_ = false;  // this runner saw the interpreter start
  std::string inline_path_;
  std::map<std::string, std::string, std::less<>> stored_paths_;  // token →
  std::string applied_path_;
  // Cache key (the name without "py:" and "!") → function; the GIL guards
  // the objects.
  std::map<std::string, py::object> functions_;
  size_t by_value_cached_ = 0;
  py::object load_call_;  // shoal._serialize.load_call, once imported
  py::object loads_;      // pickle.loads, once imported
};

}  // namespace

std::unique_ptr<TaskRunner> MakePythonRunner() {
  return std::make_unique<PythonRunner>();
}

void SetPythonStartHook(absl::Status (*hook)()) { g_start_hook = hook; }

}  // namespace shoal::worker

// shoal.task inside a worker: what the running task may ask about itself.
PYBIND11_EMBEDDED_MODULE(_shoal_task, m) {
  using shoal::worker::CurrentTask;
  m.doc() = "The running shoal task (available only inside a worker).";
  m.def(
      "attempt", [] { return CurrentTask().attempt(); },
      "1 on the first run, 2+ when retried after a worker died.");
  m.def(
      "worker_id", [] { return CurrentTask().worker_id(); },
      "The id of the worker running this task.");
  m.def(
      "cancelled", [] { return CurrentTask().cancelled(); },
      "True once the task was cancelled or timed out.");
  m.def(
      "in_task", [] { return shoal::worker::g_current_task != nullptr; },
      "Whether a task is running on this thread now.");
  m.def(
      "functions_loaded", [] { return shoal::worker::g_functions_loaded; },
      "How many functions sent by value this worker unpickled (each once: "
      "later tasks find it in the cache).");
}
