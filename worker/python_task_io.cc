#include "worker/python_task_io.h"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <array>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "pyvalues/python_values.h"

namespace shoal::worker::python_io {
namespace py = pybind11;
namespace {

// Copies above this size run with the GIL released, so a task's other Python
// threads keep going while its output is written.
constexpr uint64_t kReleaseGilCopyBytes = 1 << 20;

// numpy's dtype for each DType, made once per process (and never destroyed:
// the interpreter outlives every use).
const py::dtype& NumpyDType(DType d) {
  static std::array<py::dtype*, kNumDTypes> cache{};
  py::dtype*& slot = cache[static_cast<int>(d)];
  if (slot == nullptr) {
    slot = new py::dtype(std::string(python::BufferFormat(d)));
  }
  return *slot;
}

std::vector<py::ssize_t> ShapeOf(const TensorMeta& meta) {
  return std::vector<py::ssize_t>(meta.shape.begin(), meta.shape.end());
}

std::vector<py::ssize_t> ByteStridesOf(const TensorMeta& meta) {
  const int64_t item = static_cast<int64_t>(DTypeSize(meta.dtype));
  std::vector<py::ssize_t> s;
  for (int64_t e : meta.EffectiveStrides()) s.push_back(e * item);
  return s;
}

void MakeReadOnly(py::array& a) {
  a.attr("setflags")(py::arg("write") = false);
}

// What a store-backed array's base capsule owns.
struct StoreRef {
  shm::StoreClient* store;
  ObjectId id;
};

// A read-only numpy array over a mapped store object; raw byte objects
// become a memoryview of it.
py::object StoreObjectToPython(shm::StoreClient* store,
                               const shm::ObjectBuffer& buf) {
  py::capsule owner(new StoreRef{store, buf.id}, [](void* p) {
    auto* r = static_cast<StoreRef*>(p);
    (void)r->store->Release(r->id);
    delete r;
  });
  py::array a(NumpyDType(buf.meta.dtype), ShapeOf(buf.meta),
              ByteStridesOf(buf.meta), buf.data, owner);
  MakeReadOnly(a);
  if (buf.meta.dtype == DType::kRaw) {
    return py::reinterpret_steal<py::object>(PyMemoryView_FromObject(a.ptr()));
  }
  return a;
}

py::object InlineTensorToPython(const TensorValue& t) {
  // No base: numpy copies the bytes (at most 64 KiB) into its own array.
  py::array a(NumpyDType(t.meta.dtype), ShapeOf(t.meta), ByteStridesOf(t.meta),
              t.data.data());
  MakeReadOnly(a);
  return a;
}

// A scalar output: inline, or (bytes over the inline limit) a store object.
absl::Status AddScalar(Value scalar, TaskContext& ctx) {
  const auto* bytes = std::get_if<BytesValue>(&scalar);
  if (bytes == nullptr || bytes->data.size() <= kInlineValueLimit) {
    ctx.AddOutput(std::move(scalar));
    return absl::OkStatus();
  }
  // A store object: Create waits for the store service, the copy may be
  // long; neither touches Python.
  py::gil_scoped_release release;
  SHOAL_ASSIGN_OR_RETURN(MutableTensorView out,
                         ctx.NewTensorOutput(TensorMeta::Bytes(
                             static_cast<int64_t>(bytes->data.size()))));
  std::memcpy(out.data, bytes->data.data(), bytes->data.size());
  return absl::OkStatus();
}

absl::Status AddOne(PyObject* obj, TaskContext& ctx, size_t index) {
  SHOAL_ASSIGN_OR_RETURN(std::optional<Value> scalar,
                         python::ScalarFromPython(obj));
  if (scalar.has_value()) return AddScalar(*std::move(scalar), ctx);
  absl::StatusOr<std::unique_ptr<python::ArrayView>> view =
      python::ArrayView::FromObject(obj);
  if (!view.ok()) {
    if (absl::IsInvalidArgument(view.status()) && !PyObject_CheckBuffer(obj) &&
        !PyObject_HasAttrString(obj, "__dlpack__")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "return value ", index, " is a ", Py_TYPE(obj)->tp_name,
          ": a task returns None, a bool, int, float, str, bytes, an array "
          "(numpy, torch or anything with the buffer protocol or "
          "__dlpack__), or a tuple of those"));
    }
    return absl::Status(
        view.status().code(),
        absl::StrCat("return value ", index, ": ", view.status().message()));
  }
  const python::ArrayView& v = **view;
  const TensorMeta meta =
      TensorMeta::Contiguous(v.meta().dtype, v.meta().shape);
  if (v.nbytes() <= kInlineValueLimit) {  // inline: no store, a short copy
    SHOAL_ASSIGN_OR_RETURN(MutableTensorView out, ctx.NewTensorOutput(meta));
    v.CopyTo(out.data);
    return absl::OkStatus();
  }
  // A store object: Create is a request to the store service, so the GIL
  // is released while it waits (the view keeps the source alive), and for
  // the copy when it is long.
  absl::StatusOr<MutableTensorView> out;
  {
    py::gil_scoped_release release;
    out = ctx.NewTensorOutput(meta);
    if (out.ok() && v.nbytes() >= kReleaseGilCopyBytes) v.CopyTo(out->data);
  }
  SHOAL_RETURN_IF_ERROR(out.status());
  if (v.nbytes() < kReleaseGilCopyBytes) v.CopyTo(out->data);
  return absl::OkStatus();
}

