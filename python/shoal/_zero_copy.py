"""Zero-copy arrays (docs/values.md "Zero-copy arrays").

A local client installs, at connect, a numpy memory handler (the extension's
_zero_copy_enable; numpy >= 1.22) that places every array allocation of at
least SHOAL_ZERO_COPY_MIN_BYTES (default 1 MiB) made in this thread's context
in the node's store. When such an array is a task's argument, _serialize
passes it by reference: `snapshot` seals its object and makes this process's
pages of it copy-on-write, so the worker reads the very same memory, and
later writes of the array here are private to this process.

SHOAL_ZERO_COPY_ARRAYS=0 turns it off. Not inside workers (their results go
out as before), not for remote clients (no store).
"""

import contextlib
import os
import sys

from . import _ext

ENV_SWITCH = "SHOAL_ZERO_COPY_ARRAYS"
ENV_MIN_BYTES = "SHOAL_ZERO_COPY_MIN_BYTES"
DEFAULT_MIN_BYTES = 1 << 20

# True once a handler placed (or may place) arrays in a store: only then is
# a buffer looked up (a cheap dict-free call otherwise skipped).
active = False
_store = None  # the Store new allocations go to
_min_bytes = DEFAULT_MIN_BYTES  # the threshold given to the handler


def enabled_by_environment():
    return os.environ.get(ENV_SWITCH, "1").strip().lower() not in (
        "0", "false", "no", "off")


def min_bytes():
    try:
        return max(1, int(os.environ.get(ENV_MIN_BYTES, DEFAULT_MIN_BYTES)))
    except ValueError:
        return DEFAULT_MIN_BYTES


def enable(store):
    """Places large numpy allocations of the calling thread's context in
    `store` (a local client's). Returns False when off, numpy is too old or
    absent, or inside a worker."""
    global active, _store
    if _ext.IN_WORKER or not enabled_by_environment():
        return False
    try:
        import numpy as np
    except ImportError:
        return False
    if tuple(int(p) for p in np.__version__.split(".")[:2]) < (1, 22):
        return False
    ext = _ext.ext()
    if not hasattr(ext, "_zero_copy_enable"):
        return False
    global _min_bytes
    _min_bytes = min_bytes()
    ext._zero_copy_enable(store, _min_bytes)
    _store = store
    active = True
    return True


def disable(store=None):
    """New allocations go to malloc again (those made stay valid)."""
    global _store
    if _store is None:
        return
    _store = None
    _ext.ext()._zero_copy_disable()


@contextlib.contextmanager
def paused():
    """Allocations inside go to malloc (the copy path), as for arrays made
    before connect; for benchmarks and tests."""
    store = _store
    disable()
    try:
        yield
    finally:
        if store is not None:
            enable(store)


def snapshot(raw):
    """(ObjectRef of the whole store object, offset of `raw` in it) for a
    contiguous buffer lying in a store-placed allocation, else None: the
    caller copies it as before. Raises the store's errors."""
    if not active:
        return None
    return _ext.ext()._zero_copy_snapshot(raw)


def by_reference(array):
    """Whether a numpy array given as a task's top-level argument should take
    the pickled call (which passes it by reference) instead of the plain-value
    path (which copies it into a new object): its buffer lies wholly in a
    store-placed allocation of this process."""
    return (active and array.nbytes >= _min_bytes and
            _ext.ext()._zero_copy_contains(array))


def stats():
    """The handler's counters (placed, live, sealed, reused, ...)."""
    ext = sys.modules.get("shoal._shoal")
    if ext is None or not hasattr(ext, "_zero_copy_stats"):
        return {}
    return ext._zero_copy_stats()
