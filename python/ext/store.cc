#include "python/ext/store.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <array>

#include "absl/strings/str_cat.h"
#include "pyvalues/python_values.h"

namespace shoal::pyext {
namespace {

py::object* g_array_type = nullptr;  // shoal.StoreArray; never destroyed

// numpy's dtype for each DType (bf16 as uint16, raw as uint8), made once.
const py::dtype& NumpyDType(DType d) {
  static std::array<py::dtype*, kNumDTypes> cache{};
  py::dtype*& slot = cache[static_cast<int>(d)];
  if (slot == nullptr) slot = new py::dtype(python::BufferFormat(d));
  return *slot;
}

std::vector<py::ssize_t> ByteStrides(const TensorMeta& meta) {
  const int64_t item = static_cast<int64_t>(DTypeSize(meta.dtype));
  std::vector<py::ssize_t> s;
  for (int64_t e : meta.EffectiveStrides()) s.push_back(e * item);
  return s;
}

// Gets `id`, waiting up to `timeout` in slices so Ctrl-C interrupts it.
absl::StatusOr<shm::ObjectBuffer> GetInterruptibly(shm::StoreClient* store,
                                                   const ObjectId& id,
                                                   absl::Duration timeout) {
  const absl::Time deadline = timeout == absl::InfiniteDuration()
                                  ? absl::InfiniteFuture()
                                  : absl::Now() + timeout;
  while (true) {
    const absl::Duration left = deadline - absl::Now();
    const absl::Duration slice =
        timeout == absl::ZeroDuration()
            ? absl::ZeroDuration()
            : std::max(absl::ZeroDuration(),
                       std::min(left, kSignalCheckInterval));
    absl::StatusOr<shm::ObjectBuffer> buf;
    {
      py::gil_scoped_release release;
      buf = store->Get(id, slice);
    }
    if (buf.ok() || !absl::IsDeadlineExceeded(buf.status()) ||
        absl::Now() >= deadline) {
      return buf;
    }
    CheckSignals();
  }
}

py::tuple DlpackDevice(const ObjectRef& r) {
  const Device& d = r.buffer().meta.device;
  // kDLCPU = 1, kDLCUDA = 2.
  return d.is_cpu() ? py::make_tuple(1, 0) : py::make_tuple(2, d.index);
}

// __dlpack__(stream=...)'s stream for a CUDA object, as the DLPack protocol
// numbers it: None or 1 the legacy default stream, 2 the per-thread default
// stream, -1 "do not synchronise", any other value a cudaStream_t. 0 is
// ambiguous there and refused. Sets *sync to false for -1.
void* ConsumerStream(const py::object& stream, bool* sync) {
  *sync = true;
  if (stream.is_none()) return nullptr;
  const intptr_t s = stream.cast<intptr_t>();
  if (s == 0) {
    throw py::value_error(
        "__dlpack__: stream=0 is ambiguous for CUDA (DLPack): pass 1 for the "
        "legacy default stream, 2 for the per-thread one, or a stream handle");
  }
  if (s == -1) *sync = false;
  return s == 1 || s == -1 ? nullptr : reinterpret_cast<void*>(s);
}

// What a DLPack capsule of a CUDA object keeps alive: the ObjectRef, and one
// more reference taken with the consumer's stream, released when the
// consumer drops the tensor (the store then frees the memory only once the
// work queued on that stream by then has finished).
struct StreamHold {
  std::shared_ptr<ObjectRef> ref;
  bool extra = false;  // the reference taken with the consumer's stream
};

void DropStreamHold(void* p) {
  std::unique_ptr<StreamHold> hold(static_cast<StreamHold*>(p));
  if (!hold->extra) return;
  shm::StoreClient* s = hold->ref->store()->store;
  const ObjectId id = hold->ref->buffer().id;
  if (PyGILState_Check()) {
    py::gil_scoped_release release;
    (void)s->Release(id);
  } else {
    (void)s->Release(id);
  }
}

// A CPU object's capsule keeps the ObjectRef alive. A CUDA object's also
// makes the consumer's stream wait for the producer's writes (a Get with
// that stream: the store's event) and holds the memory until the work the
// consumer queues there is done.
py::object DlpackOf(py::handle self, py::object stream) {
  auto ref = self.cast<std::shared_ptr<ObjectRef>>();
  const shm::ObjectBuffer& b = ref->buffer();
  bool sync = true;
  void* cuda_stream = nullptr;
  if (!b.meta.device.is_cpu()) cuda_stream = ConsumerStream(stream, &sync);
  if (b.meta.device.is_cpu() || !sync) {
    return py::reinterpret_steal<py::object>(
        Unwrap(python::NewDlpackCapsule(self.ptr(), b.data, b.meta)));
  }
  auto hold = std::make_unique<StreamHold>();
  hold->ref = ref;
  absl::StatusOr<shm::ObjectBuffer> again;
  {
    py::gil_scoped_release release;
    again = ref->store()->store->Get(b.id, absl::ZeroDuration(), cuda_stream);
  }
  // NotFound: deleted since this process took its reference, so no new one
  // can be taken; that reference's Get already made the legacy default
  // stream wait for the producer's writes.
  if (!again.ok() && !absl::IsNotFound(again.status())) {
    ThrowStatus(again.status());
  }
  hold->extra = again.ok();
  py::capsule owner(hold.release(), &DropStreamHold);
  return py::reinterpret_steal<py::object>(
      Unwrap(python::NewDlpackCapsule(owner.ptr(), b.data, b.meta)));
}

py::buffer_info BufferOf(const ObjectRef& r) {
  const shm::ObjectBuffer& b = r.buffer();
  if (!b.meta.device.is_cpu()) {
    throw py::buffer_error(absl::StrCat(
        "object ", b.id.ToHex(), " lives on ", b.meta.device.ToString(),
        ": use __dlpack__ (torch.from_dlpack)"));
  }
  std::vector<py::ssize_t> shape(b.meta.shape.begin(), b.meta.shape.end());
  return py::buffer_info(const_cast<uint8_t*>(b.data),
                         static_cast<py::ssize_t>(DTypeSize(b.meta.dtype)),
                         python::BufferFormat(b.meta.dtype),
                         static_cast<py::ssize_t>(shape.size()), shape,
                         ByteStrides(b.meta), /*readonly=*/true);
}

std::string Describe(const ObjectRef& r) {
  return absl::StrCat("ObjectRef(", r.buffer().id.ToHex(), ", ",
                      r.buffer().meta.ToString(), ", ", r.buffer().nbytes,
                      " bytes)");
}

}  // namespace

ObjectRef::~ObjectRef() {
  shm::StoreClient* s = store_->store;
  const ObjectId id = buf_.id;
  // Releasing and deleting are local (the table in shared memory; the last
  // reference's deletion sends the service a message). Deleting is skipped
  // when the service is known gone, and
  // at interpreter exit (the service releases an exited process's
  // references, and evicts what is left unreferenced when it needs the
  // room), so that exiting never waits on a node that already stopped.
  const bool remove = owner_ &&
                      !store_->service_gone.load(std::memory_order_relaxed) &&
                      !InterpreterExiting();
  auto drop = [&] {
    // Not Release + Delete: a loop that drops one batch per step would wait
    // on the service's reply each time.
    if (remove) {
      if (absl::IsUnavailable(s->ReleaseAndDelete(id))) {
        store_->service_gone.store(true, std::memory_order_relaxed);
      }
    } else {
      (void)s->Release(id);
    }
  };
  if (PyGILState_Check()) {
    py::gil_scoped_release release;
    drop();
  } else {
    drop();
  }
}

std::shared_ptr<ObjectRef> PutArray(const std::shared_ptr<StoreHandle>& store,
                                    py::handle array,
                                    const std::string& dtype) {
  std::unique_ptr<python::ArrayView> view =
      Unwrap(python::ArrayView::FromObject(array.ptr()));
  TensorMeta meta =
      TensorMeta::Contiguous(view->meta().dtype, view->meta().shape);
  if (!dtype.empty()) {
    const DType d = Unwrap(ParseDType(dtype));
    if (DTypeSize(d) != DTypeSize(meta.dtype)) {
      Check(absl::InvalidArgumentError(
          absl::StrCat("dtype ", dtype,
                       " has another element size than the "
                       "array's ",
                       DTypeName(meta.dtype))));
    }
    meta.dtype = d;
  }
  const ObjectId id = ObjectId::Random();
  absl::StatusOr<shm::MutableObjectBuffer> created;
  absl::Status sealed;
  {
    py::gil_scoped_release release;
    created = store->store->Create(id, meta);
    if (created.ok()) {
      view->CopyTo(created->data);
      sealed = store->store->Seal(id);
      if (!sealed.ok()) (void)store->store->Abort(id);
    }
  }
  Check(created.status());
  Check(sealed);
  shm::ObjectBuffer buf{id, created->data, created->nbytes, meta};
  return std::make_shared<ObjectRef>(store, buf, /*owner=*/true);
}

std::shared_ptr<ObjectRef> GetObject(const std::shared_ptr<StoreHandle>& store,
                                     const ObjectId& id, absl::Duration timeout,
                                     bool owner) {
  shm::ObjectBuffer buf = Unwrap(GetInterruptibly(store->store, id, timeout));
  return std::make_shared<ObjectRef>(store, buf, owner);
}

py::object ArrayOf(py::handle ref) {
  const ObjectRef& r = ref.cast<const ObjectRef&>();
  const shm::ObjectBuffer& b = r.buffer();
  if (!b.meta.device.is_cpu()) {
    Check(absl::FailedPreconditionError(absl::StrCat(
        "object ", b.id.ToHex(), " lives on ", b.meta.device.ToString(),
        ": numpy views need CPU objects (use torch.from_dlpack(ref))")));
  }
  std::vector<py::ssize_t> shape(b.meta.shape.begin(), b.meta.shape.end());
  py::array a(NumpyDType(b.meta.dtype), shape, ByteStrides(b.meta), b.data,
              ref);
  a.attr("setflags")(py::arg("write") = false);
  return ViewAsArrayType(std::move(a));
}

void SetArrayType(py::object type) {
  if (g_array_type == nullptr) g_array_type = new py::object();
  *g_array_type = std::move(type);
}

py::object ViewAsArrayType(py::object array) {
  if (g_array_type == nullptr || g_array_type->is_none()) return array;
  return array.attr("view")(*g_array_type);
}

void DefineStore(py::module_& m) {
  py::class_<ObjectRef, std::shared_ptr<ObjectRef>>(
      m, "ObjectRef", py::buffer_protocol(),
      "A store object this process holds. Views of it (numpy, memoryview, "
      "DLPack) share its memory and keep it alive.")
      .def_buffer(&BufferOf)
      .def_property_readonly(
          "id", [](const ObjectRef& r) { return r.buffer().id.ToHex(); })
      .def_property_readonly(
          "dtype",
          [](const ObjectRef& r) {
            return std::string(DTypeName(r.buffer().meta.dtype));
          })
      .def_property_readonly("shape",
                             [](const ObjectRef& r) {
                               py::tuple t(r.buffer().meta.shape.size());
                               for (size_t i = 0; i < t.size(); ++i)
                                 t[i] = r.buffer().meta.shape[i];
                               return t;
                             })
      .def_property_readonly(
          "nbytes", [](const ObjectRef& r) { return r.buffer().nbytes; })
      .def_property_readonly(
          "device",
          [](const ObjectRef& r) { return r.buffer().meta.device.ToString(); })
      .def_property_readonly(
          "address",
          [](const ObjectRef& r) {
            return reinterpret_cast<uintptr_t>(r.buffer().data);
          })
      .def_property_readonly("owner", &ObjectRef::owner)
      .def("__dlpack__", &DlpackOf, py::arg("stream") = py::none())
      .def("__dlpack_device__", &DlpackDevice)
      .def("__repr__", &Describe)
      .def("__reduce__", [](const ObjectRef& r) {
        // Unpickled in a process on the same node: a borrowed reference.
        return py::make_tuple(
            py::module_::import("shoal._context").attr("_borrow"),
            py::make_tuple(r.buffer().id.ToHex()));
      });

  // The one put/get of the extension: a Client's and a Job's `store` are
  // both this class (python/shoal/_store.py calls it).
  py::class_<StoreHandle, std::shared_ptr<StoreHandle>>(
      m, "Store", "A connection to the node's store (of a client or job).")
      .def("put", &PutArray, py::arg("array"), py::arg("dtype") = "")
      .def(
          "get",
          [](const std::shared_ptr<StoreHandle>& s, const std::string& hex,
             py::object timeout) {
            return GetObject(s, Unwrap(ObjectId::FromHex(hex)),
                             TimeoutFromPython(timeout), /*owner=*/false);
          },
          py::arg("id"), py::arg("timeout") = 0.0)
      .def("segment_base", [](const StoreHandle& s) {
        return reinterpret_cast<uintptr_t>(s.store->segment_base());
      });

  m.def("as_array", &ArrayOf, py::arg("ref"),
        "A read-only numpy view of the object (no copy).");
  m.def("set_array_type", &SetArrayType);
  m.def(
      "dlpack_of_buffer",
      [](py::handle obj) {
        return py::reinterpret_steal<py::object>(
            Unwrap(python::DlpackFromBuffer(obj.ptr())));
      },
      "A DLPack capsule over any buffer (read-only ones included).");
}

}  // namespace shoal::pyext
