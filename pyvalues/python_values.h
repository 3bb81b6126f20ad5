// Conversions between Python objects and shoal's values, shared by the
// worker's embedded interpreter (worker/python_runner.cc) and the client
// extension module (python/ext/): dtypes, scalars, and read-only views of
// array-like objects (the buffer protocol, DLPack).
//
// REQUIRES (every function and method here, unless it says otherwise): the
// calling thread holds the GIL.
#ifndef SHOAL_PYVALUES_PYTHON_VALUES_H_
#define SHOAL_PYVALUES_PYTHON_VALUES_H_

#include <Python.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ipc/value.h"

namespace shoal::python {

// The buffer-protocol format of a dtype's elements ("f", "e", "q", ...).
// bf16 has no format character: its elements are exported as "H" (the raw
// 16 bits); kRaw as "B".
const char* BufferFormat(DType dtype);

// The dtype of buffer-protocol elements of `format` ("<f", "=q", "l", "?",
// ...) and `itemsize`. Errors: InvalidArgument for formats shoal has no dtype
// for (unsigned wider than 8 bits, complex, structs, big-endian).
absl::StatusOr<DType> DTypeFromBufferFormat(absl::string_view format,
                                            int64_t itemsize);

// A borrowed, read-only view of an array-like Python object's elements: an
// object with the buffer protocol (numpy arrays, memoryview, bytes, ...) or
// with __dlpack__ (torch tensors, ...). Holds the exporter alive until
// destroyed. Strides may be negative or non-contiguous; CopyTo gathers.
class ArrayView {
 public:
  // Errors: InvalidArgument (not array-like, or an unsupported dtype),
  // FailedPrecondition (a tensor on a device other than the CPU).
  static absl::StatusOr<std::unique_ptr<ArrayView>> FromObject(PyObject* obj);
  ~ArrayView();
  ArrayView(const ArrayView&) = delete;
  ArrayView& operator=(const ArrayView&) = delete;

  // dtype and shape; strides empty (the view's own are byte_strides()).
  const TensorMeta& meta() const { return meta_; }
  // Bytes of the elements laid out C-contiguously.
  uint64_t nbytes() const { return nbytes_; }
  bool c_contiguous() const { return c_contiguous_; }
  // The first element (for a contiguous view: all of them).
  const uint8_t* data() const { return data_; }
  const std::vector<int64_t>& byte_strides() const { return byte_strides_; }

  // Copies the elements into `dst` (nbytes() bytes) in C order.
  // Thread-safe without the GIL while the view lives.
  void CopyTo(uint8_t* dst) const;

 private:
  ArrayView() = default;
  absl::Status InitFromBuffer(PyObject* obj);
  absl::Status InitFromDlpack(PyObject* obj);
  void Finish();

  TensorMeta meta_;
  const uint8_t* data_ = nullptr;
  uint64_t nbytes_ = 0;
  bool c_contiguous_ = true;
  std::vector<int64_t> byte_strides_;
  bool has_buffer_ = false;
  Py_buffer buffer_{};
  void* dl_managed_ = nullptr;  // DLManagedTensor*, deleted in ~ArrayView
};

// A DLPack capsule ("dltensor") over `data`, described by `meta` (strides
// in elements; empty means C-contiguous; a CUDA device makes a kDLCUDA
// tensor, `data` then being a device pointer). `owner` is kept alive
// (a new reference) until the consumer deletes the tensor, whenever and on
// whatever thread that happens. Errors: InvalidArgument (kRaw is exported
// as uint8; other dtypes map one to one).
absl::StatusOr<PyObject*> NewDlpackCapsule(PyObject* owner, const uint8_t* data,
                                           const TensorMeta& meta);

// A DLPack capsule over any object with the buffer protocol (a read-only
// numpy array included, which numpy itself refuses to export).
absl::StatusOr<PyObject*> DlpackFromBuffer(PyObject* obj);

// Scalars, text and bytes → Value: None, bool, int (64-bit), float, str,
// bytes / bytearray, and numpy scalars (through .item()). nullopt for other
// objects. Errors: InvalidArgument (an int outside int64).
absl::StatusOr<std::optional<Value>> ScalarFromPython(PyObject* obj);

// none, bool, int, float, str, bytes → a new Python object (a new
// reference). nullptr for other kinds of Value.
PyObject* ScalarToPython(const Value& v);

// "builtins.ValueError" → "ValueError"; others "module.QualName".
std::string ExceptionTypeName(PyObject* type);

}  // namespace shoal::python

#endif  // SHOAL_PYVALUES_PYTHON_VALUES_H_
