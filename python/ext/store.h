// ObjectRef: a store object this process holds one reference to, with
// zero-copy views (buffer protocol, numpy, DLPack) of its bytes.
#ifndef SHOAL_PYTHON_EXT_STORE_H_
#define SHOAL_PYTHON_EXT_STORE_H_

#include <pybind11/pybind11.h>

#include <memory>

#include "python/ext/common.h"
#include "shm/store_client.h"

namespace shoal::pyext {

class ObjectRef {
 public:
  // `owner`: the reference came from Put or a task's output, so dropping it
  // also deletes the object (freed once no process holds it any more);
  // otherwise (a Get of someone else's object) it is only released.
  ObjectRef(std::shared_ptr<StoreHandle> store, shm::ObjectBuffer buf,
            bool owner)
      : store_(std::move(store)), buf_(std::move(buf)), owner_(owner) {}
  ~ObjectRef();
  ObjectRef(const ObjectRef&) = delete;
  ObjectRef& operator=(const ObjectRef&) = delete;

  const shm::ObjectBuffer& buffer() const { return buf_; }
  const std::shared_ptr<StoreHandle>& store() const { return store_; }
  bool owner() const { return owner_; }
  // Keeps `p` alive as long as this ref (dropped after the ref's own
  // reference is released): a zero-copy array's object (numpy_alloc.h).
  void AlsoHold(std::shared_ptr<void> p) { also_held_ = std::move(p); }

 private:
  std::shared_ptr<StoreHandle> store_;
  shm::ObjectBuffer buf_;
  bool owner_;
  std::shared_ptr<void> also_held_;
};

// Copies an array-like object (buffer protocol or __dlpack__) into a new
// store object. `dtype` (a DType name, or "") overrides the element type of
// the same size (bf16 tensors arrive as int16 buffers).
// REQUIRES: the GIL is held (released for the copy).
std::shared_ptr<ObjectRef> PutArray(const std::shared_ptr<StoreHandle>& store,
                                    py::handle array,
                                    const std::string& dtype = "");

// Takes a reference to an object by id (waiting up to `timeout` for it).
std::shared_ptr<ObjectRef> GetObject(const std::shared_ptr<StoreHandle>& store,
                                     const ObjectId& id, absl::Duration timeout,
                                     bool owner);

// A read-only numpy array over the object's bytes (bf16 as uint16, raw as
// uint8), whose base is `ref` — it keeps the reference alive.
py::object ArrayOf(py::handle ref);

// The numpy ndarray subclass the Python layer uses for store views
// (shoal.StoreArray); ArrayOf's arrays are viewed as it once it is set.
void SetArrayType(py::object type);
py::object ViewAsArrayType(py::object array);

}  // namespace shoal::pyext

#endif  // SHOAL_PYTHON_EXT_STORE_H_
