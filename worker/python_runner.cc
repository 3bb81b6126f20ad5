#include "worker/python_runner.h"

#include <Python.h>
#include <pybind11/embed.h>

#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "ipc/object_id.h"
#include "ipc/task_name.h"
#include "ipc/task_payload.h"
#include "pyvalues/python_values.h"
#include "pyvalues/small_call_pickle.h"
#include "worker/python_interrupt.h"
#include "worker/python_task_io.h"

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

// What the runner keeps of a Python task's name (ipc::ParseTaskName).
struct TaskName {
  enum class Kind { kByName, kStored, kCarried };
  Kind kind = Kind::kByName;
  std::string module, qualname;  // kByName
  std::string hex;               // kStored: object id; kCarried: hash
  std::string cache_key;         // the name without "py:" and "!"
  bool envelope = false;         // "!": args[0] is the pickled call
};

absl::StatusOr<TaskName> ParseName(absl::string_view function) {
  SHOAL_ASSIGN_OR_RETURN(const ipc::TaskName parsed,
                         ipc::ParseTaskName(function));
  if (!parsed.python()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", function, "' is not a Python task name"));
  }
  TaskName n;
  n.envelope = parsed.envelope;
  n.cache_key =
      std::string(parsed.function.substr(sizeof(ipc::kPythonTaskPrefix) - 1));
  switch (parsed.kind) {
    case ipc::TaskName::Kind::kPythonModule:
      n.kind = TaskName::Kind::kByName;
      n.module = std::string(parsed.module);
      n.qualname = std::string(parsed.qualname);
      break;
    case ipc::TaskName::Kind::kPythonStored:
    case ipc::TaskName::Kind::kPythonCarried:
      n.kind = parsed.kind == ipc::TaskName::Kind::kPythonStored
                   ? TaskName::Kind::kStored
                   : TaskName::Kind::kCarried;
      // dump_function's hexdigest is lowercase; the hash is compared as such.
      n.hex = absl::AsciiStrToLower(parsed.hex);
      break;
    case ipc::TaskName::Kind::kNative:
      break;
  }
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

// `exception` pickled (protocol 5) by shoal._serialize.dump_exception: its
// class, args and attributes, the class by value when only this process
// knows it (defined in the driver's __main__, or in a function), so the
// client raises the task's own exception. Without the shoal package (a
// process that embeds the runner alone), plain pickle. "" when it cannot be
// pickled or would not load again: the client then gets a TaskError. No
// error is left pending.
std::string PickledException(PyObject* exception) {
  if (exception == nullptr) return "";
  py::object dump;
  try {
    dump = py::module_::import("shoal._serialize").attr("dump_exception");
  } catch (py::error_already_set&) {
    PyErr_Clear();
  }
  try {
    if (dump) return dump(py::handle(exception)).cast<std::string>();
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

// A function in a path's cache. For "#<hash>" functions `pickle` is the bytes
// it was unpickled from, whose hash was checked against the name.
struct CachedFunction {
  py::object fn;
  py::object pickle;  // bytes, or null
};

// One python_path as the runner applies it (the text of an "@<id>" path):
// its folders, the modules tasks imported from the folders the worker's own
// sys.path lacks (kept out of sys.modules between its tasks), and the
// functions resolved under it. Its objects are touched only under the GIL.
struct PathPlan {
  std::string text;
  py::tuple dirs;  // the path's folders, in order (str)
  // The folders the base sys.path lacks (to_add, inserted at its front for a
  // task), for the base sys.path of `base_version`; `origins` names each of
  // them as module files do (the folder as given, and made absolute).
  uint64_t base_version = 0;
  py::tuple to_add;
  std::vector<std::string> origins;
  bool caches_invalidated = false;  // importlib.invalidate_caches() done
  // name → module: what its tasks imported from to_add, out of sys.modules
  // while none of its tasks runs.
  py::dict stash;
  // Cache key (the task name without "py:" and "!") → function.
  std::map<std::string, CachedFunction, std::less<>> functions;
  py::object load_call;  // shoal._serialize.load_call, imported under it
};

// What Begin did to sys.path and sys.modules for one task, for End to undo.
struct Applied {
  PathPlan* plan = nullptr;
  bool added = false;             // plan->to_add went into sys.path
  py::tuple inserted;             // exactly what went in
  bool restored = false;          // the plan's stash went into sys.modules
  py::object displaced;           // modules the stash replaced there (a dict)
  Py_ssize_t modules_before = 0;  // len(sys.modules) after Begin
};

// Whether module `name` (`module`) was found under one of `origins`: its file
// (or, for a namespace package, a folder of its __path__) is
// "<origin>/<top>/..." or "<origin>/<top>.<suffix>", <top> being the first
// part of its name. A module kept under another name does not match.
bool FromOrigins(PyObject* name, PyObject* module,
                 const std::vector<std::string>& origins) {
  if (!PyUnicode_Check(name)) return false;
  const char* n = PyUnicode_AsUTF8(name);
  if (n == nullptr) {
    PyErr_Clear();
    return false;
  }
  const absl::string_view full(n);
  const absl::string_view top = full.substr(0, full.find('.'));
  auto under = [&](absl::string_view file) {
    for (const std::string& o : origins) {
      absl::string_view rest = file;
      if (!absl::ConsumePrefix(&rest, o) || !absl::ConsumePrefix(&rest, "/") ||
          !absl::ConsumePrefix(&rest, top)) {
        continue;
      }
      if (rest.empty() || rest[0] == '/' || rest[0] == '.') return true;
    }
    return false;
  };
  auto text = [](PyObject* s) -> absl::string_view {
    if (s == nullptr || !PyUnicode_Check(s)) return {};
    Py_ssize_t size = 0;
    const char* c = PyUnicode_AsUTF8AndSize(s, &size);
    if (c == nullptr) {
      PyErr_Clear();
      return {};
    }
    return absl::string_view(c, static_cast<size_t>(size));
  };
  bool found = false;
  if (PyObject* file = PyObject_GetAttrString(module, "__file__")) {
    found = under(text(file));
    Py_DECREF(file);
    if (found) return true;
  } else {
    PyErr_Clear();
  }
  PyObject* path = PyObject_GetAttrString(module, "__path__");
  if (path == nullptr) {
    PyErr_Clear();
    return false;
  }
  if (PyObject* it = PyObject_GetIter(path)) {
    while (PyObject* entry = PyIter_Next(it)) {
      const absl::string_view e = text(entry);
      found = !e.empty() && under(absl::StrCat(e, "/"));
      Py_DECREF(entry);
      if (found) break;
    }
    Py_DECREF(it);
  }
  PyErr_Clear();
  Py_DECREF(path);
  return found;
}

class PythonRunner : public TaskRunner {
 public:
  explicit PythonRunner(const PythonRunnerOptions& options)
      : isolate_(options.isolate_tasks) {
    // Before any task: a forced cancellation's signal must find its handler
    // even in a worker that has run no Python task yet.
    StartForceCancelWatch();
  }
  ~PythonRunner() override {
    if (!started_) return;
    // The cached functions and modules are Python objects: drop them under
    // the GIL. The interpreter itself is never finalized (the process is
    // ending, and finalizing could wait on threads a task left behind).
    PyGILState_STATE g = PyGILState_Ensure();
    stack_.clear();
    last_plan_ = nullptr;
    plans_.clear();
    base_snapshot_ = py::object();
    loads_ = py::object();
    blake2b_ = py::object();
    sys_dict_ = py::object();
    path_key_ = py::object();
    PyGILState_Release(g);
  }

  bool Handles(absl::string_view function) const override {
    return absl::StartsWith(function, ipc::kPythonTaskPrefix);
  }

  std::string Describe() const override {
    return "Python: py:package.module:function";
  }

  absl::Status Run(absl::string_view function, TaskContext& ctx) override {
    SHOAL_ASSIGN_OR_RETURN(TaskName name, ParseName(function));
    // Map store arguments (and a path or a function held in the store)
    // before taking the GIL: waiting on the store must not stop the
    // interpreter's threads. (The runner's state is only touched on this
    // thread.)
    SHOAL_ASSIGN_OR_RETURN(python_io::StoreArgs store_args,
                           python_io::StoreArgs::Map(ctx));
    SHOAL_ASSIGN_OR_RETURN(const absl::string_view path,
                           ResolvePythonPath(ctx));
    std::string stored_function;
    if (name.kind == TaskName::Kind::kStored) {
      auto p = plans_.find(path);
      if (p == plans_.end() || p->second->functions.find(name.cache_key) ==
                                   p->second->functions.end()) {
        SHOAL_ASSIGN_OR_RETURN(stored_function,
                               ReadStoreObject(ctx, name.hex, "function"));
      }
    }
    SHOAL_RETURN_IF_ERROR(EnsureStarted());
    PyGILState_STATE gil = PyGILState_Ensure();
    absl::Status s = BaseModules();
    if (s.ok()) {
      PathPlan& plan = PlanFor(path);
      auto body = [&] {
        return RunLocked(name, plan, ctx, store_args, stored_function);
      };
      s = isolate_ ? RunIsolated(plan, body) : RunSticky(plan, body);
    }
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
    // sys.executable is the interpreter the build embeds
    // (@shoal_python//:python_embed), so multiprocessing and subprocess work
    // from tasks as from a script.
#ifdef SHOAL_PYTHON_EXECUTABLE
    const std::string exe = SHOAL_PYTHON_EXECUTABLE;
#else
    const std::string exe = absl::StrCat("/usr/bin/python", PY_MAJOR_VERSION,
                                         ".", PY_MINOR_VERSION);
#endif
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

  // pickle.loads and hashlib.blake2b, imported before any task's path is
  // applied (so no task's folder can stand in for them) and kept.
  // REQUIRES: the GIL is held.
  absl::Status BaseModules() {
    if (loads_) return absl::OkStatus();
    try {
      py::object loads = py::module_::import("pickle").attr("loads");
      blake2b_ = py::module_::import("hashlib").attr("blake2b");
      sys_dict_ = py::module_::import("sys").attr("__dict__");
      path_key_ =
          py::reinterpret_steal<py::object>(PyUnicode_InternFromString("path"));
      loads_ = loads;
      return absl::OkStatus();
    } catch (py::error_already_set& e) {
      e.restore();
      return TakePythonError("(while importing pickle and hashlib)\n");
    }
  }

  // sys.path (borrowed; null if gone), without making the key's str each
  // time as PySys_GetObject does. REQUIRES: the GIL is held; BaseModules ran.
  PyObject* SysPath() const {
    PyObject* p = PyDict_GetItemWithError(sys_dict_.ptr(), path_key_.ptr());
    if (p == nullptr) PyErr_Clear();
    return p;
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
  // riding along in every task). Texts of objects are cached by object id:
  // a sealed object's bytes never change.
  // The view is valid until the runner's next call of it (Run makes the
  // task's plan from it at once). REQUIRES: the GIL is NOT held (a first
  // sight Gets the object).
  absl::StatusOr<absl::string_view> ResolvePythonPath(TaskContext& ctx) {
    const absl::string_view path = ctx.python_path();
    if (!absl::StartsWith(path, kPythonPathObjectPrefix)) return path;
    auto it = stored_paths_.find(path);
    if (it != stored_paths_.end()) return it->second;
    SHOAL_ASSIGN_OR_RETURN(
        std::string text,
        ReadStoreObject(ctx, path.substr(sizeof(kPythonPathObjectPrefix) - 1),
                        "python path"));
    if (stored_paths_.size() >= 64) stored_paths_.clear();  // stay small
    return stored_paths_.emplace(std::string(path), std::move(text))
        .first->second;
  }

  // The plan of path `text`, made at its first sight. Plans are dropped
  // (with their functions and modules) beyond kMaxPlans, only while no task
  // runs. REQUIRES: the GIL is held.
  PathPlan& PlanFor(absl::string_view text) {
    if (last_plan_ != nullptr && last_plan_->text == text) return *last_plan_;
    auto it = plans_.find(text);
    if (it == plans_.end()) {
      if (plans_.size() >= kMaxPlans && stack_.empty()) {
        last_plan_ = nullptr;
        sticky_plan_ = nullptr;
        plans_.clear();
        by_value_cached_ = 0;
      }
      auto plan = std::make_unique<PathPlan>();
      plan->text = std::string(text);
      std::vector<std::string> dirs =
          absl::StrSplit(text, ':', absl::SkipEmpty());
      plan->dirs = py::tuple(dirs.size());
      for (size_t i = 0; i < dirs.size(); ++i) plan->dirs[i] = py::str(dirs[i]);
      it = plans_.emplace(std::string(text), std::move(plan)).first;
    }
    last_plan_ = it->second.get();
    return *last_plan_;
  }

  // Runs `body` with `plan` applied, then takes it back out, so that no task's
  // path or imports outlive it. A task run inside another's wait (nested)
  // with another path takes the outer one's out first and puts it back
  // after; with the same path it runs under the outer one's.
  // REQUIRES: the GIL is held.
  template <typename Body>
  absl::Status RunIsolated(PathPlan& plan, Body body) {
    if (!stack_.empty() && stack_.back().plan == &plan) return body();
    PathPlan* outer = nullptr;
    if (!stack_.empty()) {
      outer = stack_.back().plan;
      End(stack_.back());
      stack_.pop_back();
    }
    stack_.push_back(Begin(plan));
    absl::Status s = body();
    End(stack_.back());
    stack_.pop_back();
    if (outer != nullptr) stack_.push_back(Begin(*outer));
    return s;
  }

  // An actor's worker (one client's process for the actor's life): the
  // path stays applied, as the constructor's imports stay. Each distinct path
  // is added once to the front of sys.path; entries already there stay.
  template <typename Body>
  absl::Status RunSticky(PathPlan& plan, Body body) {
    if (&plan != sticky_plan_) {
      sticky_plan_ = &plan;
      try {
        py::list sys_path = py::module_::import("sys").attr("path");
        size_t at = 0;
        bool added = false;
        for (py::handle d : plan.dirs) {
          if (sys_path.contains(d)) continue;
          sys_path.insert(at++, d);
          added = true;
        }
        if (added) py::module_::import("importlib").attr("invalidate_caches")();
      } catch (py::error_already_set& e) {
        SHOAL_LOG(WARNING, "applying a task's python_path: %s", e.what());
      }
    }
    return body();
  }

  // The base sys.path (what is there while no path is applied) is
  // remembered by identity of its items; a change makes every plan
  // recompute the folders it adds. REQUIRES: the GIL is held.
  void RefreshBase(PyObject* sys_path) {
    const Py_ssize_t n = PyList_GET_SIZE(sys_path);
    if (base_snapshot_ && PyTuple_GET_SIZE(base_snapshot_.ptr()) == n) {
      bool same = true;
      for (Py_ssize_t i = 0; i < n && same; ++i) {
        same = PyList_GET_ITEM(sys_path, i) ==
               PyTuple_GET_ITEM(base_snapshot_.ptr(), i);
      }
      if (same) return;
    }
    base_snapshot_ =
        py::reinterpret_steal<py::object>(PyList_AsTuple(sys_path));
    ++base_version_;
  }

  // plan.to_add and its origins for the current base sys.path.
  // REQUIRES: the GIL is held.
  void ComputeToAdd(PathPlan& plan, PyObject* sys_path) {
    py::list add;
    plan.origins.clear();
    try {
      py::object os_path = py::module_::import("os.path");
      py::object abspath = os_path.attr("abspath");
      for (py::handle d : plan.dirs) {
        if (PySequence_Contains(sys_path, d.ptr()) != 0 ||
            PySequence_Contains(add.ptr(), d.ptr()) != 0) {
          continue;
        }
        add.append(d);
        // FileFinder names a relative folder's files after the working
        // folder joined to it ("" is the working folder itself).
        for (std::string o :
             {d.cast<std::string>(), abspath(d).cast<std::string>()}) {
          while (o.size() > 1 && o.back() == '/') o.pop_back();
          if (!o.empty()) plan.origins.push_back(o);
        }
      }
    } catch (py::error_already_set& e) {
      SHOAL_LOG(WARNING, "reading a task's python_path: %s", e.what());
    }
    PyErr_Clear();
    plan.to_add = py::tuple(add);
    plan.base_version = base_version_;
  }

  // Applies `plan` for one task: its folders the base sys.path lacks go to
  // the front of sys.path, and the modules its earlier tasks imported from
  // them back into sys.modules. A plan that adds no folder changes nothing.
  // REQUIRES: the GIL is held.
  Applied Begin(PathPlan& plan) {
    Applied a;
    a.plan = &plan;
    if (PyTuple_GET_SIZE(plan.dirs.ptr()) == 0) return a;
    PyObject* sys_path = SysPath();
    if (sys_path == nullptr || !PyList_Check(sys_path)) return a;
    RefreshBase(sys_path);
    if (plan.base_version != base_version_) ComputeToAdd(plan, sys_path);
    if (PyTuple_GET_SIZE(plan.to_add.ptr()) == 0) return a;
    if (PyList_SetSlice(sys_path, 0, 0, plan.to_add.ptr()) != 0) {
      PyErr_Clear();
      SHOAL_LOG(WARNING, "cannot put a task's python_path into sys.path");
      return a;
    }
    a.added = true;
    a.inserted = plan.to_add;
    if (!plan.caches_invalidated) {
      // Folders written after this process last looked at them.
      plan.caches_invalidated = true;
      try {
        py::module_::import("importlib").attr("invalidate_caches")();
      } catch (py::error_already_set&) {
        PyErr_Clear();
      }
    }
    PyObject* modules = PyImport_GetModuleDict();  // borrowed
    if (PyDict_GET_SIZE(plan.stash.ptr()) > 0) {
      PyObject *key, *value;
      Py_ssize_t pos = 0;
      while (PyDict_Next(plan.stash.ptr(), &pos, &key, &value)) {
        if (PyObject* there = PyDict_GetItemWithError(modules, key)) {
          if (!a.displaced) a.displaced = py::dict();
          PyDict_SetItem(a.displaced.ptr(), key, there);
        }
        PyDict_SetItem(modules, key, value);
      }
      PyErr_Clear();
      a.restored = true;
    }
    a.modules_before = PyDict_GET_SIZE(modules);
    return a;
  }

  // Undoes Begin after the task: the folders it added leave sys.path, and
  // the modules imported from them (found among those added to sys.modules
  // meanwhile: a dict keeps insertion order, so the new ones are its last;
  // all are looked at if it shrank) leave sys.modules for the plan's stash;
  // modules the stash displaced come back. REQUIRES: the GIL is held.
  void End(Applied& a) {
    if (!a.added) return;
    PathPlan& plan = *a.plan;
    if (PyObject* sys_path = SysPath();
        sys_path != nullptr && PyList_Check(sys_path)) {
      RemoveInserted(sys_path, a.inserted.ptr());
    }
    PyObject* modules = PyImport_GetModuleDict();
    PyObject* stash = plan.stash.ptr();
    const Py_ssize_t now = PyDict_GET_SIZE(modules);
    if (a.restored) {
      // The stash's modules as they are now (a task may replace or drop
      // one); the dict is reused, so a steady path allocates nothing here.
      std::vector<py::object> gone;
      PyObject *key, *value;
      Py_ssize_t pos = 0;
      while (PyDict_Next(stash, &pos, &key, &value)) {
        PyObject* there = PyDict_GetItemWithError(modules, key);
        if (there == nullptr) {
          gone.push_back(py::reinterpret_borrow<py::object>(key));
        } else if (there != value) {
          PyDict_SetItem(stash, key, there);  // same keys: allowed here
        }
      }
      for (const py::object& k : gone) PyDict_DelItem(stash, k.ptr());
      PyErr_Clear();
    } else if (PyDict_GET_SIZE(stash) > 0) {
      PyDict_Clear(stash);
    }
    if (now != a.modules_before) {
      const bool grew = now > a.modules_before;
      PyObject* it = grew
                         ? PyObject_CallMethod(modules, "__reversed__", nullptr)
                         : PyObject_GetIter(modules);
      Py_ssize_t left = grew ? now - a.modules_before : now;
      while (it != nullptr && left-- > 0) {
        PyObject* key = PyIter_Next(it);
        if (key == nullptr) break;
        PyObject* value = PyDict_GetItemWithError(modules, key);
        if (value != nullptr && FromOrigins(key, value, plan.origins))
          PyDict_SetItem(stash, key, value);
        Py_DECREF(key);
      }
      Py_XDECREF(it);
      PyErr_Clear();
    }
    {
      PyObject *key, *value;
      Py_ssize_t pos = 0;
      while (PyDict_Next(stash, &pos, &key, &value)) {
        if (PyDict_DelItem(modules, key) != 0) PyErr_Clear();
      }
    }
    if (a.displaced) {
      PyObject *key, *value;
      Py_ssize_t pos = 0;
      while (PyDict_Next(a.displaced.ptr(), &pos, &key, &value)) {
        if (PyDict_Contains(modules, key) == 0)
          PyDict_SetItem(modules, key, value);
      }
      PyErr_Clear();
    }
    a.added = false;
  }

  // Takes the entries in `inserted` (a tuple) back out of sys.path: from its
  // front when they are still there, else wherever they are now.
  static void RemoveInserted(PyObject* sys_path, PyObject* inserted) {
    const Py_ssize_t k = PyTuple_GET_SIZE(inserted);
    bool front = PyList_GET_SIZE(sys_path) >= k;
    for (Py_ssize_t i = 0; i < k && front; ++i)
      front = PyList_GET_ITEM(sys_path, i) == PyTuple_GET_ITEM(inserted, i);
    if (front) {
      if (PyList_SetSlice(sys_path, 0, k, nullptr) != 0) PyErr_Clear();
      return;
    }
    for (Py_ssize_t i = 0; i < k; ++i) {
      PyObject* entry = PyTuple_GET_ITEM(inserted, i);
      for (Py_ssize_t j = 0; j < PyList_GET_SIZE(sys_path); ++j) {
        PyObject* item = PyList_GET_ITEM(sys_path, j);
        if (item == entry ||
            PyObject_RichCompareBool(item, entry, Py_EQ) == 1) {
          if (PySequence_DelItem(sys_path, j) != 0) PyErr_Clear();
          break;
        }
      }
      PyErr_Clear();
    }
  }

  // REQUIRES: the GIL is held; `plan` is applied.
  absl::Status RunLocked(const TaskName& name, PathPlan& plan, TaskContext& ctx,
                         python_io::StoreArgs& store_args,
                         const std::string& stored_function) {
    py::object fn;
    py::object args, kwargs, carried;
    if (name.kind == TaskName::Kind::kByName) {  // import errors come first
      SHOAL_ASSIGN_OR_RETURN(fn, Resolve(name, plan));
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
          if (l == nullptr) l = PyObject_CallOneArg(loads_.ptr(), bytes);
          if (l == nullptr) throw py::error_already_set();
          loaded = py::reinterpret_steal<py::object>(l);
        } else {
          if (!plan.load_call) {
            plan.load_call =
                py::module_::import("shoal._serialize").attr("load_call");
          }
          loaded = plan.load_call(*args);
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
      SHOAL_ASSIGN_OR_RETURN(fn,
                             LoadByValue(name, plan, stored_function, carried));
    }
    TaskContext* outer = g_current_task;  // a task run inside a task's wait
    g_current_task = &ctx;
    bool interrupted;
    PyObject* result;
    {
      RunningPythonTask running(ctx);
      result = PyObject_Call(
          fn.ptr(), args.ptr(),
          kwargs && PyDict_Check(kwargs.ptr()) && PyDict_Size(kwargs.ptr()) > 0
              ? kwargs.ptr()
              : nullptr);
      interrupted = running.TakeInterrupt();
    }
    g_current_task = outer;
    args = py::object();
    if (result == nullptr && interrupted &&
        PyErr_ExceptionMatches(TaskCancelledErrorType())) {
      PyErr_Clear();
      return absl::CancelledError(
          "cancelled with force=True: stopped by "
          "shoal.task.TaskCancelledError");
    }
    if (result == nullptr) return TakePythonError("");
    absl::Status s = python_io::AddOutputs(result, ctx);
    Py_DECREF(result);
    if (PyErr_Occurred()) PyErr_Clear();
    if (absl::IsInvalidArgument(s)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "task ", DescribeFunction(fn, name.cache_key), ": ", s.message()));
    }
    return s;
  }

  // "module.qualname (file, line N)" of a task's function, by
  // shoal._serialize.describe_function; the task's name without the shoal
  // package. No error is left pending.
  static std::string DescribeFunction(const py::object& fn,
                                      absl::string_view function) {
    try {
      return py::module_::import("shoal._serialize")
          .attr("describe_function")(fn)
          .cast<std::string>();
    } catch (py::error_already_set&) {
      PyErr_Clear();
      return std::string(function);
    }
  }

  // The hex blake2b-128 digest of `bytes`: what dump_function in
  // python/shoal/_serialize.py names a function by.
  std::string ContentHash(PyObject* bytes) {
    return py::str(blake2b_(py::handle(bytes), py::arg("digest_size") = 16)
                       .attr("hexdigest")());
  }

  // A function sent by value: from the plan's cache, else unpickled from the
  // store object's bytes (kStored) or the call's (kCarried), and cached. A
  // carried function is cached, and served from the cache, only for the
  // bytes its name's hash was computed from: bytes that hash to another
  // value are refused (InvalidArgument naming both hashes), whatever the
  // cache holds.
  absl::StatusOr<py::object> LoadByValue(const TaskName& name, PathPlan& plan,
                                         const std::string& stored,
                                         const py::object& carried) {
    const bool is_carried = name.kind == TaskName::Kind::kCarried;
    if (is_carried && (!carried || !PyBytes_Check(carried.ptr()))) {
      return absl::InvalidArgumentError(
          absl::StrCat("task py:#", name.hex,
                       "! carries no function (the first item of its "
                       "call envelope is ",
                       carried ? Py_TYPE(carried.ptr())->tp_name : "missing",
                       ", not the function's pickle)"));
    }
    auto it = plan.functions.find(name.cache_key);
    if (it != plan.functions.end()) {
      if (!is_carried) return it->second.fn;
      PyObject* had = it->second.pickle.ptr();
      PyObject* got = carried.ptr();
      if (had != nullptr && PyBytes_GET_SIZE(had) == PyBytes_GET_SIZE(got) &&
          std::memcmp(PyBytes_AS_STRING(had), PyBytes_AS_STRING(got),
                      static_cast<size_t>(PyBytes_GET_SIZE(got))) == 0) {
        return it->second.fn;
      }
    }
    try {
      if (is_carried) {
        const std::string actual = ContentHash(carried.ptr());
        if (actual != name.hex) {
          return absl::InvalidArgumentError(absl::StrCat(
              "task py:#", name.hex, "!: the function it carries hashes to ",
              actual, " (blake2b-128 of its pickle), not to the ", name.hex,
              " its name claims; nothing was run or cached"));
        }
      }
      py::object fn = is_carried ? loads_(carried) : loads_(py::bytes(stored));
      if (!PyCallable_Check(fn.ptr())) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the task's function is a ", Py_TYPE(fn.ptr())->tp_name));
      }
      if (++by_value_cached_ > kMaxFunctionsByValue) ForgetByValue();
      ++g_functions_loaded;
      plan.functions[name.cache_key] =
          CachedFunction{fn, is_carried ? carried : py::object()};
      return fn;
    } catch (py::error_already_set& e) {
      e.restore();
      return TakePythonError("(while unpickling the task's function)\n");
    }
  }

  // Drops the cached by-value functions (a bound on a long-lived worker's
  // memory; a function still running is held by its caller).
  void ForgetByValue() {
    for (auto& [text, plan] : plans_) {
      for (auto it = plan->functions.begin(); it != plan->functions.end();) {
        const char c = it->first.empty() ? ' ' : it->first[0];
        it = (c == '=' || c == '#') ? plan->functions.erase(it) : std::next(it);
      }
    }
    by_value_cached_ = 1;
  }

  // The cached callable of a by-name task under `plan`, importing its module
  // the first time.
  absl::StatusOr<py::object> Resolve(const TaskName& name, PathPlan& plan) {
    auto it = plan.functions.find(name.cache_key);
    if (it != plan.functions.end()) return it->second.fn;
    const std::string function =
        absl::StrCat(ipc::kPythonTaskPrefix, name.cache_key);
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
      plan.functions[name.cache_key] = CachedFunction{obj, py::object()};
      return obj;
    } catch (py::error_already_set& e) {
      e.restore();
      return TakePythonError(
          absl::StrCat("(while importing ", function, ")\n"));
    }
  }

  // Paths a worker keeps plans for (all are dropped beyond this).
  static constexpr size_t kMaxPlans = 64;

  const bool isolate_;    // PythonRunnerOptions::isolate_tasks
  bool started_ = false;  // this runner saw the interpreter start
  std::map<std::string, std::string, std::less<>> stored_paths_;  // token →
  // Path text → its plan (the empty path included). Touched under the GIL.
  absl::flat_hash_map<std::string, std::unique_ptr<PathPlan>> plans_;
  PathPlan* last_plan_ = nullptr;    // the plan PlanFor found last
  std::vector<Applied> stack_;       // applied plans, the running task's last
  PathPlan* sticky_plan_ = nullptr;  // the path applied last (actors)
  py::object base_snapshot_;         // tuple: the base sys.path's items
  uint64_t base_version_ = 0;        // bumped when the base sys.path changes
  size_t by_value_cached_ = 0;
  py::object loads_;     // pickle.loads
  py::object blake2b_;   // hashlib.blake2b
  py::object sys_dict_;  // sys.__dict__
  py::object path_key_;  // "path", interned
};

}  // namespace

std::unique_ptr<TaskRunner> MakePythonRunner(
    const PythonRunnerOptions& options) {
  return std::make_unique<PythonRunner>(options);
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
  m.attr("TaskCancelledError") = pybind11::reinterpret_borrow<pybind11::object>(
      shoal::worker::TaskCancelledErrorType());
  m.def(
      "in_task", [] { return shoal::worker::g_current_task != nullptr; },
      "Whether a task is running on this thread now.");
  m.def(
      "functions_loaded", [] { return shoal::worker::g_functions_loaded; },
      "How many functions sent by value this worker unpickled (each once: "
      "later tasks find it in the cache).");
}
