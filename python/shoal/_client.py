"""Task mode: a Client of a node (`shoal start`) submits Python functions (or
C++ ones) to its workers and collects their results through futures.

The process's default client (shoal.connect, shoal.submit) is _context's."""

import functools
import io
import os
import pickle
import re
import sys
import threading
import time
import warnings
import weakref
from typing import (Any, Callable, Iterable, Iterator, Mapping, Optional,
                    Sequence, TypeVar, Union, overload)

import numpy as np

from . import (_errors, _ext, _naming, _paths, _progress, _serialize,
               _store, _zero_copy)
from ._naming import _fingerprint, client_search_path, task_name
from ._collector import _MIN_SWEEP, Collector
from ._future import (_DONE_STATES, Future, ItemFuture, NestedFuture,
                      ValueByReference, _finished)

_T = TypeVar("_T")
# The prefix of Python task names (_naming.py), bound here for the submit
# paths.
_PY = _naming.PYTHON_PREFIX

_OPTIONS = ("timeout", "max_retries", "cpus", "gpus", "num_cpus", "num_gpus")
# A module path longer than this goes to the workers as a store object
# ("@<id>", worker/python_runner.h) instead of inside every task: a task's
# arguments and path share 160 bytes in the task table before they take a
# 64 KiB payload chunk, of which a node has 2048.
_INLINE_PATH_BYTES = 64
# Argument types that travel as task values without pickling (the C++
# conversion, python/ext/values.cc): exact types only.
_PLAIN_TYPES = frozenset([type(None), bool, int, float, str, bytes,
                          np.ndarray, _store.StoreArray, _store.ObjectRef])
# By-value functions a client keeps stored (the oldest go beyond this).
_MAX_STORED_FUNCTIONS = 4096


def _reports_blocked(method: Callable[..., Any]) -> Callable[..., Any]:
    """Inside a worker (nested tasks), wraps a method that waits for tasks,
    (self, futures, timeout, [min_done], completer=False). While what it
    waits for is not done, the wait runs queued tasks this worker can run
    inline (_help_while_waiting: some worker always runs, so no depth of
    nesting deadlocks the node); when there is none, or it cannot help, it
    waits, and the node knows this worker's task is blocked meanwhile (the
    coordinator may start a temporary worker for queued work no idle worker
    takes). docs/actors.md, "Nested tasks". Polls (timeout 0) and the
    completion thread's rounds do not count. Elsewhere: the method itself."""
    report: Any = getattr(_ext._shoal, "_report_blocked_wait", None) \
        if _ext.IN_WORKER else None
    if report is None:
        return method
    helper = getattr(_ext._shoal, "_help_while_waiting", None)

    @functools.wraps(method)
    def waiting(self: Any, futures: Any, timeout: Optional[float],
                *args: Any, **kwargs: Any) -> Any:
        if timeout == 0 or kwargs.get("completer"):
            return method(self, futures, timeout, *args, **kwargs)
        blocked = False
        try:
            if helper is not None:
                timeout, blocked = _help_while_waiting(
                    helper, report, method, self, futures, timeout, args)
                if timeout == 0:
                    return None
            if not blocked:
                report(True)
                blocked = True
            return method(self, futures, timeout, *args, **kwargs)
        finally:
            if blocked:
                report(False)
    return waiting


# Between looks for queued work to run inline, a wait sleeps at most this
# long (a completion wakes it at once).
_HELP_SLICE_S = 0.01


def _help_while_waiting(helper: Any, report: Any,
                        method: Callable[..., Any], client: "Client",
                        futures: Any, timeout: Optional[float],
                        args: tuple[Any, ...]
                        ) -> tuple[Optional[float], bool]:
    """_reports_blocked's loop: runs queued tasks inline until what is
    waited for is done (returns timeout 0), the time is up (0), or it cannot
    help (returns the time left, None: forever). Also returns whether it
    reported the worker blocked (the caller ends that)."""
    group = futures if isinstance(futures, list) else [futures]
    want = args[0] if args else 1
    deadline = None if timeout is None else time.monotonic() + timeout
    blocked = False
    def enough() -> bool:
        return sum(1 for f in group if f._state in _DONE_STATES) >= want

    while True:
        if enough():
            return 0, blocked
        method(client, futures, 0, *args)  # a poll: collects what finished
        if enough():
            return 0, blocked
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return 0, blocked
        if blocked:
            report(False)  # it runs a task now, if it can
            blocked = False
        ran = helper()
        if ran < 0:
            return left, blocked
        if ran > 0:
            continue
        report(True)
        blocked = True
        method(client, futures,
               _HELP_SLICE_S if left is None else min(_HELP_SLICE_S, left),
               *args)


