// Zero-copy arrays for Python: a numpy memory handler (numpy >= 1.22,
// PyDataMem_SetHandler) that places large allocations in the node's store
// (ZeroCopyArrays, zero_copy_arrays.h), and the functions the Python layer
// (shoal/_zero_copy.py, shoal/_serialize.py) calls:
//   _zero_copy_enable(store, threshold_bytes)  places allocations of this
//       context (numpy's handler is a context variable) at least that large
//       in `store`; installs the handler and the fork handlers.
//   _zero_copy_disable()  new allocations go to malloc again.
//   _zero_copy_snapshot(buffer)  (ObjectRef of the whole object, offset of
//       the buffer in it) for a buffer inside a store allocation (sealing it
//       at the first call), or None: not one, or written since sealed.
//   _zero_copy_stats()  ZeroCopyArrays::Stats as a dict.
#ifndef SHOAL_PYTHON_EXT_NUMPY_ALLOC_H_
#define SHOAL_PYTHON_EXT_NUMPY_ALLOC_H_

#include <pybind11/pybind11.h>

namespace shoal::pyext {

void DefineZeroCopy(pybind11::module_& m);

}  // namespace shoal::pyext

#endif  // SHOAL_PYTHON_EXT_NUMPY_ALLOC_H_
