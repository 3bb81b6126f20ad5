#include "pyvalues/python_values.h"

#include <dlpack/dlpack.h>

#include <cstring>

#include "absl/strings/str_cat.h"

namespace shoal::python {
namespace {

// A new reference to a Python str for `s` (best effort).
std::string Str(PyObject* obj) {
  PyObject* s = PyObject_Str(obj);
  if (s == nullptr) {
    PyErr_Clear();
    return "?";
  }
  Py_ssize_t n = 0;
  const char* c = PyUnicode_AsUTF8AndSize(s, &n);
  std::string out = c != nullptr ? std::string(c, n) : "?";
  if (c == nullptr) PyErr_Clear();
  Py_DECREF(s);
  return out;
}

std::string TypeName(PyObject* obj) { return Py_TYPE(obj)->tp_name; }

absl::StatusOr<DType> DTypeFromDl(DLDataType t) {
  if (t.lanes != 1) {
    return absl::InvalidArgumentError(
        "DLPack tensors with lanes are not supported");
  }
  switch (t.code) {
    case kDLFloat:
      if (t.bits == 16) return DType::kF16;
      if (t.bits == 32) return DType::kF32;
      if (t.bits == 64) return DType::kF64;
      break;
    case kDLBfloat:
      if (t.bits == 16) return DType::kBF16;
      break;
    case kDLInt:
      if (t.bits == 8) return DType::kI8;
      if (t.bits == 16) return DType::kI16;
      if (t.bits == 32) return DType::kI32;
      if (t.bits == 64) return DType::kI64;
      break;
    case kDLUInt:
      if (t.bits == 8) return DType::kU8;
      break;
    case 6:  // kDLBool (DLPack 0.8)
      if (t.bits == 8) return DType::kBool;
      break;
    default:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("no shoal dtype for DLPack type code ", t.code, " with ",
                   t.bits, " bits"));
}

DLDataType DlFromDType(DType d) {
  DLDataType t;
  t.lanes = 1;
  t.bits = static_cast<uint8_t>(8 * DTypeSize(d));
  switch (d) {
    case DType::kF16:
    case DType::kF32:
    case DType::kF64:
      t.code = kDLFloat;
      break;
    case DType::kBF16:
      t.code = kDLBfloat;
      break;
    case DType::kI8:
    case DType::kI16:
    case DType::kI32:
    case DType::kI64:
      t.code = kDLInt;
      break;
    case DType::kBool:
      // DLPack 0.6 (torch 1.13) has no bool code; torch exports and takes
      // bool as 8-bit unsigned.
      t.code = kDLUInt;
      break;
    case DType::kRaw:
    case DType::kU8:
    default:
      t.code = kDLUInt;
      t.bits = 8;
      break;
  }
  return t;
}

// What a capsule made by NewDlpackCapsule owns.
struct ExportContext {
  DLManagedTensor managed;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  PyObject* owner = nullptr;  // a strong reference
  bool has_buffer = false;
  Py_buffer buffer{};
};

void DeleteExport(DLManagedTensor* t) {
  auto* ctx = static_cast<ExportContext*>(t->manager_ctx);
  // The consumer may drop the tensor on any thread, or after the
  // interpreter shut down (then the reference is leaked, never touched).
  if (Py_IsInitialized() && !_Py_IsFinalizing()) {
    PyGILState_STATE g = PyGILState_Ensure();
    if (ctx->has_buffer) PyBuffer_Release(&ctx->buffer);
    Py_XDECREF(ctx->owner);
    PyGILState_Release(g);
  }
  delete ctx;
}

// A capsule nobody consumed deletes its tensor.
void CapsuleDestructor(PyObject* capsule) {
  if (!PyCapsule_IsValid(capsule, "dltensor")) return;  // consumed
  auto* t =
      static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
  if (t != nullptr && t->deleter != nullptr) t->deleter(t);
}

PyObject* WrapExport(ExportContext* ctx, void* data, const TensorMeta& meta) {
  ctx->shape.assign(meta.shape.begin(), meta.shape.end());
  if (ctx->strides.empty()) {
    Dims s = meta.EffectiveStrides();
    ctx->strides.assign(s.begin(), s.end());
  }
  DLTensor& dl = ctx->managed.dl_tensor;
  dl.data = data;
  dl.device = meta.device.is_cpu()
                  ? DLDevice{kDLCPU, 0}
                  : DLDevice{kDLCUDA, static_cast<int32_t>(meta.device.index)};
  dl.ndim = static_cast<int32_t>(ctx->shape.size());
  dl.dtype = DlFromDType(meta.dtype);
  dl.shape = ctx->shape.data();
  dl.strides = ctx->strides.data();
  dl.byte_offset = 0;
  ctx->managed.manager_ctx = ctx;
  ctx->managed.deleter = DeleteExport;
  PyObject* capsule =
      PyCapsule_New(&ctx->managed, "dltensor", CapsuleDestructor);
  if (capsule == nullptr) {
    DeleteExport(&ctx->managed);
    return nullptr;
  }
  return capsule;
}

}  // namespace

const char* BufferFormat(DType dtype) {
  switch (dtype) {
    case DType::kF16:
      return "e";
    case DType::kF32:
      return "f";
    case DType::kF64:
      return "d";
    case DType::kI8:
      return "b";
    case DType::kI16:
      return "h";
    case DType::kI32:
      return "i";
    case DType::kI64:
      return "q";
    case DType::kBool:
      return "?";
    case DType::kBF16:
      return "H";
    case DType::kU8:
    case DType::kRaw:
    default:
      return "B";
  }
}

absl::StatusOr<DType> DTypeFromBufferFormat(absl::string_view format,
                                            int64_t itemsize) {
  absl::string_view f = format;
  if (!f.empty() && (f[0] == '@' || f[0] == '=' || f[0] == '<')) {
    f.remove_prefix(1);
  }
  if (f.size() == 1) {
    switch (f[0]) {
      case 'e':
        return DType::kF16;
      case 'f':
        return DType::kF32;
      case 'd':
        return DType::kF64;
      case '?':
        return DType::kBool;
      case 'B':
      case 'c':
        return DType::kU8;
      case 'b':
      case 'h':
      case 'i':
      case 'l':
      case 'q':
      case 'n':
        if (itemsize == 1) return DType::kI8;
        if (itemsize == 2) return DType::kI16;
        if (itemsize == 4) return DType::kI32;
        if (itemsize == 8) return DType::kI64;
        break;
      default:
        break;
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "no shoal dtype for buffer format '", format, "' (", itemsize,
      "-byte items): use f16, bf16, f32, f64, i8, i16, i32, i64, u8 or bool"));
}

// ---- ArrayView -------------------------------------------------------------

absl::StatusOr<std::unique_ptr<ArrayView>> ArrayView::FromObject(
    PyObject* obj) {
  std::unique_ptr<ArrayView> v(new ArrayView());
  absl::Status s;
  if (PyObject_CheckBuffer(obj)) {
    s = v->InitFromBuffer(obj);
  } else if (PyObject_HasAttrString(obj, "__dlpack__")) {
    s = v->InitFromDlpack(obj);
  } else {
    s = absl::InvalidArgumentError(
        absl::StrCat("a ", TypeName(obj),
                     " is not array-like (it has neither the buffer protocol "
                     "nor __dlpack__)"));
  }
  if (!s.ok()) return s;
  v->Finish();
  return v;
}

ArrayView::~ArrayView() {
  if (has_buffer_) PyBuffer_Release(&buffer_);
  if (dl_managed_ != nullptr) {
    auto* t = static_cast<DLManagedTensor*>(dl_managed_);
    if (t->deleter != nullptr) t->deleter(t);
  }
}

absl::Status ArrayView::InitFromBuffer(PyObject* obj) {
  if (PyObject_GetBuffer(obj, &buffer_, PyBUF_RECORDS_RO) != 0) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    std::string why = value != nullptr ? Str(value) : "unknown error";
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read the buffer of a ", TypeName(obj), ": ", why));
  }
  has_buffer_ = true;
  const char* format = buffer_.format != nullptr ? buffer_.format : "B";
  auto dtype = DTypeFromBufferFormat(format, buffer_.itemsize);
  if (!dtype.ok()) return dtype.status();
  if (static_cast<int64_t>(DTypeSize(*dtype)) != buffer_.itemsize) {
    return absl::InvalidArgumentError(absl::StrCat(
        "buffer format '", format, "' with ", buffer_.itemsize, "-byte items"));
  }
  if (buffer_.ndim > kMaxRank) {
    return absl::InvalidArgumentError(absl::StrCat(
        "arrays of rank ", buffer_.ndim, " exceed the limit of ", kMaxRank));
  }
  meta_.dtype = *dtype;
  for (int i = 0; i < buffer_.ndim; ++i) {
    meta_.shape.push_back(buffer_.shape[i]);
    byte_strides_.push_back(buffer_.strides != nullptr
                                ? buffer_.strides[i]
                                : 0);  // filled by Finish when absent
  }
  if (buffer_.strides == nullptr) byte_strides_.clear();
  data_ = static_cast<const uint8_t*>(buffer_.buf);
  return absl::OkStatus();
}