_CLIENTS: "weakref.WeakSet[Client]" = weakref.WeakSet()  # every Client of this process (Node.stop)


class Client(Collector):
    """A connection to a shoal node: tasks, and the node's store."""

    # The endpoint connect() was given ("": the default search), for the
    # client's other connections to the same node (actors).
    _endpoint = ""

    def __init__(self, handle: Any) -> None:
        self._handle = handle
        self._local = handle.local
        _CLIENTS.add(self)
        # Tasks of dropped futures, released once they finished (a dropped
        # future does not cancel its task: `a.add.remote()` alone runs).
        self._forgotten: list[int] = []
        self._sweep_at = _MIN_SWEEP
        # (sys.path as last seen, the search path sent for it): one tuple,
        # read without a lock; made under _path_lock.
        self._path_now: tuple[Optional[list[str]], str] = (None, "")
        self._path_lock = threading.Lock()
        # Path → ObjectRef holding it (local clients).
        self._path_refs: dict[str, Any] = {}
        # Functions by value: id(fn) → (weakref, fingerprint, name, payload)
        # and content hash → (name, ObjectRef or None, payload).
        self._by_identity: dict[Any, Any] = {}
        self._by_hash: dict[Any, Any] = {}
        self.function_stats = {"pickled": 0, "stored": 0}
        # Task name of a function sent by value → its qualified name, for
        # messages (readable_message).
        self._readable_names: dict[str, str] = {}
        # Who collects results (see _collect), and the futures whose
        # completion the completion thread delivers.
        self._cond = threading.Condition(threading.Lock())
        # Held by the one thread waiting on the task table (see _collect).
        self._wait_lock = threading.Lock()
        # Function → task name, for functions a worker imports by name.
        self._names: dict[Any, Any] = {}
        self._last_options: Any = None  # (dict, its copy, _task_options of it)
        self._user_waiting = 0
        self._watched: dict[int, Future[Any]] = {}  # task id → Future
        # Futures threads wait for in _collect: task id → (Future, threads).
        self._wanted: dict[int, Any] = {}
        self._completer: Any = None
        if self._local:  # its node going away fails its futures at once
            pid = _paths.coordinator_pid(handle.job_id)
            if pid is not None:
                self._watch_node(pid)

    def _gone_error(self) -> _errors.UnavailableError:
        """A new UnavailableError saying the node went away."""
        return _errors.UnavailableError(str(self._gone))

    @property
    def local(self) -> bool:
        """True when this process maps the node's task table and store."""
        return self._local

    @property
    def job_id(self) -> str:
        """The id of the node's job (its discovery name)."""
        return self._handle.job_id

    @overload
    def submit(self, fn: Callable[..., _T], *args: Any,
               _options: Optional[Mapping[str, Any]] = None,
               **kwargs: Any) -> Future[_T]: ...
    @overload
    def submit(self, fn: str, *args: Any,
               _options: Optional[Mapping[str, Any]] = None,
               **kwargs: Any) -> Future[Any]: ...

    def submit(self, fn: Union[Callable[..., Any], str], *args: Any,
               _options: Optional[Mapping[str, Any]] = None,
               **kwargs: Any) -> Future[Any]:
        """Queues fn(*args, **kwargs) on the node; returns a Future.

        fn: any function or callable: a module-level function is imported
        by name in the worker (from this process's sys.path); lambdas,
        closures, bound methods, callables and functions of `python -c` go
        by value (cloudpickle, once per client); "package.module:function",
        or the name of a C++ task ("add"). Arguments: any picklable values;
        a Future makes the task wait for that task and receive its value.
        _options: a dict of task options: timeout (seconds, 0/None: none),
        max_retries (after worker deaths; default 3), cpus, gpus.

        Raises InvalidArgumentError (naming the argument) for an argument
        that cannot be pickled, TypeError for an unknown option.
        """
        if not kwargs and _options is None:
            fast = self._submit_plain(fn, args, _DEFAULT_OPTIONS)
            if fast is not None:
                return fast
        return self._submit_call(fn, args, kwargs, _options)

    @overload
    def submit_with(self, options: Optional[Mapping[str, Any]],
                    fn: Callable[..., _T], *args: Any,
                    **kwargs: Any) -> Future[_T]: ...
    @overload
    def submit_with(self, options: Optional[Mapping[str, Any]], fn: str,
                    *args: Any, **kwargs: Any) -> Future[Any]: ...

    def submit_with(self, options: Optional[Mapping[str, Any]],
                    fn: Union[Callable[..., Any], str], *args: Any,
                    **kwargs: Any) -> Future[Any]:
        """submit with task options: submit_with({"timeout": 5}, f, x)."""
        return self._submit_call(fn, args, kwargs, options)

    @overload
    def map(self, fn: Callable[..., _T], *iterables: Iterable[Any],
            chunksize: int = ..., timeout: Optional[float] = ...,
            progress: bool = ...,
            _options: Optional[Mapping[str, Any]] = ...) -> Iterator[_T]: ...
    @overload
    def map(self, fn: str, *iterables: Iterable[Any], chunksize: int = ...,
            timeout: Optional[float] = ..., progress: bool = ...,
            _options: Optional[Mapping[str, Any]] = ...
            ) -> Iterator[Any]: ...

    def map(self, fn: Union[Callable[..., Any], str],
            *iterables: Iterable[Any], chunksize: int = 1,
            timeout: Optional[float] = None, progress: bool = False,
            _options: Optional[Mapping[str, Any]] = None) -> Iterator[Any]:
        """Like concurrent.futures.Executor.map: an iterator over
        fn(*items) for each zip of the iterables, in order. Tasks are
        submitted at once, `chunksize` items per task; a failed item raises
        its error when the iterator reaches it; `timeout` (seconds) bounds
        the whole map. progress=True shows a tqdm bar of the items finished
        on stderr (without tqdm: a warning once, no bar). Raises ValueError
        for a chunksize below 1."""
        if chunksize < 1:
            raise ValueError("chunksize must be at least 1")
        items = list(zip(*iterables))
        counter = None
        if progress:
            b = _progress.bar(len(items), "shoal.map")
            counter = None if b is None else _progress.Counter(b)
        if chunksize == 1:
            futures = [self._submit_call(fn, a, {}, _options) for a in items]
            sizes = [1] * len(futures)
        else:
            runner = functools.partial(_serialize.map_chunk, fn)
            futures = [self._submit_call(runner, (items[i:i + chunksize],),
                                         {}, _options)
                       for i in range(0, len(items), chunksize)]
            sizes = [min(chunksize, len(items) - i)
                     for i in range(0, len(items), chunksize)]
        if counter is not None:
            for f, n in zip(futures, sizes):
                counter.watch(f, n)
        return _results_in_order(futures, timeout, chunksize > 1, counter,
                                 sizes)

    def wait(self, futures: Iterable[Future[_T]],
             timeout: Optional[float] = None,
             num_returns: Optional[int] = None
             ) -> tuple[list[Future[_T]], list[Future[_T]]]:
        """Waits until `num_returns` (default: all) of `futures` finished or
        `timeout` seconds passed (None: no limit). Returns (done, pending)
        lists, each in the order of `futures`."""
        futures = list(futures)
        want = len(futures) if num_returns is None else num_returns
        if any(type(f) is ItemFuture for f in futures):
            _wait_as_completed(futures, timeout, want)
        else:
            self._collect(futures, timeout, want)
        done = [f for f in futures if _finished(f)]
        return done, [f for f in futures if not _finished(f)]

    def put(self, obj: Any, *, dtype: Optional[str] = None
            ) -> Union[_store.ObjectRef, _store.ValueRef]:
        """See shoal.put (a remote client has no store: FailedPrecondition)."""
        return _store.put_into(self._handle.store, obj, dtype)

    def get(self, ref: Any, *, timeout: Optional[float] = 0) -> Any:
        """See shoal.get."""
        return _store.get_from(lambda: self._handle.store, ref, timeout)

    def status(self) -> dict[str, Any]:
        """The node's workers, queue and store, as a dict."""
        return self._handle.status()

    def stop_node(self) -> None:
        """Asks the node to shut down (its workers and store go with it)."""
        self._handle.stop_node()

    def _force_cancel(self, task_id: int) -> None:
        """cancel(force=True) after the cancel flag is set: tells each busy
        pool worker that task `task_id` is cancelled with force (a signal
        carrying the id, worker/python_interrupt.h); the one running it
        interrupts it, then stops if it goes on. Needs this machine's node
        and its owner's uid; elsewhere the cancel stays a plain one (with a
        warning)."""
        if not self._local or not self._handle.owner:
            warnings.warn(
                f"task {task_id}: cancel(force=True) needs a client on the "
                "node's machine run by the node's owner; the task was "
                "cancelled without force (it stops when it checks "
                "shoal.task.cancelled())", RuntimeWarning, stacklevel=3)
            return
        for w in self._handle.status()["workers"]:
            # Only busy workers: they run a task, so their handler is in
            # place (a worker still starting would die of the signal).
            if w["state"] == "busy" and not w["role"].startswith("actor"):
                _signal_force_cancel(w["pid"], task_id)

    # ---- submitting ------------------------------------------------------

    def _submit_call(self, fn: Any, args: Iterable[Any],
                     kwargs: Optional[Mapping[str, Any]],
                     options: Optional[Mapping[str, Any]] = None
                     ) -> Future[Any]:
        """The one way in: queues fn(*args, **kwargs) with `options` (a dict:
        timeout, max_retries, cpus or num_cpus, gpus or num_gpus; None: the
        defaults) and returns its Future. Futures among args and kwargs
        (top level) make the task wait for them: it is submitted when they
        finished, with their values. Raises InvalidArgumentError (naming the
        argument) for arguments that cannot be pickled, TypeError for
        unknown options."""
        if not kwargs:
            fast = self._submit_plain(fn, args, self._options_of(options))
            if fast is not None:
                return fast
        opts = _task_options(options)
        args = tuple(args)
        kwargs = dict(kwargs) if kwargs else {}
        deps = [a for a in args if isinstance(a, Future)] + \
            [v for v in kwargs.values() if isinstance(v, Future)]
        if deps:
            return self._submit_after(deps, fn, args, kwargs, opts)
        try:
            task_id, keep = self._submit_now(fn, args, kwargs, opts)
        except NestedFuture:
            # Futures inside lists, dicts, objects: the task is submitted
            # once they finished, with their values in their places.
            nested = _nested_futures(args, kwargs)
            return self._submit_after(nested, fn, args, kwargs, opts,
                                      nested)
        return Future(self, task_id, keep)

    def _options_of(self, options: Optional[Mapping[str, Any]]
                    ) -> tuple[Any, ...]:
        """_task_options(options), remembered for the last dict seen (actor
        calls pass the same one every time)."""
        if options is None:
            return _DEFAULT_OPTIONS
        last = self._last_options
        if last is not None and last[0] is options and last[1] == options:
            return last[2]
        opts = _task_options(options)
        self._last_options = (options, dict(options), opts)
        return opts

    def _submit_plain(self, fn: Any, args: Any,
                      opts: tuple[Any, ...]) -> Optional[Future[Any]]:
        """The common cases, without the general checks: a function a worker
        imports by name (known from an earlier submit) or one sent by value
        before and unchanged since (the same object, the same fingerprint),
        and positional arguments with no Future among them — plain values
        as task values, any others as a pickled call (the call envelope, its
        small pickle inline in the task). None when it is not that case
        (the general path then names an argument that cannot be pickled)."""
        if self._gone is not None:
            raise self._gone_error()
        try:
            name = self._names.get(fn)
        except TypeError:  # an unhashable callable
            return None
        fn_keep = fn_bytes = None
        if name is None:
            hit = self._by_identity.get(id(fn))
            if (hit is None or hit[0]() is not fn or
                    hit[1] != _fingerprint(fn)):
                return None
            name, fn_keep, fn_bytes = hit[2], hit[3], hit[4]
        plain = fn_bytes is None
        for a in args:
            if type(a) not in _PLAIN_TYPES:
                if (isinstance(a, Future) or type(a) is _store.ValueRef or
                        not name.startswith(_PY)):
                    return None
                plain = False
            elif (type(a) is np.ndarray and _zero_copy.active and
                  name.startswith(_PY) and _zero_copy.by_reference(a)):
                plain = False  # in store memory already: by reference
        if len(self._forgotten) >= self._sweep_at:
            self._release_forgotten()
        timeout, retries, cpus, gpus = opts
        path = self._python_path() if name.startswith(_PY) else ""
        if plain:
            try:
                task_id, keep = self._handle.submit(
                    name, args, path, timeout, retries, cpus, gpus)
                return Future(self, task_id, _keep_also(keep, fn_keep))
            except _errors.InvalidArgumentError:
                if not path:
                    return None  # the general path says why
                # a value the C++ conversion refuses: pickle it
        # The common small call: its pickle written by the extension, and
        # submitted, in one step; None when an argument is not a plain
        # value or an exact dict, list or tuple of them.
        envelope_name = _naming.enveloped(name)
        done = self._handle.submit_small_call(
            envelope_name, fn_bytes, args, path, timeout, retries, cpus, gpus)
        if done is not None:
            return Future(self, done[0], _keep_also(done[1], fn_keep))
        values = _small_call(fn_bytes, args)
        if values is None:
            try:
                values = _serialize.dump_call(fn_bytes, args, None,
                                              self._local)
            except Exception:  # noqa: BLE001 (the general path names it)
                return None
        task_id, keep = self._handle.submit(
            envelope_name, values, path, timeout, retries, cpus, gpus)
        return Future(self, task_id, _keep_also(keep, fn_keep))

    def _submit_now(self, fn: Any, args: Any, kwargs: Any,
                    opts: Any) -> tuple[int, Any]:
        """Submits fn(*args, **kwargs); returns (task id, what its Future
        keeps)."""
        if self._gone is not None:
            raise self._gone_error()
        if len(self._forgotten) >= self._sweep_at:
            self._release_forgotten()
        name, fn_keep, fn_bytes = self._function(fn)
        path = self._python_path() if name.startswith(_PY) else ""
        timeout, retries, cpus, gpus = opts
        if (not kwargs and fn_bytes is None and
                all(type(a) in _PLAIN_TYPES for a in args) and
                not (_zero_copy.active and name.startswith(_PY) and any(
                    type(a) is np.ndarray and _zero_copy.by_reference(a)
                    for a in args))):
            try:
                task_id, keep = self._handle.submit(
                    name, args, path, timeout, retries, cpus, gpus)
                return task_id, _keep_also(keep, fn_keep)
            except _errors.InvalidArgumentError:
                if not name.startswith(_PY):
                    raise  # C++ tasks take plain values only
        if not name.startswith(_PY):
            raise _errors.InvalidArgumentError(
                f"the C++ task {name!r} takes positional plain values only "
                "(None, bool, int, float, str, bytes, arrays)")
        if any(type(a) is _store.ValueRef for a in args):
            args = tuple(_top_level(a) for a in args)
        if any(type(v) is _store.ValueRef for v in kwargs.values()):
            kwargs = {k: _top_level(v) for k, v in kwargs.items()}
        try:
            values = _serialize.dump_call(fn_bytes, args, kwargs, self._local)
        except NestedFuture:
            raise  # (_submit_call waits for it)
        except Exception as e:  # noqa: BLE001 (any pickling failure)
            raise _serialize.unpicklable_argument(args, kwargs, e) from None
        task_id, keep = self._handle.submit(
            _naming.enveloped(name), values, path, timeout, retries, cpus,
            gpus)
        return task_id, _keep_also(keep, fn_keep)

    def _submit_resolved(self, fn: Any, args: Any, kwargs: Any,
                         opts: Any) -> tuple[int, Any]:
        """_submit_now for a call whose Future arguments all finished. A
        future whose outputs include store objects reaches a Python task as
        those objects (_future.ValueByReference: out-of-band buffers of the
        call, which the worker views in place and rebuilds the value from;
        this task's Future holds them until it finished); a future of inline
        outputs only (None, scalars, str, small arrays, a small pickled
        result), one given to a C++ task, and any future of a remote client
        (it has no store) go by value. Raises a failed dependency's error."""
        by_ref = self._local and self._function(fn)[0].startswith(_PY)
        refs: list[Any] = []

        def resolve(x: Any) -> Any:
            if not isinstance(x, Future):
                return x
            outputs = x._outputs  # (only a task that succeeded has them)
            if not by_ref or not outputs or any(
                    type(o) is _store.ObjectRef for o in outputs):
                # A failed dependency raises its error here; a device
                # object goes as its ObjectRef.
                return x.result()
            stored = [_store_ref_of(o) for o in outputs]
            if x._exception is None and all(r is None for r in stored):
                return x._result  # inline: by value
            # Store objects, or a value this process could not unpickle
            # (its class is not importable here): the outputs themselves.
            refs.extend(r for r in stored if r is not None)
            return ValueByReference(outputs, stored)

        args = tuple(resolve(a) for a in args)
        kwargs = {k: resolve(v) for k, v in kwargs.items()}
        task_id, keep = self._submit_now(fn, args, kwargs, opts)
        for ref in refs:  # the objects outlive this task
            keep = _keep_also(keep, ref)
        return task_id, keep

    def _submit_after(self, deps: list[Future[Any]], fn: Any, args: Any,
                      kwargs: Any, opts: Any,
                      nested: Any = ()) -> Future[Any]:
        """A Future for a task submitted once `deps` finished (from the
        thread that completes the last of them)."""
        fut: Future[Any] = Future(self, None, None)
        remaining = [len(deps)]
        lock = threading.Lock()

        def on_dep_done(_: Any) -> None:
            with lock:
                remaining[0] -= 1
                if remaining[0] != 0:
                    return
            if fut.cancelled():
                return
            try:
                for d in nested:  # a failed one fails this task
                    d.result(0)
                task_id, keep = self._submit_resolved(fn, args, kwargs, opts)
            except BaseException as e:  # noqa: BLE001 (a dependency failed)
                if fut.set_running_or_notify_cancel():
                    fut.set_exception(e)
                return
            fut._keep = keep
            fut.id = task_id
            with fut._condition:
                watched = bool(fut._waiters) or bool(fut._done_callbacks)
            if watched:
                self._watch(fut)
            with self._cond:
                self._cond.notify_all()  # a thread in result() sees the id

        for d in deps:
            d.add_done_callback(on_dep_done)
        return fut

    def _function(self, fn: Any) -> Any:
        """(task name, ObjectRef to keep or None, pickled function or None)
        — by name when a worker can import it, else by value: put into the
        store once per distinct content (local clients: "py:=<object id>")
        or carried in the call ("py:#<hash>", remote clients)."""
        try:
            name = self._names.get(fn)  # seen before, by name
        except TypeError:  # an unhashable callable
            name = None
        if name is not None:
            return name, None, None
        name = task_name(fn, by_value_ok=True)
        if name is not None:
            if len(self._names) >= _MAX_STORED_FUNCTIONS:
                self._names.clear()
            try:
                self._names[fn] = name
            except TypeError:
                pass
            return name, None, None
        key = id(fn)
        fingerprint = _fingerprint(fn)
        hit = self._by_identity.get(key)
        if hit is not None and hit[0]() is fn and hit[1] == fingerprint:
            return hit[2], hit[3], hit[4]
        data, digest = _serialize.dump_function(fn)
        self.function_stats["pickled"] += 1
        entry = self._by_hash.get(digest)
        if entry is None:
            if self._local:
                ref: Any = _store.put_into(
                    self._handle.store, np.frombuffer(data, dtype=np.uint8),
                    "raw")
                self.function_stats["stored"] += 1
                entry = (_naming.stored(ref.id), ref, None)
            else:
                entry = (_naming.carried(digest), None, data)
            if len(self._by_hash) >= _MAX_STORED_FUNCTIONS:
                self._by_hash.pop(next(iter(self._by_hash)))
            self._by_hash[digest] = entry
        self._readable_names[entry[0]] = _qualified_name(fn)
        try:
            ref_fn = weakref.ref(fn)
        except TypeError:
            return entry
        if len(self._by_identity) >= _MAX_STORED_FUNCTIONS:
            self._by_identity.pop(next(iter(self._by_identity)))
        self._by_identity[key] = (ref_fn, fingerprint) + entry
        return entry

    def readable_message(self, text: str) -> str:
        """`text` with task names as users know them: "py:mod:f!" as
        mod.f, a function sent by value ("py:=<id>", "py:#<hash>") by its
        qualified name."""
        def name(m: "re.Match[str]") -> str:
            whole = m.group(0).rstrip(_naming.ENVELOPE)
            known = self._readable_names.get(whole)
            if known is not None:
                return known
            if _naming.is_by_value(whole):
                return "a function sent by value"
            return whole[len(_naming.PYTHON_PREFIX):].replace(":", ".")
        return _naming.NAME_IN_TEXT.sub(name, text)

    # ---- completions (_collector.Collector) ---------------------------

    # Inside a worker, a wait tells the node its task is blocked.
    _await_one = _reports_blocked(Collector._await_one)
    _collect = _reports_blocked(Collector._collect)

    def _python_path(self) -> str:
        """This process's sys.path minus the interpreter's own folders (the
        worker has those): what a worker needs to import our modules. A long
        one is put into the store once and named by "@<object id>"; the
        object lives as long as this client (queued tasks may name it).
        Empty for a client the node did not admit as its owner: only the
        owner may send a search path (its workers run as the owner)."""
        if not self._handle.owner:
            return ""
        now = self._path_now
        if sys.path == now[0]:  # (no copy when unchanged)
            return now[1]
        # Threads making their first submits together: one puts the path
        # into the store, the others use its object (a second put would
        # replace, and so free, an object queued tasks already name).
        with self._path_lock:
            key = list(sys.path)
            path = ":".join(client_search_path())
            if len(path) > _INLINE_PATH_BYTES and self._handle.local:
                ref: Any = self._path_refs.get(path)
                if ref is None:
                    ref = _store.put_into(
                        self._handle.store,
                        np.frombuffer(path.encode(), dtype=np.uint8), "raw")
                    self._path_refs[path] = ref
                path = "@" + ref.id
            self._path_now = (key, path)
        return path


