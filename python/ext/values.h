// Task arguments from Python and task outputs to Python (client side).
// REQUIRES: the GIL is held.
#ifndef SHOAL_PYTHON_EXT_VALUES_H_
#define SHOAL_PYTHON_EXT_VALUES_H_

#include <pybind11/pybind11.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "ipc/value.h"
#include "python/ext/common.h"

namespace shoal::pyext {

// Argument `index` as a Value: scalars, str and bytes as such; an ObjectRef
// (or a full numpy view of one) by reference; other array-likes inline up to
// 64 KiB, and larger ones put into the store through `store` (one copy; the
// new ObjectRef is appended to `keep`, which must outlive the task). Without
// a store (a remote client) large arrays travel inline.
Value ArgToValue(py::handle obj, size_t index,
                 const std::shared_ptr<StoreHandle>& store, py::list& keep);

// Copies a remote store object (for clients without the store).
using FetchFn = std::function<absl::StatusOr<TensorValue>(const ObjectId&)>;

// An output as Python: scalars as such; tensors as read-only numpy arrays
// (shoal.StoreArray views of store objects, owning them: the object is
// deleted when the last view goes); raw byte objects as read-only
// memoryviews. `store` null: objects are fetched (copied) with `fetch`.
py::object OutputToPython(Value& v, const std::shared_ptr<StoreHandle>& store,
                          const FetchFn& fetch);

}  // namespace shoal::pyext

#endif  // SHOAL_PYTHON_EXT_VALUES_H_
