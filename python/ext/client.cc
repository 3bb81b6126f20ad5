// shoal._shoal.Client: the task client (coordinator::Client) for Python.
#include "coordinator/client.h"

#include <pybind11/stl.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/mutex.h"
#include "python/ext/common.h"
#include "python/ext/module.h"
#include "python/ext/store.h"
#include "python/ext/values.h"
#include "pyvalues/small_call_pickle.h"

namespace shoal::pyext {
namespace {

class ClientHandle : public std::enable_shared_from_this<ClientHandle> {
 public:
  static std::shared_ptr<ClientHandle> Connect(const std::string& endpoint,
                                               const std::string& job_id,
                                               const std::string& name,
                                               bool force_remote) {
    coordinator::ClientOptions o;
    o.endpoint = endpoint;
    o.job_id = job_id;
    o.name = name;
    o.force_remote = force_remote;
    // A remote client's tasks go pipelined (SubmitAsync, results pushed):
    // a window as large as the node's per-client queue quota allows, so
    // that Python's unbounded futures rarely meet it.
    o.window = kRemoteWindow;
    absl::StatusOr<std::unique_ptr<coordinator::Client>> c;
    {
      py::gil_scoped_release release;
      c = coordinator::Client::Connect(o);
    }
    auto h = std::make_shared<ClientHandle>();
    std::unique_ptr<coordinator::Client> client = Unwrap(std::move(c));
    h->local_ = client->local();
    h->owner_ = client->owner();
    const char* pipelined = std::getenv("SHOAL_PY_REMOTE_PIPELINE");
    h->pipelined_ =
        !h->local_ && (pipelined == nullptr || std::string(pipelined) != "0");
    h->job_id_ = client->job_id();
    h->client_ = std::move(client);
    return h;
  }

  bool local() const { return local_; }
  bool owner() const { return owner_; }
  const std::string& job_id() const { return job_id_; }

  // The store as an ObjectRef owner (local clients); nullptr when remote.
  std::shared_ptr<StoreHandle> store() ABSL_LOCKS_EXCLUDED(mu_) {
    if (!local_) return nullptr;
    MutexLock lock(&mu_);
    std::shared_ptr<StoreHandle> s = store_.lock();
    if (!s) {
      s = std::make_shared<StoreHandle>(shared_from_this(), client_->store());
      if (node_stopped_) s->service_gone.store(true);
      store_ = s;
    }
    return s;
  }

  std::shared_ptr<StoreHandle> RequireStore() {
    std::shared_ptr<StoreHandle> s = store();
    if (!s) {
      Check(absl::FailedPreconditionError(
          "this client is remote (not on the node's machine): it has no "
          "store; put/get need a local client"));
    }
    return s;
  }

  // Returns (task id, the ObjectRefs its arguments were put into, or None).
  py::tuple Submit(const std::string& function, py::sequence args,
                   const std::string& python_path, double timeout_s,
                   int max_retries, int cpus, int gpus)
      ABSL_LOCKS_EXCLUDED(mu_) {
    ipc::TaskSpec spec =
        Spec(function, python_path, timeout_s, max_retries, cpus, gpus);
    py::list keep;
    const size_t n = py::len(args);
    if (n > 0) {
      std::shared_ptr<StoreHandle> s = store();
      spec.args.reserve(n);
      for (size_t i = 0; i < n; ++i)
        spec.args.push_back(ArgToValue(args[i], i, s, keep));
    }
    py::object none_or_keep = keep.empty() ? py::object(py::none()) : keep;
    return SubmitSpec(std::move(spec), std::move(none_or_keep));
  }

  // The common small call in one step (python/shoal/_client.py
  // _submit_plain): `function` (the caller's name for an envelope call,
  // ending in "!") with the call envelope's pickle (PickleSmallCall) as its
  // one argument. Returns as Submit, or None when
  // the arguments are not that case (the Python pickler is used then).
  py::object SubmitSmallCall(const std::string& function, py::handle fn_bytes,
                             py::handle args, const std::string& python_path,
                             double timeout_s, int max_retries, int cpus,
                             int gpus) ABSL_LOCKS_EXCLUDED(mu_) {
    std::optional<std::string> envelope =
        python::PickleSmallCall(fn_bytes.ptr(), args.ptr());
    if (!envelope.has_value()) return py::none();
    ipc::TaskSpec spec =
        Spec(function, python_path, timeout_s, max_retries, cpus, gpus);
    spec.args.push_back(BytesValue{*std::move(envelope)});
    return SubmitSpec(std::move(spec), py::none());
  }

