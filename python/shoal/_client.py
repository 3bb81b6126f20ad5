"""Task mode: a Client of a node (`shoal start`) submits Python functions (or
C++ ones) to its workers and collects their results through futures.

The process's default client (shoal.connect, shoal.submit) is _context's."""

import os
import site
import sys
import sysconfig
import weakref

import numpy as np

from . import _errors, _paths, _store

_PENDING, _OK, _FAILED = 0, 1, 2
_OPTIONS = ("timeout", "max_retries", "cpus", "gpus")
# A module path longer than this goes to the workers as a store object
# ("@<id>", worker/python_runner.h) instead of inside every task: a task's
# arguments and path share 160 bytes in the task table before they take a
# 64 KiB payload chunk, of which a node has 2048.
_INLINE_PATH_BYTES = 64


class Future:
    """The result of a submitted task.

    result(timeout) waits (Ctrl-C interrupts the wait) and returns the
    task's value: None, one value, or a tuple for several; arrays come back
    as read-only numpy arrays (store objects are not copied). A failed task
    raises: TaskError for a Python exception (with the worker's traceback),
    AbortedError when its worker died and no retries were left,
    TimeoutError for a task timeout, CancelledError after cancel().
    """

    __slots__ = ("_client", "id", "_state", "_value", "_keep", "__weakref__")

    def __init__(self, client, task_id, keep):
        self._client = client
        self.id = task_id
        self._state = _PENDING
        self._value = None
        self._keep = keep  # ObjectRefs of arguments put for this task

    def done(self):
        """Whether the task finished (does not wait)."""
        if self._state == _PENDING:
            self._client._collect([self], 0, 1)
        return self._state != _PENDING

    def result(self, timeout=None):
        """The task's value; waits up to `timeout` seconds (None: forever).

        Raises shoal.TimeoutError if it has not finished by then (the task
        keeps running; call result() again later).
        """
        if self._state == _PENDING:
            self._client._collect([self], timeout, 1)
            if self._state == _PENDING:
                raise _errors.TimeoutError(
                    f"task {self.id} did not finish within {timeout} s")
        if self._state == _FAILED:
            raise self._value
        return self._value

    def exception(self, timeout=None):
        """The task's exception, or None if it succeeded."""
        try:
            self.result(timeout)
        except _errors.TimeoutError:
            if self._state == _PENDING:
                raise
            return self._value
        except _errors.Error as e:
            return e
        return None

    def cancel(self):
        """Cancels the task: a queued one never runs; a running one sees
        shoal.task.cancelled(). True if it had not finished yet."""
        if self._state != _PENDING:
            return False
        return self._client._handle.cancel(self.id)

    def __del__(self):
        if self._state == _PENDING and self._client is not None:
            self._client._forget(self.id)

    def __repr__(self):
        state = ("pending", "done", "failed")[self._state]
        return f"<shoal.Future task {self.id} {state}>"


_CLIENTS = weakref.WeakSet()  # every Client of this process (Node.stop)