absl::Status ArrayView::InitFromDlpack(PyObject* obj) {
  PyObject* capsule = PyObject_CallMethod(obj, "__dlpack__", nullptr);
  if (capsule == nullptr) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    std::string why = value != nullptr ? Str(value) : "unknown error";
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    return absl::InvalidArgumentError(
        absl::StrCat(TypeName(obj), ".__dlpack__() failed: ", why));
  }
  auto* t =
      static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
  if (t == nullptr) {
    PyErr_Clear();
    Py_DECREF(capsule);
    return absl::InvalidArgumentError(
        absl::StrCat(TypeName(obj), ".__dlpack__() returned no DLPack tensor"));
  }
  // Ours now: the capsule must not delete it.
  PyCapsule_SetName(capsule, "used_dltensor");
  Py_DECREF(capsule);
  dl_managed_ = t;
  const DLTensor& dl = t->dl_tensor;
  if (dl.device.device_type != kDLCPU && dl.device.device_type != kDLCUDAHost) {
    return absl::FailedPreconditionError(absl::StrCat(
        "a ", TypeName(obj), " on DLPack device type ", dl.device.device_type,
        ": only CPU tensors go through this path (move it to the CPU first)"));
  }
  auto dtype = DTypeFromDl(dl.dtype);
  if (!dtype.ok()) return dtype.status();
  if (dl.ndim > kMaxRank) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensors of rank ", dl.ndim, " exceed the limit of ", kMaxRank));
  }
  meta_.dtype = *dtype;
  const int64_t item = static_cast<int64_t>(DTypeSize(*dtype));
  for (int i = 0; i < dl.ndim; ++i) {
    meta_.shape.push_back(dl.shape[i]);
    if (dl.strides != nullptr) byte_strides_.push_back(dl.strides[i] * item);
  }
  data_ = static_cast<const uint8_t*>(dl.data) + dl.byte_offset;
  return absl::OkStatus();
}

