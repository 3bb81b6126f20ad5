#include "python/ext/numpy_alloc.h"

// numpy's C API, this file only: the handler type and PyDataMem_SetHandler.
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL shoal_zero_copy_numpy_api
#include <numpy/arrayobject.h>
#include <pthread.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "python/ext/common.h"
#include "python/ext/store.h"
#include "python/ext/zero_copy_arrays.h"

namespace shoal::pyext {
namespace {

ZeroCopyArrays& Arrays() {
  static ZeroCopyArrays* arrays = new ZeroCopyArrays();  // never destroyed:
  return *arrays;  // arrays may be freed during interpreter teardown
}

// The handler: no Python calls, any thread, with or without the GIL.
void* ZcMalloc(void*, size_t bytes) {
  void* p = Arrays().Allocate(bytes);
  return p != nullptr ? p : malloc(bytes);
}

void* ZcCalloc(void*, size_t count, size_t size) {
  size_t bytes = 0;
  if (__builtin_mul_overflow(count, size, &bytes)) return nullptr;
  if (void* p = Arrays().Allocate(bytes)) {
    std::memset(p, 0, bytes);  // store memory may hold an old object's bytes
    return p;
  }
  return calloc(count, size);
}

void ZcFree(void*, void* p, size_t) {
  if (p != nullptr && !Arrays().Free(p)) free(p);
}

void* ZcRealloc(void* ctx, void* p, size_t bytes) {
  const size_t old = p == nullptr ? 0 : Arrays().RequestedSize(p);
  if (old == 0) return realloc(p, bytes);
  void* q = ZcMalloc(ctx, bytes);  // a store block: a new block + copy
  if (q == nullptr) return nullptr;
  std::memcpy(q, p, std::min(old, bytes));
  ZcFree(ctx, p, old);
  return q;
}

PyDataMem_Handler g_handler = {
    "shoal_zero_copy",
    1,
    {nullptr, ZcMalloc, ZcCalloc, ZcRealloc, ZcFree},
};

void InstallHandler() {
  static bool api_loaded = false;
  if (!api_loaded) {
    if (_import_array() < 0) throw py::error_already_set();
    api_loaded = true;
    pthread_atfork([] { Arrays().PrepareFork(); },
                   [] { Arrays().ParentAfterFork(); },
                   [] { Arrays().ChildAfterFork(); });
  }
  py::capsule handler(&g_handler, "mem_handler");
  PyObject* old = PyDataMem_SetHandler(handler.ptr());
  if (old == nullptr) throw py::error_already_set();
  Py_DECREF(old);
}

// (address, length) of a contiguous buffer, or false.
bool AddressOf(py::handle obj, const void** data, size_t* bytes) {
  Py_buffer view;
  if (PyObject_GetBuffer(obj.ptr(), &view, PyBUF_C_CONTIGUOUS) != 0) {
    PyErr_Clear();
    return false;
  }
  *data = view.buf;
  *bytes = static_cast<size_t>(view.len);
  PyBuffer_Release(&view);
  return true;
}

void Enable(const std::shared_ptr<StoreHandle>& store, uint64_t threshold) {
  auto s = std::make_shared<ArrayStore>();
  s->keep = store;
  s->client = store->store;
  s->service_gone = &store->service_gone;
  s->quiet = &InterpreterExiting;  // exiting never waits on a stopped node
  InstallHandler();
  Arrays().SetStore(std::move(s), threshold);
}

py::object Snapshot(py::handle buffer) {
  const void* data = nullptr;
  size_t bytes = 0;
  if (!AddressOf(buffer, &data, &bytes)) return py::none();
  std::optional<ZeroCopyArrays::Snapshot> snap =
      Unwrap(Arrays().SnapshotOf(data, bytes));
  if (!snap) return py::none();
  auto handle =
      std::static_pointer_cast<StoreHandle>(snap->object->store()->keep);
  // The task's own reference (local, no round trip), dropped with the ref;
  // the object's creator reference goes when the allocation and every ref
  // let go of it.
  absl::StatusOr<shm::ObjectBuffer> got;
  {
    py::gil_scoped_release release;
    got = handle->store->Get(snap->buffer.id);
  }
  auto ref = std::make_shared<ObjectRef>(handle, Unwrap(std::move(got)),
                                         /*owner=*/false);
  ref->AlsoHold(snap->object);
  return py::make_tuple(py::cast(ref), snap->offset);
}

py::dict StatsDict() {
  const ZeroCopyArrays::Stats s = Arrays().stats();
  py::dict d;
  d["live"] = s.live;
  d["live_bytes"] = s.live_bytes;
  d["sealed"] = s.sealed;
  d["placed"] = s.placed;
  d["refused"] = s.refused;
  d["reused"] = s.reused;
  d["written"] = s.written;
  d["spares"] = s.spares;
  d["spares_reused"] = s.spares_reused;
  return d;
}

}  // namespace

void DefineZeroCopy(py::module_& m) {
  m.def("_zero_copy_enable", &Enable, py::arg("store"),
        py::arg("threshold_bytes"));
  m.def("_zero_copy_disable", [] { Arrays().SetStore(nullptr, 0); });
  m.def("_zero_copy_snapshot", &Snapshot, py::arg("buffer"));
  m.def(
      "_zero_copy_contains",
      [](py::handle buffer) {
        const void* data = nullptr;
        size_t bytes = 0;
        return AddressOf(buffer, &data, &bytes) &&
               Arrays().Contains(data, bytes);
      },
      py::arg("buffer"));
  m.def("_zero_copy_stats", &StatsDict);
}

}  // namespace shoal::pyext