def _nested_futures(args: Any, kwargs: Any) -> list[Future[Any]]:
    """The distinct Futures inside the call's arguments, at any depth."""
    found = {}

    def record(obj: Any) -> Any:
        if isinstance(obj, Future):
            found[id(obj)] = obj
            return type(None), ()
        return NotImplemented

    class Recorder(pickle.Pickler):
        def reducer_override(self, obj: Any) -> Any:
            return record(obj)

    try:
        Recorder(io.BytesIO(), 5).dump((args, kwargs))
    except Exception:  # noqa: BLE001 (lambdas and such: cloudpickle's way)
        import cloudpickle
        found.clear()

        class CloudRecorder(cloudpickle.Pickler):
            def reducer_override(self, obj: Any) -> Any:
                r = record(obj)
                return super().reducer_override(obj) \
                    if r is NotImplemented else r

        CloudRecorder(io.BytesIO(), 5).dump((args, kwargs))
    return list(found.values())


def _qualified_name(fn: Any) -> str:
    f = getattr(fn, "__func__", fn)
    qualname = getattr(f, "__qualname__", None) or type(f).__qualname__
    module = getattr(f, "__module__", None)
    return f"{module}.{qualname}" if module else qualname


def _wait_as_completed(futures: list[Future[Any]], timeout: Optional[float],
                       want: int) -> None:
    """Client.wait over futures some of which are num_returns items (they
    have no task of their own): concurrent.futures' waiters."""
    import concurrent.futures
    deadline = None if timeout is None else time.monotonic() + timeout
    pending = [f for f in futures if not _finished(f)]
    while len(futures) - len(pending) < want and pending:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return
        _, still = concurrent.futures.wait(
            pending, left, concurrent.futures.FIRST_COMPLETED)
        pending = list(still)  # type: ignore[arg-type]