  // Waits until `min_done` of `ids` finished (0: all) or the timeout, in
  // slices so Ctrl-C interrupts it. Returns one tuple per finished task:
  // (id, status code, message bytes, outputs list, attempts, exception), the
  // exception None or, when a Python task raised, its (type, message,
  // traceback, pickled exception or b"") as bytes (ipc::TaskException).
  // Finished tasks are released from the table (their outputs now belong to the
  // tuples).
  py::list Wait(const std::vector<uint64_t>& ids, py::object timeout,
                size_t min_done) ABSL_LOCKS_EXCLUDED(mu_) {
    const absl::Duration t = TimeoutFromPython(timeout);
    const absl::Time deadline = t == absl::InfiniteDuration()
                                    ? absl::InfiniteFuture()
                                    : absl::Now() + t;
    const size_t want =
        min_done == 0 ? ids.size() : std::min(min_done, ids.size());
    if (pipelined_) return AwaitPipelined(ids, deadline, want);
    std::vector<coordinator::TaskRef> pending;
    pending.reserve(ids.size());
    for (uint64_t id : ids) pending.push_back({id});
    std::vector<ipc::TaskResult> finished;
    while (finished.size() < want) {
      const absl::Duration slice =
          std::max(absl::ZeroDuration(),
                   std::min(deadline - absl::Now(), kSignalCheckInterval));
      absl::StatusOr<std::vector<ipc::TaskResult>> got;
      {
        py::gil_scoped_release release;
        MutexLock lock(&mu_);
        got = client_->Wait(pending, slice, want - finished.size(),
                            /*release=*/true);
      }
      if (!got.ok()) {
        {
          py::gil_scoped_release release;
          MutexLock lock(&mu_);
          for (const ipc::TaskResult& r : finished) client_->ReleaseOutputs(r);
        }
        ThrowStatus(got.status());
      }
      if (!got->empty()) {
        std::unordered_set<uint64_t> done;
        for (ipc::TaskResult& r : *got) {
          done.insert(r.task_id);
          finished.push_back(std::move(r));
        }
        pending.erase(std::remove_if(pending.begin(), pending.end(),
                                     [&](const coordinator::TaskRef& p) {
                                       return done.count(p.id) > 0;
                                     }),
                      pending.end());
      }
      if (finished.size() >= want || absl::Now() >= deadline) break;
      CheckSignals();
    }
    return ResultsToPython(finished);
  }

  bool Cancel(uint64_t id) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::Status s;
    {
      py::gil_scoped_release release;
      MutexLock lock(&mu_);
      s = (id & kPipelinedBit) != 0
              ? client_->Cancel(coordinator::PendingTask{id & ~kPipelinedBit})
              : client_->Cancel(coordinator::TaskRef{id});
    }
    if (absl::IsNotFound(s)) return false;
    Check(s);
    return true;
  }

  void Release(const std::vector<uint64_t>& ids) ABSL_LOCKS_EXCLUDED(mu_) {
    py::gil_scoped_release release;
    MutexLock lock(&mu_);
    for (uint64_t id : ids) (void)client_->Release({id});
  }

  py::dict Status() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::StatusOr<ipc::NodeStatus> st;
    {
      py::gil_scoped_release release;
      MutexLock lock(&mu_);
      st = client_->Status();
    }
    ipc::NodeStatus s = Unwrap(std::move(st));
    py::list workers;
    for (const ipc::WorkerStatus& w : s.workers()) {
      py::dict d;
      d["id"] = w.id();
      d["pid"] = w.pid();
      d["state"] = w.state();
      d["tasks_done"] = w.tasks_done();
      d["tasks_failed"] = w.tasks_failed();
      d["restarts"] = w.restarts();
      d["last_exit"] = w.last_exit();
      d["role"] = w.role();
      workers.append(d);
    }
    py::dict d;
    d["job_id"] = s.job_id();
    d["workers"] = workers;
    d["queued"] = s.queued();
    d["running"] = s.running();
    d["submitted"] = s.submitted();
    d["completed"] = s.completed();
    d["frontend"] = s.frontend();
    d["store_used_bytes"] = s.store().used_bytes();
    d["store_capacity_bytes"] = s.store().capacity_bytes();
    return d;
  }