void ArrayView::Finish() {
  const int64_t item = static_cast<int64_t>(DTypeSize(meta_.dtype));
  const size_t rank = meta_.shape.size();
  std::vector<int64_t> c_strides(rank);
  int64_t acc = item;
  for (size_t i = rank; i-- > 0;) {
    c_strides[i] = acc;
    acc *= meta_.shape[i];
  }
  if (byte_strides_.empty()) byte_strides_ = c_strides;
  nbytes_ = static_cast<uint64_t>(meta_.NumElements() * item);
  c_contiguous_ = true;
  for (size_t i = 0; i < rank; ++i) {
    // A dimension of extent 1 may have any stride.
    if (meta_.shape[i] > 1 && byte_strides_[i] != c_strides[i])
      c_contiguous_ = false;
  }
}

void ArrayView::CopyTo(uint8_t* dst) const {
  if (nbytes_ == 0) return;
  if (c_contiguous_) {
    std::memcpy(dst, data_, nbytes_);
    return;
  }
  // Gather: walk the index space with the innermost dimension as a loop.
  const size_t rank = meta_.shape.size();
  const int64_t item = static_cast<int64_t>(DTypeSize(meta_.dtype));
  const int64_t inner = meta_.shape[rank - 1];
  const int64_t inner_stride = byte_strides_[rank - 1];
  std::vector<int64_t> index(rank, 0);
  while (true) {
    const uint8_t* src = data_;
    for (size_t i = 0; i + 1 < rank; ++i) src += index[i] * byte_strides_[i];
    if (inner_stride == item) {
      std::memcpy(dst, src, inner * item);
      dst += inner * item;
    } else {
      for (int64_t j = 0; j < inner; ++j) {
        std::memcpy(dst, src + j * inner_stride, item);
        dst += item;
      }
    }
    size_t d = rank - 1;
    while (d-- > 0) {
      if (++index[d] < meta_.shape[d]) break;
      index[d] = 0;
    }
    if (d == static_cast<size_t>(-1)) return;
  }
}

