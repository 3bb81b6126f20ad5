// shoal._shoal.Communicator: shoal::collectives::Communicator on raw pointers.
// The Python layer (shoal/_collectives.py) turns numpy arrays and torch tensors
// into (pointer, count, dtype) and keeps them alive while a call runs.
#include <pybind11/stl.h>

#include <optional>

#include "absl/strings/str_cat.h"
#include "collectives/communicator.h"
#include "python/ext/job.h"
#include "python/ext/module.h"

namespace shoal::pyext {
namespace {

// One collective call as the Python layer describes it.
struct Call {
  std::string op;  // all_reduce, broadcast, reduce, all_gather, ...
  uintptr_t in = 0;
  uintptr_t out = 0;
  int64_t count = 0;
  DType dtype = DType::kF32;
  collectives::ReduceOp reduce = collectives::ReduceOp::kSum;
  int peer = 0;  // root or send/recv peer
  collectives::CallOptions options;
};

absl::StatusOr<collectives::Work> Issue(collectives::Communicator& c,
                                        const Call& k) {
  const void* in = reinterpret_cast<const void*>(k.in);
  void* out = reinterpret_cast<void*>(k.out);
  const collectives::CallOptions& o = k.options;
  if (k.op == "all_reduce")
    return c.AllReduceAsync(in, out, k.count, k.dtype, k.reduce, o);
  if (k.op == "broadcast")
    return c.BroadcastAsync(in, out, k.count, k.dtype, k.peer, o);
  if (k.op == "reduce")
    return c.ReduceAsync(in, out, k.count, k.dtype, k.reduce, k.peer, o);
  if (k.op == "all_gather")
    return c.AllGatherAsync(in, out, k.count, k.dtype, o);
  if (k.op == "reduce_scatter")
    return c.ReduceScatterAsync(in, out, k.count, k.dtype, k.reduce, o);
  if (k.op == "all_to_all")
    return c.AllToAllAsync(in, out, k.count, k.dtype, o);
  if (k.op == "send") return c.SendAsync(in, k.count, k.dtype, k.peer, o);
  if (k.op == "recv") return c.RecvAsync(out, k.count, k.dtype, k.peer, o);
  return absl::InvalidArgumentError(absl::StrCat("no collective '", k.op, "'"));
}

absl::Status RunBlocking(collectives::Communicator& c, const Call& k) {
  const void* in = reinterpret_cast<const void*>(k.in);
  void* out = reinterpret_cast<void*>(k.out);
  const collectives::CallOptions& o = k.options;
  if (k.op == "all_reduce")
    return c.AllReduce(in, out, k.count, k.dtype, k.reduce, o);
  if (k.op == "broadcast")
    return c.Broadcast(in, out, k.count, k.dtype, k.peer, o);
  if (k.op == "reduce")
    return c.Reduce(in, out, k.count, k.dtype, k.reduce, k.peer, o);
  if (k.op == "all_gather") return c.AllGather(in, out, k.count, k.dtype, o);
  if (k.op == "reduce_scatter")
    return c.ReduceScatter(in, out, k.count, k.dtype, k.reduce, o);
  if (k.op == "all_to_all") return c.AllToAll(in, out, k.count, k.dtype, o);
  if (k.op == "send") return c.Send(in, k.count, k.dtype, k.peer, o);
  if (k.op == "recv") return c.Recv(out, k.count, k.dtype, k.peer, o);
  if (k.op == "barrier") return c.Barrier(o);
  return absl::InvalidArgumentError(absl::StrCat("no collective '", k.op, "'"));
}

Call MakeCall(const std::string& op, uintptr_t in, uintptr_t out, int64_t count,
              const std::string& dtype, const std::string& reduce, int peer,
              py::object timeout, uintptr_t stream) {
  Call k;
  k.op = op;
  k.in = in;
  k.out = out;
  k.count = count;
  k.dtype = Unwrap(ParseDType(dtype));
  k.reduce = Unwrap(collectives::ParseReduceOp(reduce));
  k.peer = peer;
  if (!timeout.is_none()) k.options.timeout = TimeoutFromPython(timeout);
  k.options.stream = reinterpret_cast<void*>(stream);
  return k;
}

// A pending async collective. wait() checks for Ctrl-C between slices; the
// Python Work object keeps the buffers alive until it finished.
class WorkHandle {
 public:
  explicit WorkHandle(collectives::Work w) : work_(std::move(w)) {}

