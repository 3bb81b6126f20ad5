// The parts of the `shoal._shoal` extension module, each defined in its own
// file and added to the module by module.cc.
#ifndef SHOAL_PYTHON_EXT_MODULE_H_
#define SHOAL_PYTHON_EXT_MODULE_H_

#include <pybind11/pybind11.h>

namespace shoal::pyext {

void DefineStore(pybind11::module_& m);        // store.cc: ObjectRef, views
void DefineClient(pybind11::module_& m);       // client.cc: tasks
void DefineJob(pybind11::module_& m);          // job.cc: launch mode, KV
void DefineCollectives(pybind11::module_& m);  // collectives.cc
void DefineActors(pybind11::module_& m);       // actors.cc
void DefineZeroCopy(pybind11::module_& m);     // numpy_alloc.cc
void DefineTimeline(pybind11::module_& m);     // timeline.cc
void WatchInterpreterExit();  // common.cc: an atexit hook (InterpreterExiting)

}  // namespace shoal::pyext

#endif  // SHOAL_PYTHON_EXT_MODULE_H_
