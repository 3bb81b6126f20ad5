// shoal._shoal: the C++ half of the `shoal` Python package (python/shoal/).
// Everything blocking releases the GIL; long waits check for Ctrl-C.
#include "python/ext/module.h"

PYBIND11_MODULE(_shoal, m) {
  m.doc() = "shoal's C++ runtime for Python (use the `shoal` package).";
  shoal::pyext::DefineStore(m);
  shoal::pyext::DefineClient(m);
  shoal::pyext::DefineJob(m);
  shoal::pyext::DefineCollectives(m);
  shoal::pyext::DefineActors(m);
  shoal::pyext::DefineZeroCopy(m);
  shoal::pyext::DefineTimeline(m);
  shoal::pyext::WatchInterpreterExit();
}