// Whether `obj` travels as one output Value as it is: None, a scalar, str,
// bytes, or an array shoal has a dtype for. Leaves no error pending.
bool IsPlainOutput(PyObject* obj) {
  absl::StatusOr<std::optional<Value>> scalar = python::ScalarFromPython(obj);
  if (!scalar.ok()) return false;  // an int beyond 64 bits: pickled
  if (scalar->has_value()) return true;
  if (!PyObject_CheckBuffer(obj) && !PyObject_HasAttrString(obj, "__dlpack__"))
    return false;
  absl::StatusOr<std::unique_ptr<python::ArrayView>> view =
      python::ArrayView::FromObject(obj);
  if (PyErr_Occurred()) PyErr_Clear();
  return view.ok();
}

bool IsPlainResult(PyObject* result) {
  if (!PyTuple_Check(result)) return IsPlainOutput(result);
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(result); ++i) {
    if (!IsPlainOutput(PyTuple_GET_ITEM(result, i))) return false;
  }
  return true;
}

// One raw byte output of `shape` (n or 1 × n bytes) holding `bytes`.
absl::Status AddRawOutput(const py::buffer_info& bytes, Dims shape,
                          TaskContext& ctx) {
  const uint64_t n = static_cast<uint64_t>(bytes.size * bytes.itemsize);
  TensorMeta meta = TensorMeta::Contiguous(DType::kRaw, std::move(shape));
  absl::StatusOr<MutableTensorView> out;
  {
    py::gil_scoped_release release;  // Create may wait for the store
    out = ctx.NewTensorOutput(meta);
    if (out.ok() && n >= kReleaseGilCopyBytes)
      std::memcpy(out->data, bytes.ptr, n);
  }
  SHOAL_RETURN_IF_ERROR(out.status());
  if (n < kReleaseGilCopyBytes) std::memcpy(out->data, bytes.ptr, n);
  return absl::OkStatus();
}

// The result envelope (python/shoal/_serialize.py): the pickle stream as a
// raw 1 × n output, then its out-of-band buffers as raw n-byte outputs.
absl::Status AddPickledResult(PyObject* result, TaskContext& ctx) {
  py::object dump;
  try {
    dump = py::module_::import("shoal._serialize").attr("dump_result");
  } catch (py::error_already_set& e) {
    std::string what = e.what();
    return absl::InvalidArgumentError(
        absl::StrCat("the task returned a ", Py_TYPE(result)->tp_name,
                     ", which goes back pickled, by shoal._serialize: ", what));
  }
  py::object dumped;
  try {
    dumped = dump(py::handle(result));
  } catch (py::error_already_set& e) {
    // dump_result's InvalidArgumentError names the type and the reason and
    // carries the pickler's traceback: its text alone (what() would add
    // the class's name, which the client's error repeats, and pybind's
    // "At:" frames).
    std::string what;
    try {
      what = py::str(e.value()).cast<std::string>();
    } catch (py::error_already_set&) {
      PyErr_Clear();
      what = e.what();
    }
    return absl::InvalidArgumentError(what);
  }
  py::tuple pair = dumped.cast<py::tuple>();
  py::buffer header = pair[0].cast<py::buffer>();
  py::buffer_info h = header.request();
  SHOAL_RETURN_IF_ERROR(
      AddRawOutput(h, {1, static_cast<int64_t>(h.size * h.itemsize)}, ctx));
  for (py::handle b : pair[1].cast<py::list>()) {
    py::buffer_info info = py::reinterpret_borrow<py::buffer>(b).request();
    SHOAL_RETURN_IF_ERROR(AddRawOutput(
        info, {static_cast<int64_t>(info.size * info.itemsize)}, ctx));
  }
  return absl::OkStatus();
}

}  // namespace

