// shoal._shoal.ActorControl: makes and kills actors (docs/actors.md).
//
// It holds a coordinator::Client of its own, used only for the two actor
// requests; calls to an actor go through the process's ordinary Client like
// any task (python/shoal/_actor.py names them "<function>@actor=<id>").
#include <pybind11/pybind11.h>

#include <memory>
#include <string>

#include "base/mutex.h"
#include "coordinator/client.h"
#include "python/ext/common.h"
#include "python/ext/module.h"

namespace shoal::pyext {
namespace {

class ActorControl {
 public:
  // `force_remote`: through the node's frontend (the task client's own
  // choice, so that a client off the node's machine makes actors too).
  // Errors (raised): as coordinator::Client::Connect.
  static std::shared_ptr<ActorControl> Connect(const std::string& endpoint,
                                               const std::string& job_id,
                                               bool force_remote) {
    coordinator::ClientOptions o;
    o.endpoint = endpoint;
    o.job_id = job_id;
    o.force_remote = force_remote;
    o.name = "actor control";
    absl::StatusOr<std::unique_ptr<coordinator::Client>> c;
    {
      py::gil_scoped_release release;
      c = coordinator::Client::Connect(o);
    }
    auto h = std::make_shared<ActorControl>();
    h->client_ = Unwrap(std::move(c));
    return h;
  }

  // Returns (actor id, worker id). Errors (raised): as
  // coordinator::Client::CreateActor.
  py::tuple Create(const std::string& init_function, py::bytes init,
                   const std::string& python_path, uint32_t cpus, uint32_t gpus,
                   uint32_t max_restarts, bool detached,
                   const std::string& name) ABSL_LOCKS_EXCLUDED(mu_) {
    ipc::ActorCreateRequest r;
    r.set_init_function(init_function);
    r.set_init(std::string(init));
    r.set_python_path(python_path);
    r.set_cpus(cpus);
    r.set_gpus(gpus);
    r.set_max_restarts(max_restarts);
    r.set_detached(detached);
    r.set_name(name);
    absl::StatusOr<ipc::ActorCreateReply> reply;
    {
      py::gil_scoped_release release;
      MutexLock lock(&mu_);
      reply = client_->CreateActor(std::move(r));
    }
    ipc::ActorCreateReply got = Unwrap(std::move(reply));
    return py::make_tuple(got.actor_id(), got.worker_id());
  }

  // Errors (raised): NotFound.
  void Kill(uint32_t actor_id) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::Status s;
    {
      py::gil_scoped_release release;
      MutexLock lock(&mu_);
      s = client_->KillActor(actor_id);
    }
    Check(s);
  }

 private:
  Mutex mu_;
  std::unique_ptr<coordinator::Client> client_ ABSL_PT_GUARDED_BY(mu_);
};

}  // namespace

void DefineActors(py::module_& m) {
  py::class_<ActorControl, std::shared_ptr<ActorControl>>(
      m, "ActorControl", "Makes and kills actors on a node.")
      .def_static("connect", &ActorControl::Connect, py::arg("endpoint") = "",
                  py::arg("job_id") = "", py::arg("force_remote") = false)
      .def("create", &ActorControl::Create, py::arg("init_function"),
           py::arg("init"), py::arg("python_path"), py::arg("cpus"),
           py::arg("gpus"), py::arg("max_restarts"), py::arg("detached"),
           py::arg("name"))
      .def("kill", &ActorControl::Kill, py::arg("actor_id"));
}

}  // namespace shoal::pyext