class Client:
    """A connection to a shoal node: tasks, and the node's store."""

    def __init__(self, handle):
        self._handle = handle
        _CLIENTS.add(self)
        self._forgotten = []
        self._path_key = None
        self._path = ""
        self._path_refs = {}  # path → ObjectRef holding it (local clients)

    @property
    def local(self):
        """True when this process maps the node's task table and store."""
        return self._handle.local

    @property
    def job_id(self):
        return self._handle.job_id

    def submit(self, fn, *args, **options):
        """Queues fn(*args) on the node; returns a Future.

        fn: a module-level Python function (imported by name in the worker,
        from this process's sys.path), "package.module:function", or the name
        of a C++ task ("add"). Options: timeout (seconds, 0/None: none),
        max_retries (after worker deaths; default 3), cpus, gpus.
        """
        if options and not set(options) <= set(_OPTIONS):
            bad = ", ".join(sorted(set(options) - set(_OPTIONS)))
            raise TypeError(f"unknown submit option(s) {bad}: task functions "
                            f"take positional arguments; options are "
                            f"{', '.join(_OPTIONS)}")
        self._release_forgotten()
        name = task_name(fn)
        path = self._python_path() if name.startswith("py:") else ""
        timeout = options.get("timeout") or 0
        retries = options.get("max_retries")
        task_id, keep = self._handle.submit(
            name, args, path, float(timeout),
            -1 if retries is None else int(retries),
            int(options.get("cpus", 1)), int(options.get("gpus", 0)))
        return Future(self, task_id, keep)

    def map(self, fn, *iterables, **options):
        """submit(fn, *args) for each zip of the iterables; the futures."""
        return [self.submit(fn, *a, **options) for a in zip(*iterables)]

    def wait(self, futures, timeout=None, num_returns=None):
        """Waits until `num_returns` (default: all) of `futures` finished or
        `timeout` seconds passed. Returns (done, pending) lists."""
        futures = list(futures)
        want = len(futures) if num_returns is None else num_returns
        already = sum(f._state != _PENDING for f in futures)
        if want > already:
            self._collect(futures, timeout, want - already)
        done = [f for f in futures if f._state != _PENDING]
        return done, [f for f in futures if f._state == _PENDING]

    def put(self, obj, *, dtype=None):
        """See shoal.put (a remote client has no store: FailedPrecondition)."""
        return _store.put_into(self._handle.store, obj, dtype)

    def get(self, ref, *, timeout=0):
        """See shoal.get."""
        return _store.get_from(lambda: self._handle.store, ref, timeout)

    def status(self):
        """The node's workers, queue and store, as a dict."""
        return self._handle.status()

    def stop_node(self):
        """Asks the node to shut down (its workers and store go with it)."""
        self._handle.stop_node()

    # ---- internals ------------------------------------------------------

    def _collect(self, futures, timeout, min_done):
        pending = {f.id: f for f in futures if f._state == _PENDING}
        if not pending:
            return
        rows = self._handle.wait(list(pending), timeout, min_done)
        for task_id, code, message, outputs, _attempts, exception in rows:
            f = pending[task_id]
            f._keep = None
            if code == 0:
                f._value = (None if not outputs else
                            outputs[0] if len(outputs) == 1 else tuple(outputs))
                f._state = _OK
            else:
                f._value = _errors.task_failure(code, message, exception)
                f._state = _FAILED

    def _forget(self, task_id):
        # From __del__: anything may be half torn down; just remember it.
        self._forgotten.append(task_id)

    def _release_forgotten(self):
        if self._forgotten:
            ids, self._forgotten = self._forgotten, []
            self._handle.release(ids)

    def _python_path(self):
        """This process's sys.path minus the interpreter's own folders (the
        worker has those): what a worker needs to import our modules. A long
        one is put into the store once and named by "@<object id>"; the
        object lives as long as this client (queued tasks may name it)."""
        key = tuple(sys.path)
        if key != self._path_key:
            path = ":".join(client_search_path())
            if len(path) > _INLINE_PATH_BYTES and self._handle.local:
                ref = self._path_refs.get(path)
                if ref is None:
                    ref = _store.put_into(
                        self._handle.store,
                        np.frombuffer(path.encode(), dtype=np.uint8), "raw")
                    self._path_refs[path] = ref
                path = "@" + ref.id
            self._path_key, self._path = key, path
        return self._path


def _interpreter_dirs():
    """Folders of the base interpreter's standard library and site-packages."""
    dirs = set()
    for key in ("stdlib", "platstdlib"):
        p = sysconfig.get_paths().get(key)
        if p:
            dirs.add(os.path.realpath(p))
    try:
        for p in site.getsitepackages([sys.base_prefix]):
            dirs.add(os.path.realpath(p))
    except AttributeError:  # virtualenv's old site.py
        pass
    return dirs


_INTERPRETER_DIRS = None


def client_search_path():
    """The folders of sys.path a worker lacks, absolute, in order."""
    global _INTERPRETER_DIRS
    if _INTERPRETER_DIRS is None:
        _INTERPRETER_DIRS = _interpreter_dirs()
    out = []
    for p in sys.path:
        p = os.path.abspath(p or os.getcwd())
        real = os.path.realpath(p)
        if ":" in p or p in out:
            continue
        if p.endswith(".zip") and real.startswith(sys.base_prefix):
            continue
        if any(real == d or real.startswith(d + os.sep)
               for d in _INTERPRETER_DIRS):
            continue
        out.append(p)
    return out


_NAMES = weakref.WeakKeyDictionary()


def task_name(fn):
    """The task name of a function or name: "py:module:qualname" for Python
    functions, C++ task names unchanged."""
    if isinstance(fn, str):
        if fn.startswith("py:") or ":" not in fn:
            return fn
        return "py:" + fn
    try:
        return _NAMES[fn]
    except (KeyError, TypeError):
        pass
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if not module or not qualname or "<" in qualname:
        raise _errors.InvalidArgumentError(
            f"{fn!r} cannot be imported by a worker: submit a function "
            "defined at the top level of a module (not a lambda or a "
            "nested function)")
    if module == "__main__":
        module = _paths.main_module_name()
    name = f"py:{module}:{qualname}"
    if len(name.encode()) > 95:
        raise _errors.InvalidArgumentError(
            f"task name {name!r} is longer than 95 bytes")
    try:
        _NAMES[fn] = name
    except TypeError:
        pass
    return name
