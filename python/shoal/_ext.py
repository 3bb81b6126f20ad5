"""Loads the C++ extension, or finds the worker's built-in copy of it.

A worker process is the `shoal` binary with Python embedded: its own copy of
shoal's C++ runtime is already there, and loading a second one (_shoal.so)
beside it aborts the process (both register proto/shoal.proto in the one
shared libprotobuf). The binary builds the module in instead
(python/ext/builtin.h) and puts it into sys.modules as shoal._shoal before a
task runs, so a task uses the client API as a local client of its node.
"""

import sys

from . import _errors

IN_WORKER = "_shoal_task" in sys.builtin_module_names

if IN_WORKER:
    # The worker binary's built-in copy (python/ext/builtin.h), put into
    # sys.modules before any task ran; None in a binary without it.
    _shoal = sys.modules.get("shoal._shoal")
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
