#include "python/ext/job.h"

#include <pybind11/stl.h>

#include "python/ext/module.h"
#include "python/ext/store.h"

namespace shoal::pyext {
namespace {

using KvFn = std::function<absl::Status(launch::KvClient&)>;

// Runs a key-value call that can wait for long: on a helper thread, so Ctrl-C
// interrupts the wait (the call itself ends at its own timeout).
absl::Status RunKvWait(const std::shared_ptr<JobHandle>& h, KvFn fn) {
  return RunInterruptibly([h, fn = std::move(fn)] {
    MutexLock lock(&h->mu());
    return fn(h->locked_job().kv());
  });
}

// A quick key-value call, inline with the GIL released.
absl::Status RunKv(JobHandle& h, const KvFn& fn) {
  py::gil_scoped_release release;
  MutexLock lock(&h.mu());
  return fn(h.locked_job().kv());
}

}  // namespace

std::shared_ptr<JobHandle> JobHandle::Init() {
  absl::StatusOr<std::unique_ptr<launch::Job>> job;
  {
    py::gil_scoped_release release;
    job = shoal::launch::Init();
  }
  auto h = std::make_shared<JobHandle>();
  h->job_ = Unwrap(std::move(job));
  return h;
}

std::shared_ptr<StoreHandle> JobHandle::store() {
  MutexLock lock(&store_mu_);
  std::shared_ptr<StoreHandle> s = store_.lock();
  if (!s) {
    s = std::make_shared<StoreHandle>(shared_from_this(), &job_->store());
    store_ = s;
  }
  return s;
}

namespace {

using JobClass = py::class_<JobHandle, std::shared_ptr<JobHandle>>;

// The key-value store's verbs, as Job methods (kv_set, kv_get, ...).
void AddKeyValue(JobClass& cls) {
  using H = JobHandle;
  using HP = std::shared_ptr<JobHandle>;
  cls.def("kv_set",
          [](H& h, const std::string& key, const std::string& value) {
            Check(RunKv(
                h, [&](launch::KvClient& kv) { return kv.Set(key, value); }));
          })
      .def(
          "kv_get",
          [](const HP& h, const std::string& key, py::object timeout) {
            const absl::Duration wait = TimeoutFromPython(timeout);
            auto value = std::make_shared<std::string>();
            KvFn fn = [key, wait, value](launch::KvClient& kv) {
              absl::StatusOr<std::string> v = kv.Get(key, wait);
              if (v.ok()) *value = *std::move(v);
              return v.status();
            };
            Check(wait == absl::ZeroDuration() ? RunKv(*h, fn)
                                               : RunKvWait(h, fn));
            return py::bytes(*value);
          },
          py::arg("key"), py::arg("timeout") = 0.0)
      .def("kv_add",
           [](H& h, const std::string& key, int64_t delta) {
             int64_t sum = 0;
             Check(RunKv(h, [&](launch::KvClient& kv) {
               absl::StatusOr<int64_t> v = kv.Add(key, delta);
               if (v.ok()) sum = *v;
               return v.status();
             }));
             return sum;
           })
      .def("kv_compare_and_set",
           [](H& h, const std::string& key, std::optional<std::string> expected,
              const std::string& desired) {
             bool swapped = false;
             Check(RunKv(h, [&](launch::KvClient& kv) {
               absl::StatusOr<bool> v =
                   expected.has_value()
                       ? kv.CompareAndSet(key, *expected, desired)
                       : kv.SetIfAbsent(key, desired);
               if (v.ok()) swapped = *v;
               return v.status();
             }));
             return swapped;
           })
      .def("kv_delete",
           [](H& h, const std::string& key) {
             bool existed = false;
             Check(RunKv(h, [&](launch::KvClient& kv) {
               absl::StatusOr<bool> v = kv.Delete(key);
               if (v.ok()) existed = *v;
               return v.status();
             }));
             return existed;
           })
      .def("kv_list",
           [](H& h, const std::string& prefix) {
             std::vector<std::pair<std::string, std::string>> entries;
             Check(RunKv(h, [&](launch::KvClient& kv) {
               auto v = kv.List(prefix);
               if (v.ok()) entries = *std::move(v);
               return v.status();
             }));
             py::list out;
             for (auto& [k, v] : entries)
               out.append(py::make_tuple(k, py::bytes(v)));
             return out;
           })
      .def("kv_wait",
           [](const HP& h, std::vector<std::string> keys, py::object timeout) {
             const absl::Duration t = TimeoutFromPython(timeout);
             Check(RunKvWait(h, [keys, t](launch::KvClient& kv) {
               return kv.Wait(keys, t);
             }));
           });
}

// barrier, and the job's store (put/get: the Store class, store.cc).
void AddBarrierAndStore(JobClass& cls) {
  using H = JobHandle;
  using HP = std::shared_ptr<JobHandle>;
  cls.def("barrier",
          [](const HP& h, py::object timeout) {
            const absl::Duration t = TimeoutFromPython(timeout);
            Check(RunInterruptibly([h, t] {
              MutexLock lock(&h->mu());
              return h->locked_job().Barrier(t);
            }));
          })
      .def_property_readonly("store", &H::store,
                             "The node's store, for put/get.");
}

}  // namespace

void DefineJob(py::module_& m) {
  using H = JobHandle;
  JobClass cls(m, "Job", "This process's place in a launched job.");
  cls.def_static("init", &H::Init)
      .def_property_readonly("rank", [](H& h) { return h.job().rank(); })
      .def_property_readonly("world_size",
                             [](H& h) { return h.job().world_size(); })
      .def_property_readonly("local_rank",
                             [](H& h) { return h.job().local_rank(); })
      .def_property_readonly("local_world_size",
                             [](H& h) { return h.job().local_world_size(); })
      .def_property_readonly("node_rank",
                             [](H& h) { return h.job().node_rank(); })
      .def_property_readonly("nnodes", [](H& h) { return h.job().nnodes(); })
      .def_property_readonly("restart_count",
                             [](H& h) { return h.job().restart_count(); })
      .def_property_readonly("job_id", [](H& h) { return h.job().job_id(); });
  AddKeyValue(cls);
  AddBarrierAndStore(cls);
}

}  // namespace shoal::pyext
