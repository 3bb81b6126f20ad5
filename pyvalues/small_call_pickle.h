// The call envelope of a small Python task call as a pickle, written and read
// without the pickle module: protocol 5 of (fn_bytes, args, {}) — what
// python/shoal/_serialize.py's dump_call makes for such a call — restricted
// to the opcodes below. The client extension writes it (submit_small_call),
// the worker reads it back; both halves of the format live here. A reader
// that meets anything else returns nullptr, and the worker then hands the
// bytes to pickle.loads, which reads every pickle (so the format may grow on
// the writer's side first).
#ifndef SHOAL_PYVALUES_SMALL_CALL_PICKLE_H_
#define SHOAL_PYVALUES_SMALL_CALL_PICKLE_H_

#include <Python.h>

#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace shoal::python {

// The call envelope's pickle when every value in `args` (a tuple) is None, a
// bool, an int of 64 bits, a float, str or bytes, or an exact dict, list or
// tuple of those (each dict and list met once, nested at most 16 deep), and
// the whole stays within 8 KiB. pickle.loads reads it back as equal values of
// the same types. nullopt otherwise: the Python pickler decides (subclasses,
// shared or recursive containers, arrays, ...). `fn_bytes`: None or bytes (a
// function carried by value). Leaves no Python error pending.
// REQUIRES: the GIL is held.
std::optional<std::string> PickleSmallCall(PyObject* fn_bytes, PyObject* args);

// The object a pickle of PickleSmallCall's opcodes holds (a new reference):
// for its output, the (fn_bytes, args, {}) tuple. nullptr, with no Python
// error pending, for bytes that are not such a pickle (other opcodes,
// truncated, trailing bytes, an unhashable dict key): read those with
// pickle.loads. REQUIRES: the GIL is held.
PyObject* UnpickleSmallCall(absl::string_view pickle);

}  // namespace shoal::python

#endif  // SHOAL_PYVALUES_SMALL_CALL_PICKLE_H_