  void Wait(py::object timeout) {
    const absl::Duration t = TimeoutFromPython(timeout);
    const absl::Time deadline = t == absl::InfiniteDuration()
                                    ? absl::InfiniteFuture()
                                    : absl::Now() + t;
    while (true) {
      bool finished;
      {
        py::gil_scoped_release release;
        (void)work_.Wait(
            std::max(absl::ZeroDuration(),
                     std::min(deadline - absl::Now(), kSignalCheckInterval)));
        finished = work_.Test();
      }
      if (finished) {
        Check(work_.Wait(absl::ZeroDuration()));
        return;
      }
      if (absl::Now() >= deadline) {
        Check(absl::DeadlineExceededError(absl::StrCat(
            "the collective did not finish within ", absl::FormatDuration(t))));
      }
      CheckSignals();
    }
  }

  bool Test() {
    py::gil_scoped_release release;
    return work_.Test();
  }

 private:
  collectives::Work work_;
};

class CommHandle {
 public:
  static std::shared_ptr<CommHandle> Create(
      const std::shared_ptr<JobHandle>& job,
      std::optional<std::vector<int>> ranks, const std::string& name,
      py::object timeout) {
    collectives::CommunicatorOptions o;
    o.name = name;
    if (!timeout.is_none()) o.timeout = TimeoutFromPython(timeout);
    // Shared with the helper thread, which outlives this call on Ctrl-C.
    auto c = std::make_shared<
        absl::StatusOr<std::unique_ptr<collectives::Communicator>>>();
    Check(RunInterruptibly([job, ranks, o, c] {
      MutexLock lock(&job->mu());
      *c = ranks.has_value()
               ? collectives::Communicator::CreateGroup(job->locked_job(),
                                                        *ranks, o)
               : collectives::Communicator::Create(job->locked_job(), o);
      return c->status();
    }));
    auto h = std::make_shared<CommHandle>();
    h->job_ = job;
    h->comm_ = std::move(**c);
    return h;
  }

  void Run(const Call& k) {
    absl::Status s;
    {
      py::gil_scoped_release release;
      MutexLock lock(&job_->mu());  // the NCCL backend may use the KV store
      s = RunBlocking(*comm_, k);
    }
    Check(s);
  }

  std::shared_ptr<WorkHandle> RunAsync(const Call& k) {
    absl::StatusOr<collectives::Work> w;
    {
      py::gil_scoped_release release;
      MutexLock lock(&job_->mu());
      w = Issue(*comm_, k);
    }
    return std::make_shared<WorkHandle>(Unwrap(std::move(w)));
  }

  int rank() const { return comm_->rank(); }
  int size() const { return comm_->size(); }

  ~CommHandle() {
    // Finishing queued work can take a while: not under the GIL.
    if (PyGILState_Check()) {
      py::gil_scoped_release release;
      comm_.reset();
    }
  }

 private:
  std::shared_ptr<JobHandle> job_;
  std::unique_ptr<collectives::Communicator> comm_;
};

}  // namespace

void DefineCollectives(py::module_& m) {
  py::class_<WorkHandle, std::shared_ptr<WorkHandle>>(m, "Work")
      .def("wait", &WorkHandle::Wait, py::arg("timeout") = py::none())
      .def("test", &WorkHandle::Test);
  py::class_<CommHandle, std::shared_ptr<CommHandle>>(m, "Communicator")
      .def_static("create", &CommHandle::Create, py::arg("job"),
                  py::arg("ranks") = py::none(), py::arg("name") = "",
                  py::arg("timeout") = py::none())
      .def_property_readonly("rank", &CommHandle::rank)
      .def_property_readonly("size", &CommHandle::size)
      .def(
          "run",
          [](CommHandle& c, const std::string& op, uintptr_t in, uintptr_t out,
             int64_t count, const std::string& dtype, const std::string& reduce,
             int peer, py::object timeout, uintptr_t stream) {
            c.Run(MakeCall(op, in, out, count, dtype, reduce, peer, timeout,
                           stream));
          },
          py::arg("op"), py::arg("in_ptr"), py::arg("out_ptr"),
          py::arg("count"), py::arg("dtype"), py::arg("reduce") = "sum",
          py::arg("peer") = 0, py::arg("timeout") = py::none(),
          py::arg("stream") = 0)
      .def(
          "run_async",
          [](CommHandle& c, const std::string& op, uintptr_t in, uintptr_t out,
             int64_t count, const std::string& dtype, const std::string& reduce,
             int peer, py::object timeout, uintptr_t stream) {
            return c.RunAsync(MakeCall(op, in, out, count, dtype, reduce, peer,
                                       timeout, stream));
          },
          py::arg("op"), py::arg("in_ptr"), py::arg("out_ptr"),
          py::arg("count"), py::arg("dtype"), py::arg("reduce") = "sum",
          py::arg("peer") = 0, py::arg("timeout") = py::none(),
          py::arg("stream") = 0);
}

}  // namespace shoal::pyext