// ---- DLPack export ---------------------------------------------------------

absl::StatusOr<PyObject*> NewDlpackCapsule(PyObject* owner, const uint8_t* data,
                                           const TensorMeta& meta) {
  auto* ctx = new ExportContext();
  ctx->managed.manager_ctx = ctx;
  Py_INCREF(owner);
  ctx->owner = owner;
  PyObject* capsule = WrapExport(ctx, const_cast<uint8_t*>(data), meta);
  if (capsule == nullptr)
    return absl::InternalError("cannot create a DLPack capsule");
  return capsule;
}

absl::StatusOr<PyObject*> DlpackFromBuffer(PyObject* obj) {
  auto* ctx = new ExportContext();
  ctx->managed.manager_ctx = ctx;
  if (PyObject_GetBuffer(obj, &ctx->buffer, PyBUF_RECORDS_RO) != 0) {
    PyErr_Clear();
    delete ctx;
    return absl::InvalidArgumentError(
        absl::StrCat("a ", TypeName(obj), " has no readable buffer"));
  }
  ctx->has_buffer = true;
  const Py_buffer& b = ctx->buffer;
  auto dtype =
      DTypeFromBufferFormat(b.format != nullptr ? b.format : "B", b.itemsize);
  if (!dtype.ok()) {
    DeleteExport(&ctx->managed);
    return dtype.status();
  }
  TensorMeta meta;
  meta.dtype = *dtype;
  for (int i = 0; i < b.ndim; ++i) {
    meta.shape.push_back(b.shape[i]);
    if (b.strides != nullptr) {
      if (b.strides[i] % b.itemsize != 0) {
        DeleteExport(&ctx->managed);
        return absl::InvalidArgumentError(
            "strides that are not a multiple of the item size");
      }
      ctx->strides.push_back(b.strides[i] / b.itemsize);
    }
  }
  PyObject* capsule = WrapExport(ctx, b.buf, meta);
  if (capsule == nullptr)
    return absl::InternalError("cannot create a DLPack capsule");
  return capsule;
}

// ---- scalars ---------------------------------------------------------------

