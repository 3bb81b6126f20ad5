#include "python/ext/values.h"

#include <pybind11/numpy.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "python/ext/store.h"
#include "pyvalues/python_values.h"

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

}  // namespace

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