def _results_in_order(futures: list[Future[Any]], timeout: Optional[float],
                      chunked: bool,
                      counter: Optional[_progress.Counter] = None,
                      sizes: Sequence[int] = ()) -> Iterator[Any]:
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        for i, f in enumerate(futures):
            left = None if deadline is None else \
                max(0.0, deadline - time.monotonic())
            try:
                value = f.result(left)
            finally:
                if counter is not None and f.done():
                    counter.count(f, sizes[i])
            if chunked:
                yield from value
            else:
                yield value
    finally:
        for f in futures:
            f.cancel()
        if counter is not None:
            counter.close()


_NO_KWARGS: dict = {}  # pickled, never changed


def _small_call(fn_bytes: Any, args: Any) -> Any:
    """The call envelope's values of a call that plain pickle takes whole,
    with no buffer to send out of band (a small dict, list, tuple of
    scalars and strings: the common small call), else None (then
    _serialize.dump_call decides). The same bytes as dump_call's, with none
    of its per-call set-up: one pickle.dumps. Not with torch imported (its
    tensors pickle in band unless _serialize's pickler sends them)."""
    if "torch" in sys.modules:
        return None
    out_of_band: list[Any] = []
    try:
        header = pickle.dumps((fn_bytes, args, _NO_KWARGS), 5,
                              buffer_callback=out_of_band.append)
    except Exception:  # noqa: BLE001 (cloudpickle's case: dump_call)
        return None
    if out_of_band or _serialize.names_main(header):
        return None  # (a class of __main__: by value, dump_call)
    return [header]