  // The node is known to have stopped (shoal.Node.stop saw it exit): drops
  // of this client's refs send its store no more requests.
  void NodeStopped() ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    node_stopped_ = true;
    if (std::shared_ptr<StoreHandle> s = store_.lock())
      s->service_gone.store(true);
  }

  void StopNode() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::Status s;
    {
      py::gil_scoped_release release;
      MutexLock lock(&mu_);
      s = client_->StopNode();
    }
    Check(s);
  }

 private:
  static ipc::TaskSpec Spec(std::string function,
                            const std::string& python_path, double timeout_s,
                            int max_retries, int cpus, int gpus) {
    ipc::TaskSpec spec;
    spec.function = std::move(function);
    spec.python_path = python_path;
    spec.timeout_ms =
        timeout_s > 0
            ? std::max<int64_t>(1, static_cast<int64_t>(timeout_s * 1e3))
            : 0;
    spec.max_retries = max_retries;
    spec.resources.cpus = static_cast<uint32_t>(std::max(1, cpus));
    spec.resources.gpus = static_cast<uint32_t>(std::max(0, gpus));
    return spec;
  }

  // Submits `spec`; returns (task id, keep).
  py::tuple SubmitSpec(ipc::TaskSpec spec, py::object keep)
      ABSL_LOCKS_EXCLUDED(mu_) {
    if (pipelined_) {
      // Sent now (not left in a batch: no call may follow it), its result
      // pushed; its id here is the pipeline's handle, tagged.
      absl::StatusOr<coordinator::PendingTask> p;
      {
        py::gil_scoped_release release;
        MutexLock lock(&mu_);
        p = client_->SubmitAsync(std::move(spec));
        if (p.ok()) {
          absl::Status f = client_->Flush();
          if (!f.ok()) p = f;
        }
      }
      return py::make_tuple(Unwrap(p).handle | kPipelinedBit, keep);
    }
    absl::StatusOr<coordinator::TaskRef> ref;
    {
      py::gil_scoped_release release;
      MutexLock lock(&mu_);
      ref = client_->Submit(std::move(spec));
    }
    return py::make_tuple(Unwrap(ref).id, keep);
  }

  // Python ids of a remote client's pipelined tasks: the pipeline's handle
  // with this bit (a node's task ids never have it: generation << 32 | slot).
  static constexpr uint64_t kPipelinedBit = uint64_t{1} << 63;
  static constexpr size_t kRemoteWindow = 16384;

  // Wait for a remote client's pipelined tasks (ids tagged kPipelinedBit):
  // as Wait, in slices so Ctrl-C interrupts it.
  py::list AwaitPipelined(const std::vector<uint64_t>& ids, absl::Time deadline,
                          size_t want) ABSL_LOCKS_EXCLUDED(mu_) {
    std::vector<coordinator::PendingTask> pending;
    pending.reserve(ids.size());
    for (uint64_t id : ids) {
      if ((id & kPipelinedBit) == 0) {
        Check(absl::NotFoundError(absl::StrCat("no such task ", id)));
      }
      pending.push_back({id & ~kPipelinedBit});
    }
    std::vector<ipc::TaskResult> finished;
    while (finished.size() < want) {
      const absl::Duration slice =
          std::max(absl::ZeroDuration(),
                   std::min(deadline - absl::Now(), kSignalCheckInterval));
      absl::StatusOr<std::vector<
          std::pair<coordinator::PendingTask, absl::StatusOr<ipc::TaskResult>>>>
          got;
      {
        py::gil_scoped_release release;
        MutexLock lock(&mu_);
        got = client_->AwaitSome(pending, want - finished.size(), slice);
      }
      if (!got.ok()) {
        {
          py::gil_scoped_release release;
          MutexLock lock(&mu_);
          for (const ipc::TaskResult& r : finished) client_->ReleaseOutputs(r);
        }
        ThrowStatus(got.status());
      }
      std::unordered_set<uint64_t> done;
      for (auto& [task, result] : *got) {
        done.insert(task.handle);
        // A refused submit: its error is the task's (nothing ran).
        ipc::TaskResult r =
            result.ok() ? *std::move(result) : ipc::TaskResult{};
        if (!result.ok()) r.status = result.status();
        r.task_id = task.handle | kPipelinedBit;
        finished.push_back(std::move(r));
      }
      pending.erase(std::remove_if(pending.begin(), pending.end(),
                                   [&](const coordinator::PendingTask& p) {
                                     return done.count(p.handle) > 0;
                                   }),
                    pending.end());
      if (finished.size() >= want || absl::Now() >= deadline) break;
      CheckSignals();
    }
    return ResultsToPython(finished);
  }

  py::list ResultsToPython(std::vector<ipc::TaskResult>& results)
      ABSL_LOCKS_EXCLUDED(mu_) {
    std::shared_ptr<StoreHandle> s = store();
    FetchFn fetch = [this](const ObjectId& id) {
      py::gil_scoped_release release;
      MutexLock lock(&mu_);
      return client_->Fetch(id);
    };
    py::list out;
    for (size_t i = 0; i < results.size(); ++i) {
      ipc::TaskResult& r = results[i];
      py::list outputs;
      try {
        for (Value& v : r.outputs) outputs.append(OutputToPython(v, s, fetch));
      } catch (...) {
        // The rest would never be released otherwise.
        {
          py::gil_scoped_release release;
          MutexLock lock(&mu_);
          for (size_t j = i + 1; j < results.size(); ++j)
            client_->ReleaseOutputs(results[j]);
        }
        throw;
      }
      py::object exception = py::none();
      if (r.exception) {
        exception = py::make_tuple(
            py::bytes(r.exception->type), py::bytes(r.exception->message),
            py::bytes(r.exception->traceback), py::bytes(r.exception->pickled));
      }
      out.append(py::make_tuple(r.task_id, static_cast<int>(r.status.code()),
                                py::bytes(std::string(r.status.message())),
                                outputs, r.attempts, exception));
    }
    return out;
  }

  Mutex mu_;
  // Calls into the client are serialised (it is thread-compatible).
  std::unique_ptr<coordinator::Client> client_ ABSL_PT_GUARDED_BY(mu_);
  bool local_ = false;
  bool owner_ = false;
  bool pipelined_ = false;  // remote, unless SHOAL_PY_REMOTE_PIPELINE=0
  std::string job_id_;
  std::weak_ptr<StoreHandle> store_ ABSL_GUARDED_BY(mu_);
  bool node_stopped_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

