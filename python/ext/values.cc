#include "python/ext/values.h"

#include <pybind11/numpy.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "python/ext/store.h"
#include "worker/python_values.h"

namespace shoal::pyext {
namespace {

// The ObjectRef `obj` views in full (a numpy array from get(), or a view of
// one that still covers the whole object), or nullptr.
const ObjectRef* FullViewOf(py::handle obj, const python::ArrayView& view) {
  py::object base = py::reinterpret_borrow<py::object>(obj);
  for (int depth = 0; depth < 4; ++depth) {
    if (!py::hasattr(base, "base")) return nullptr;
    base = base.attr("base");
    if (base.is_none()) return nullptr;
    if (py::isinstance<ObjectRef>(base)) {
      const ObjectRef& r = base.cast<const ObjectRef&>();
      const bool same = view.c_contiguous() && view.data() == r.buffer().data &&
                        view.nbytes() == r.buffer().nbytes &&
                        view.meta().dtype == r.buffer().meta.dtype;
      return same ? &r : nullptr;
    }
  }
  return nullptr;
}

ObjectValue RefValue(const ObjectRef& r) {
  return ObjectValue{r.buffer().id, r.buffer().meta, r.buffer().nbytes};
}

// A read-only numpy copy of an inline tensor (a shoal.StoreArray, so that it
// exports DLPack although it is read-only, like the store-backed results).
py::object ReadOnlyCopy(const TensorValue& t) {
  const int64_t item = static_cast<int64_t>(DTypeSize(t.meta.dtype));
  std::vector<py::ssize_t> shape(t.meta.shape.begin(), t.meta.shape.end());
  std::vector<py::ssize_t> strides;
  for (int64_t e : t.meta.EffectiveStrides()) strides.push_back(e * item);
  py::array a(py::dtype(python::BufferFormat(t.meta.dtype)), shape, strides,
              t.data.data());  // no base: numpy copies
  a.attr("setflags")(py::arg("write") = false);
  if (t.meta.dtype == DType::kRaw) {
    return py::reinterpret_steal<py::object>(PyMemoryView_FromObject(a.ptr()));
  }
  return ViewAsArrayType(a);
}

// Writes the pickle opcodes of small plain values (PickleSmallCall). No
// memo: values are written where they occur, so a container met twice (or
// inside itself) is refused rather than duplicated.
class SmallCallPickler {
 public:
  static constexpr size_t kMaxBytes = 8 << 10;
  static constexpr int kMaxDepth = 16;