absl::StatusOr<std::optional<Value>> ScalarFromPython(PyObject* obj) {
  if (obj == Py_None) return std::optional<Value>(Value(std::monostate{}));
  if (PyBool_Check(obj)) return std::optional<Value>(Value(obj == Py_True));
  if (PyLong_Check(obj)) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (overflow != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("the int ", Str(obj), " does not fit in 64 bits"));
    }
    return std::optional<Value>(Value(static_cast<int64_t>(v)));
  }
  if (PyFloat_Check(obj))
    return std::optional<Value>(Value(PyFloat_AS_DOUBLE(obj)));
  if (PyUnicode_Check(obj)) {
    Py_ssize_t n = 0;
    const char* c = PyUnicode_AsUTF8AndSize(obj, &n);
    if (c == nullptr) {
      PyErr_Clear();
      return absl::InvalidArgumentError("a str that is not valid UTF-8");
    }
    return std::optional<Value>(Value(std::string(c, n)));
  }
  if (PyBytes_Check(obj)) {
    return std::optional<Value>(Value(BytesValue{
        std::string(PyBytes_AS_STRING(obj), PyBytes_GET_SIZE(obj))}));
  }
  if (PyByteArray_Check(obj)) {
    return std::optional<Value>(Value(BytesValue{
        std::string(PyByteArray_AS_STRING(obj), PyByteArray_GET_SIZE(obj))}));
  }
  // numpy scalars (np.int64(3), np.float32(1.5), np.bool_(True)) are not
  // Python ints or floats; their .item() is.
  PyObject* numpy_name = PyUnicode_FromString("numpy");
  PyObject* numpy = PyImport_GetModule(numpy_name);  // only if imported
  Py_DECREF(numpy_name);
  if (numpy == nullptr) {
    PyErr_Clear();
    return std::optional<Value>();
  }
  PyObject* generic = PyObject_GetAttrString(numpy, "generic");
  Py_DECREF(numpy);
  if (generic == nullptr) {
    PyErr_Clear();
    return std::optional<Value>();
  }
  const int is_scalar = PyObject_IsInstance(obj, generic);
  Py_DECREF(generic);
  if (is_scalar != 1) {
    PyErr_Clear();
    return std::optional<Value>();
  }
  PyObject* item = PyObject_CallMethod(obj, "item", nullptr);
  if (item == nullptr) {
    PyErr_Clear();
    return std::optional<Value>();
  }
  if (PyObject_TypeCheck(item, Py_TYPE(obj))) {  // would recurse forever
    Py_DECREF(item);
    return std::optional<Value>();
  }
  auto v = ScalarFromPython(item);
  Py_DECREF(item);
  return v;
}

PyObject* ScalarToPython(const Value& v) {
  return std::visit(
      [](const auto& x) -> PyObject* {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::monostate>) {
          Py_RETURN_NONE;
        } else if constexpr (std::is_same_v<T, bool>) {
          return PyBool_FromLong(x ? 1 : 0);
        } else if constexpr (std::is_same_v<T, int64_t>) {
          return PyLong_FromLongLong(x);
        } else if constexpr (std::is_same_v<T, double>) {
          return PyFloat_FromDouble(x);
        } else if constexpr (std::is_same_v<T, std::string>) {
          PyObject* s = PyUnicode_DecodeUTF8(x.data(), x.size(), "replace");
          return s;
        } else if constexpr (std::is_same_v<T, BytesValue>) {
          return PyBytes_FromStringAndSize(x.data.data(), x.data.size());
        } else {
          return nullptr;
        }
      },
      v);
}

std::string ExceptionTypeName(PyObject* type) {
  if (type == nullptr) return "Exception";
  std::string name = "Exception";
  if (PyType_Check(type)) {
    name = reinterpret_cast<PyTypeObject*>(type)->tp_name;
  }
  PyObject* module = PyObject_GetAttrString(type, "__module__");
  PyObject* qual = PyObject_GetAttrString(type, "__qualname__");
  if (module != nullptr && qual != nullptr && PyUnicode_Check(module) &&
      PyUnicode_Check(qual)) {
    const char* m = PyUnicode_AsUTF8(module);
    const char* q = PyUnicode_AsUTF8(qual);
    if (m != nullptr && q != nullptr) {
      name = std::strcmp(m, "builtins") == 0 ? std::string(q)
                                             : absl::StrCat(m, ".", q);
    }
  }
  Py_XDECREF(module);
  Py_XDECREF(qual);
  PyErr_Clear();
  return name;
}

}  // namespace shoal::python
