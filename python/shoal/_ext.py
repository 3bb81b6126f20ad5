"""Loads the C++ extension — except inside a worker.

A worker process is the `shoal` binary with Python embedded: its own copy of
shoal's C++ runtime is already there, and loading a second one (the
extension) beside it is pointless at best. There `import shoal` gives the
package without the extension: shoal.task works, the client API raises.
"""

import sys

from . import _errors

IN_WORKER = "_shoal_task" in sys.builtin_module_names

if IN_WORKER:
    _shoal = None
else:
    from . import _shoal  # noqa: F401  (the pybind11 extension)


def ext():
    """The extension module, or an error inside a worker."""
    if _shoal is None:
        raise _errors.FailedPreconditionError(
            "shoal's client API (connect, submit, put, get, collectives) is "
            "not available inside a task: a task receives its arguments and "
            "returns its results; see shoal.task for what it may ask")
    return _shoal