// ---- StoreArgs -------------------------------------------------------------

absl::StatusOr<StoreArgs> StoreArgs::Map(TaskContext& ctx) {
  StoreArgs out;
  out.store_ = ctx.store();
  out.buffers_.resize(ctx.num_args());
  out.owned_.assign(ctx.num_args(), false);
  for (size_t i = 0; i < ctx.num_args(); ++i) {
    const auto* o = std::get_if<ObjectValue>(&ctx.arg(i));
    if (o == nullptr) continue;
    if (out.store_ == nullptr) {
      return absl::FailedPreconditionError(
          "this worker has no store connection");
    }
    absl::StatusOr<shm::ObjectBuffer> buf =
        out.store_->Get(o->id, absl::Seconds(30));
    if (!buf.ok()) {
      return absl::Status(
          buf.status().code(),
          absl::StrCat("argument ", i, " (object ", o->id.ToHex(),
                       "): ", buf.status().message()));
    }
    out.buffers_[i] = *buf;
    out.owned_[i] = true;
  }
  return out;
}

StoreArgs::~StoreArgs() {
  for (size_t i = 0; i < buffers_.size(); ++i) {
    if (owned_[i]) (void)store_->Release(buffers_[i].id);
  }
}

const shm::ObjectBuffer* StoreArgs::buffer(size_t i) const {
  return i < owned_.size() && owned_[i] ? &buffers_[i] : nullptr;
}

void StoreArgs::Disown(size_t i) { owned_[i] = false; }

// ---- arguments and outputs -------------------------------------------------

absl::StatusOr<PyObject*> ArgsTuple(TaskContext& ctx, StoreArgs& store_args) {
  try {
    py::tuple args(ctx.num_args());
    for (size_t i = 0; i < ctx.num_args(); ++i) {
      const Value& v = ctx.arg(i);
      if (const shm::ObjectBuffer* buf = store_args.buffer(i)) {
        args[i] = StoreObjectToPython(ctx.store(), *buf);
        store_args.Disown(i);  // the array's capsule releases it now
      } else if (const auto* t = std::get_if<TensorValue>(&v)) {
        args[i] = InlineTensorToPython(*t);
      } else if (PyObject* s = python::ScalarToPython(v)) {
        args[i] = py::reinterpret_steal<py::object>(s);
      } else {
        return absl::InvalidArgumentError(absl::StrCat(
            "argument ", i, " (", ValueKindName(v), ") has no Python form"));
      }
    }
    return args.release().ptr();
  } catch (py::error_already_set& e) {
    std::string what = e.what();
    return absl::InternalError(
        absl::StrCat("converting the arguments to Python: ", what));
  }
}

absl::Status AddOutputs(PyObject* result, TaskContext& ctx) {
  if (result == Py_None) return absl::OkStatus();
  try {
    if (!PyTuple_Check(result)) {
      // The commonest value, one scalar, converted once (not also by
      // IsPlainResult).
      absl::StatusOr<std::optional<Value>> scalar =
          python::ScalarFromPython(result);
      if (scalar.ok() && scalar->has_value())
        return AddScalar(**std::move(scalar), ctx);
    }
    if (!IsPlainResult(result)) return AddPickledResult(result, ctx);
    if (PyTuple_Check(result)) {
      for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(result); ++i) {
        SHOAL_RETURN_IF_ERROR(
            AddOne(PyTuple_GET_ITEM(result, i), ctx, static_cast<size_t>(i)));
      }
      return absl::OkStatus();
    }
    return AddOne(result, ctx, 0);
  } catch (py::error_already_set& e) {
    std::string what = e.what();
    return absl::InternalError(
        absl::StrCat("converting the return value: ", what));
  }
}

}  // namespace shoal::worker::python_io