  bool Put(PyObject* o, int depth) {
    if (out_.size() > kMaxBytes) return false;
    if (o == Py_None) return Op('N');
    if (o == Py_True) return Op('\x88');   // NEWTRUE
    if (o == Py_False) return Op('\x89');  // NEWFALSE
    PyTypeObject* t = Py_TYPE(o);
    if (t == &PyLong_Type) return PutInt(o);
    if (t == &PyFloat_Type) {
      Op('G');  // BINFLOAT: big-endian IEEE 754
      const double d = PyFloat_AS_DOUBLE(o);
      uint64_t bits;
      std::memcpy(&bits, &d, sizeof(bits));
      for (int i = 7; i >= 0; --i)
        out_.push_back(static_cast<char>(bits >> (8 * i)));
      return true;
    }
    if (t == &PyUnicode_Type) {
      Py_ssize_t n = 0;
      const char* c = PyUnicode_AsUTF8AndSize(o, &n);
      if (c == nullptr) {  // lone surrogates: pickle's own encoding
        PyErr_Clear();
        return false;
      }
      return PutSized(c, n, '\x8c', 'X');  // SHORT_BINUNICODE, BINUNICODE
    }
    if (t == &PyBytes_Type) {
      return PutSized(PyBytes_AS_STRING(o), PyBytes_GET_SIZE(o), 'C',
                      'B');  // SHORT_BINBYTES, BINBYTES
    }
    if (depth >= kMaxDepth) return false;
    if (t == &PyTuple_Type) {
      const Py_ssize_t n = PyTuple_GET_SIZE(o);
      if (n == 0) return Op(')');  // EMPTY_TUPLE
      if (n > 3) Op('(');          // MARK
      for (Py_ssize_t i = 0; i < n; ++i) {
        if (!Put(PyTuple_GET_ITEM(o, i), depth + 1)) return false;
      }
      return Op(n > 3 ? 't' : static_cast<char>(0x84 + n));  // TUPLE, TUPLEn
    }
    if (t == &PyList_Type) {
      if (!FirstSight(o)) return false;
      Op(']');  // EMPTY_LIST
      const Py_ssize_t n = PyList_GET_SIZE(o);
      if (n == 0) return true;
      Op('(');
      for (Py_ssize_t i = 0; i < n; ++i) {
        if (!Put(PyList_GET_ITEM(o, i), depth + 1)) return false;
      }
      return Op('e');  // APPENDS
    }
    if (t == &PyDict_Type) {
      if (!FirstSight(o)) return false;
      Op('}');  // EMPTY_DICT
      if (PyDict_GET_SIZE(o) == 0) return true;
      Op('(');
      Py_ssize_t pos = 0;
      PyObject *k, *v;
      while (PyDict_Next(o, &pos, &k, &v)) {
        if (!Put(k, depth + 1) || !Put(v, depth + 1)) return false;
      }
      return Op('u');  // SETITEMS
    }
    return false;
  }

  bool Op(char c) {
    out_.push_back(c);
    return true;
  }
  std::string& out() { return out_; }

 private:
  bool PutInt(PyObject* o) {
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow != 0) return false;
    if (v >= 0 && v < 0x100) {
      Op('K');  // BININT1
      return Le(static_cast<uint64_t>(v), 1);
    }
    if (v >= 0 && v < 0x10000) {
      Op('M');  // BININT2
      return Le(static_cast<uint64_t>(v), 2);
    }
    if (v >= INT32_MIN && v <= INT32_MAX) {
      Op('J');  // BININT: signed, 4 bytes
      return Le(static_cast<uint64_t>(static_cast<uint32_t>(v)), 4);
    }
    Op('\x8a');  // LONG1: n bytes of two's complement, little-endian
    out_.push_back(8);
    return Le(static_cast<uint64_t>(v), 8);
  }

  bool PutSized(const char* data, Py_ssize_t n, char short_op, char long_op) {
    if (static_cast<size_t>(n) > kMaxBytes) return false;
    if (n < 0x100) {
      Op(short_op);
      Le(static_cast<uint64_t>(n), 1);
    } else {
      Op(long_op);
      Le(static_cast<uint64_t>(n), 4);
    }
    out_.append(data, static_cast<size_t>(n));
    return true;
  }

  bool Le(uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i)
      out_.push_back(static_cast<char>(v >> (8 * i)));
    return true;
  }

  bool FirstSight(PyObject* container) {
    if (std::find(seen_.begin(), seen_.end(), container) != seen_.end())
      return false;
    seen_.push_back(container);
    return true;
  }

  std::string out_;
  std::vector<PyObject*> seen_;  // dicts and lists written so far
};

}  // namespace

std::optional<std::string> PickleSmallCall(py::handle fn_bytes,
                                           py::handle args) {
  if (!PyTuple_CheckExact(args.ptr())) return std::nullopt;
  if (!fn_bytes.is_none() && !PyBytes_CheckExact(fn_bytes.ptr()))
    return std::nullopt;
  SmallCallPickler p;
  p.out().assign("\x80\x05", 2);  // PROTO 5
  if (!p.Put(fn_bytes.ptr(), 0) || !p.Put(args.ptr(), 0)) return std::nullopt;
  p.Op('}');     // the kwargs: an empty dict
  p.Op('\x87');  // TUPLE3
  p.Op('.');     // STOP
  if (p.out().size() > SmallCallPickler::kMaxBytes) return std::nullopt;
  return std::move(p.out());
}