def _store_ref_of(output: Any) -> Any:
    """The ObjectRef a task output (as ClientHandle.wait gives it: a
    store-backed array, a raw object's memoryview) views in full; None for
    an inline value."""
    owner = output.obj if type(output) is memoryview else output
    for _ in range(4):
        owner = getattr(owner, "base", None)
        if owner is None:
            return None
        if type(owner) is _store.ObjectRef:
            return owner
    return None


def _top_level(arg: Any) -> Any:
    """A task's argument as it is pickled: a ValueRef as its value (Ray's
    rule for a top-level ref), anything else as it is."""
    return _store.ByValue(arg) if type(arg) is _store.ValueRef else arg


def _keep_also(keep: Any, ref: Any) -> Any:
    if ref is None:
        return keep
    if keep is None:
        return [ref]
    keep.append(ref)
    return keep


_DEFAULT_OPTIONS = (0.0, -1, 1, 0)

# worker/python_interrupt.h's ForceCancelSignal(): SIGRTMIN + 6.
_FORCE_CANCEL_SIGNAL_OFFSET = 6
_sigqueue = None


def _signal_force_cancel(pid: int, task_id: int) -> None:
    """sigqueue(pid, SIGRTMIN + 6, task_id); a worker gone meanwhile is
    skipped."""
    global _sigqueue
    if _sigqueue is None:
        import ctypes
        f = ctypes.CDLL(None, use_errno=True).sigqueue
        # union sigval is passed as its pointer member.
        f.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_void_p)
        f.restype = ctypes.c_int
        _sigqueue = f
    import ctypes
    import signal
    if _sigqueue(pid, signal.SIGRTMIN + _FORCE_CANCEL_SIGNAL_OFFSET,
                 task_id) != 0 and ctypes.get_errno() not in (3,):  # ESRCH
        warnings.warn(f"task {task_id}: cannot signal worker pid {pid}: "
                      f"{os.strerror(ctypes.get_errno())}", RuntimeWarning,
                      stacklevel=4)


def _task_options(options: Optional[Mapping[str, Any]]
                  ) -> tuple[Any, ...]:
    """(timeout_s, max_retries, cpus, gpus) from an options dict."""
    if not options:
        return _DEFAULT_OPTIONS
    unknown = set(options) - set(_OPTIONS)
    if unknown:
        raise TypeError(f"unknown task option(s) {', '.join(sorted(unknown))}"
                        f": options are {', '.join(_OPTIONS)}")
    timeout = options.get("timeout") or 0
    retries = options.get("max_retries")
    cpus = options.get("cpus", options.get("num_cpus", 1))
    gpus = options.get("gpus", options.get("num_gpus", 0))
    return (float(timeout), -1 if retries is None else int(retries),
            int(cpus), int(gpus))