void DefineClient(py::module_& m) {
  m.def(
      "_pickle_small_call",
      [](py::handle fn_bytes, py::handle args) -> py::object {
        std::optional<std::string> p =
            python::PickleSmallCall(fn_bytes.ptr(), args.ptr());
        if (!p.has_value()) return py::none();
        return py::bytes(*p);
      },
      "The call envelope's pickle submit_small_call sends, or None (tests).");
  m.def(
      "_unpickle_small_call",
      [](py::bytes pickle) -> py::object {
        const std::string_view v(pickle);
        PyObject* o =
            python::UnpickleSmallCall(absl::string_view(v.data(), v.size()));
        if (o == nullptr) return py::none();
        return py::reinterpret_steal<py::object>(o);
      },
      "What a worker reads from a small call's pickle without the pickle "
      "module, or None when it hands the bytes to pickle.loads (tests).");
  py::class_<ClientHandle, std::shared_ptr<ClientHandle>>(
      m, "Client", "A connection to a shoal node (tasks and its store).")
      .def_static("connect", &ClientHandle::Connect, py::arg("endpoint") = "",
                  py::arg("job_id") = "", py::arg("name") = "",
                  py::arg("force_remote") = false)
      .def_property_readonly("local", &ClientHandle::local)
      .def_property_readonly("owner", &ClientHandle::owner)
      .def_property_readonly("job_id", &ClientHandle::job_id)
      .def("submit", &ClientHandle::Submit, py::arg("function"),
           py::arg("args"), py::arg("python_path"), py::arg("timeout_s"),
           py::arg("max_retries"), py::arg("cpus"), py::arg("gpus"))
      .def("submit_small_call", &ClientHandle::SubmitSmallCall,
           py::arg("function"), py::arg("fn_bytes"), py::arg("args"),
           py::arg("python_path"), py::arg("timeout_s"), py::arg("max_retries"),
           py::arg("cpus"), py::arg("gpus"))
      .def("wait", &ClientHandle::Wait, py::arg("ids"), py::arg("timeout"),
           py::arg("min_done"))
      .def("cancel", &ClientHandle::Cancel)
      .def("release", &ClientHandle::Release)
      .def("status", &ClientHandle::Status)
      .def("stop_node", &ClientHandle::StopNode)
      .def("node_stopped", &ClientHandle::NodeStopped)
      .def_property_readonly("store", &ClientHandle::RequireStore,
                             "The node's store (FailedPrecondition for a "
                             "remote client).");
}

}  // namespace shoal::pyext