Value ArgToValue(py::handle obj, size_t index,
                 const std::shared_ptr<StoreHandle>& store, py::list& keep) {
  if (py::isinstance<ObjectRef>(obj)) {
    // Kept with the task: a zero-copy array's object may have no other
    // holder (python/shoal/_serialize.py), and a ref dropped after submit
    // must still be there when the worker gets it.
    keep.append(obj);
    return RefValue(obj.cast<const ObjectRef&>());
  }
  absl::StatusOr<std::optional<Value>> scalar =
      python::ScalarFromPython(obj.ptr());
  if (!scalar.ok()) {
    Check(absl::InvalidArgumentError(
        absl::StrCat("argument ", index, ": ", scalar.status().message())));
  }
  if (scalar->has_value()) {
    Value v = **std::move(scalar);
    auto* b = std::get_if<BytesValue>(&v);
    if (b == nullptr || b->data.size() <= kInlineValueLimit || !store) return v;
    // Large bytes: a raw store object (workers see a memoryview).
    py::array_t<uint8_t> arr(static_cast<py::ssize_t>(b->data.size()),
                             reinterpret_cast<const uint8_t*>(b->data.data()));
    std::shared_ptr<ObjectRef> ref = PutArray(store, arr, "raw");
    keep.append(py::cast(ref));
    return RefValue(*ref);
  }
  absl::StatusOr<std::unique_ptr<python::ArrayView>> view =
      python::ArrayView::FromObject(obj.ptr());
  if (!view.ok()) {
    Check(absl::Status(
        view.status().code(),
        absl::StrCat("argument ", index, " (", Py_TYPE(obj.ptr())->tp_name,
                     "): ", view.status().message(),
                     "; task arguments are None, bool, int, float, str, "
                     "bytes, arrays (numpy, torch, ...) and ObjectRefs")));
  }
  const python::ArrayView& v = **view;
  if (const ObjectRef* r = FullViewOf(obj, v)) return RefValue(*r);
  if (v.nbytes() <= kInlineValueLimit || !store) {
    TensorValue t{TensorMeta::Contiguous(v.meta().dtype, v.meta().shape),
                  std::string(v.nbytes(), '\0')};
    v.CopyTo(reinterpret_cast<uint8_t*>(t.data.data()));
    return t;
  }
  view->reset();  // PutArray takes its own view
  std::shared_ptr<ObjectRef> ref = PutArray(store, obj);
  keep.append(py::cast(ref));
  return RefValue(*ref);
}

py::object OutputToPython(Value& v, const std::shared_ptr<StoreHandle>& store,
                          const FetchFn& fetch) {
  if (PyObject* s = python::ScalarToPython(v)) {
    return py::reinterpret_steal<py::object>(s);
  }
  if (auto* t = std::get_if<TensorValue>(&v)) return ReadOnlyCopy(*t);
  auto* o = std::get_if<ObjectValue>(&v);
  if (o == nullptr) return py::none();
  if (!store) return ReadOnlyCopy(Unwrap(fetch(o->id)));
  // The worker handed this process one reference; Get maps the object (a
  // second, local reference) and the extra one is dropped again.
  std::shared_ptr<ObjectRef> ref =
      GetObject(store, o->id, absl::ZeroDuration(), /*owner=*/true);
  (void)store->store->Release(o->id);
  py::object handle = py::cast(ref);
  if (!ref->buffer().meta.device.is_cpu()) return handle;  // DLPack only
  if (ref->buffer().meta.dtype == DType::kRaw) {
    py::object a = ArrayOf(handle);
    return py::reinterpret_steal<py::object>(PyMemoryView_FromObject(a.ptr()));
  }
  return ArrayOf(handle);
}

}  // namespace shoal::pyext
