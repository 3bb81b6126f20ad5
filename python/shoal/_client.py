"""Task mode: a Client of a node (`shoal start`) submits Python functions (or
C++ ones) to its workers and collects their results through futures.

The process's default client (shoal.connect, shoal.submit) is _context's."""

import functools
import os
import site
import sys
import sysconfig
import threading
import time
import types
import weakref

import numpy as np

from . import _errors, _ext, _paths, _serialize, _store
from ._future import _DONE_STATES, Future, _finish, _finished

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
# How long the completion thread waits per round (it holds the client's
# connection meanwhile, so a submit from another thread waits at most this).
_COMPLETER_SLICE_S = 0.001
# By-value functions a client keeps stored (the oldest go beyond this).
_MAX_STORED_FUNCTIONS = 4096


def _reports_blocked(method):
    """Inside a worker (nested tasks), wraps a method that waits for tasks,
    (self, futures, timeout, [min_done], completer=False). While what it
    waits for is not done, the wait runs queued tasks this worker can run
    inline (_help_while_waiting: some worker always runs, so no depth of
    nesting deadlocks the node); when there is none, or it cannot help, it
    waits, and the node knows this worker's task is blocked meanwhile (the
    coordinator may start a temporary worker for queued work no idle worker
    takes). docs/actors.md, "Nested tasks". Polls (timeout 0) and the
    completion thread's rounds do not count. Elsewhere: the method itself."""
    report = getattr(_ext._shoal, "_report_blocked_wait", None) \
        if _ext.IN_WORKER else None
    if report is None:
        return method
    helper = getattr(_ext._shoal, "_help_while_waiting", None)

    @functools.wraps(method)
    def waiting(self, futures, timeout, *args, **kwargs):
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


def _help_while_waiting(helper, report, method, client, futures, timeout,
                        args):
    """_reports_blocked's loop: runs queued tasks inline until what is
    waited for is done (returns timeout 0), the time is up (0), or it cannot
    help (returns the time left, None: forever). Also returns whether it
    reported the worker blocked (the caller ends that)."""
    group = futures if isinstance(futures, list) else [futures]
    want = args[0] if args else 1
    deadline = None if timeout is None else time.monotonic() + timeout
    blocked = False
    while True:
        method(client, futures, 0, *args)  # a poll: collects what finished
        if sum(1 for f in group if f._state in _DONE_STATES) >= want:
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
# Dropped futures' tasks are looked at in batches of at least this many.
_MIN_SWEEP = 64


# How long result() waits on the task table by itself before it joins the
# shared collector (so a long wait never keeps another thread's completions,
# callbacks or asyncio waiters from being delivered).
_DIRECT_WAIT_S = 0.02
# The longest one round of the shared collector waits on the table before it
# looks again at which futures threads want (see Client._collect).
_ROUND_S = 0.1


_CLIENTS = weakref.WeakSet()  # every Client of this process (Node.stop)


class Client:
    """A connection to a shoal node: tasks, and the node's store."""

    def __init__(self, handle):
        self._handle = handle
        self._local = handle.local
        _CLIENTS.add(self)
        # Tasks of dropped futures, released once they finished (a dropped
        # future does not cancel its task: `a.add.remote()` alone runs).
        self._forgotten = []
        self._sweep_at = _MIN_SWEEP
        self._path_key = None
        self._path = ""
        self._path_refs = {}  # path → ObjectRef holding it (local clients)
        # Functions by value: id(fn) → (weakref, fingerprint, name, payload)
        # and content hash → (name, ObjectRef or None, payload).
        self._by_identity = {}
        self._by_hash = {}
        self.function_stats = {"pickled": 0, "stored": 0}
        # Who collects results (see _collect), and the futures whose
        # completion the completion thread delivers.
        self._cond = threading.Condition(threading.Lock())
        # Held by the one thread waiting on the task table (see _collect).
        self._wait_lock = threading.Lock()
        # Function → task name, for functions a worker imports by name.
        self._names = {}
        self._last_options = None  # (dict, its copy, _task_options of it)
        self._user_waiting = 0
        self._watched = {}  # task id → Future
        # Futures threads wait for in _collect: task id → (Future, threads).
        self._wanted = {}
        self._completer = None

    @property
    def local(self):
        """True when this process maps the node's task table and store."""
        return self._local

    @property
    def job_id(self):
        return self._handle.job_id

    def submit(self, fn, *args, _options=None, **kwargs):
        """Queues fn(*args, **kwargs) on the node; returns a Future.

        fn: any function or callable: a module-level function is imported
        by name in the worker (from this process's sys.path); lambdas,
        closures, bound methods, callables and functions of `python -c` go
        by value (cloudpickle, once per client); "package.module:function",
        or the name of a C++ task ("add"). Arguments: any picklable values;
        a Future makes the task wait for that task and receive its value.
        _options: a dict of task options: timeout (seconds, 0/None: none),
        max_retries (after worker deaths; default 3), cpus, gpus.
        """
        if not kwargs and _options is None:
            fast = self._submit_plain(fn, args, _DEFAULT_OPTIONS)
            if fast is not None:
                return fast
        return self._submit_call(fn, args, kwargs, _options)

    def submit_with(self, options, fn, *args, **kwargs):
        """submit with task options: submit_with({"timeout": 5}, f, x)."""
        return self._submit_call(fn, args, kwargs, options)

    def map(self, fn, *iterables, chunksize=1, timeout=None, _options=None):
        """Like concurrent.futures.Executor.map: an iterator over
        fn(*items) for each zip of the iterables, in order. Tasks are
        submitted at once, `chunksize` items per task; a failed item raises
        its error when the iterator reaches it; `timeout` (seconds) bounds
        the whole map."""
        if chunksize < 1:
            raise ValueError("chunksize must be at least 1")
        items = list(zip(*iterables))
        if chunksize == 1:
            futures = [self._submit_call(fn, a, {}, _options) for a in items]
            return _results_in_order(futures, timeout, chunked=False)
        runner = functools.partial(_serialize.map_chunk, fn)
        futures = [self._submit_call(runner, (items[i:i + chunksize],), {},
                                     _options)
                   for i in range(0, len(items), chunksize)]
        return _results_in_order(futures, timeout, chunked=True)

    def wait(self, futures, timeout=None, num_returns=None):
        """Waits until `num_returns` (default: all) of `futures` finished or
        `timeout` seconds passed. Returns (done, pending) lists."""
        futures = list(futures)
        want = len(futures) if num_returns is None else num_returns
        self._collect(futures, timeout, want)
        done = [f for f in futures if _finished(f)]
        return done, [f for f in futures if not _finished(f)]

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

    # ---- submitting ------------------------------------------------------

    def _submit_call(self, fn, args, kwargs, options=None):
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
        task_id, keep = self._submit_now(fn, args, kwargs, opts)
        return Future(self, task_id, keep)

    def _options_of(self, options):
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

    def _submit_plain(self, fn, args, opts):
        """The common cases, without the general checks: a function a worker
        imports by name (known from an earlier submit) and positional
        arguments with no Future among them — plain values as task values,
        any others as a pickled call (the call envelope, its small pickle
        inline in the task). None when it is not that case (the general
        path then names an argument that cannot be pickled)."""
        try:
            name = self._names.get(fn)
        except TypeError:  # an unhashable callable
            return None
        if name is None:
            return None
        plain = True
        for a in args:
            if type(a) not in _PLAIN_TYPES:
                if isinstance(a, Future) or not name.startswith("py:"):
                    return None
                plain = False
        if len(self._forgotten) >= self._sweep_at:
            self._release_forgotten()
        timeout, retries, cpus, gpus = opts
        path = self._python_path() if name.startswith("py:") else ""
        if plain:
            try:
                task_id, keep = self._handle.submit(
                    name, args, path, timeout, retries, cpus, gpus)
                return Future(self, task_id, keep)
            except _errors.InvalidArgumentError:
                if not path:
                    return None  # the general path says why
                # a value the C++ conversion refuses: pickle it
        try:
            values = _serialize.dump_call(None, args, None, self._local)
        except Exception:  # noqa: BLE001 (the general path names it)
            return None
        task_id, keep = self._handle.submit(
            name + "!", values, path, timeout, retries, cpus, gpus)
        return Future(self, task_id, keep)

    def _submit_now(self, fn, args, kwargs, opts):
        if len(self._forgotten) >= self._sweep_at:
            self._release_forgotten()
        name, fn_keep, fn_bytes = self._function(fn)
        path = self._python_path() if name.startswith("py:") else ""
        timeout, retries, cpus, gpus = opts
        if (not kwargs and fn_bytes is None and
                all(type(a) in _PLAIN_TYPES for a in args)):
            try:
                task_id, keep = self._handle.submit(
                    name, args, path, timeout, retries, cpus, gpus)
                return task_id, _keep_also(keep, fn_keep)
            except _errors.InvalidArgumentError:
                if not name.startswith("py:"):
                    raise  # C++ tasks take plain values only
        if not name.startswith("py:"):
            raise _errors.InvalidArgumentError(
                f"the C++ task {name!r} takes positional plain values only "
                "(None, bool, int, float, str, bytes, arrays)")
        try:
            values = _serialize.dump_call(fn_bytes, args, kwargs, self._local)
        except Exception as e:  # noqa: BLE001 (any pickling failure)
            raise _serialize.unpicklable_argument(args, kwargs, e) from None
        task_id, keep = self._handle.submit(
            name + "!", values, path, timeout, retries, cpus, gpus)
        return task_id, _keep_also(keep, fn_keep)

    def _submit_after(self, deps, fn, args, kwargs, opts):
        """A Future for a task submitted once `deps` finished (from the
        thread that completes the last of them)."""
        fut = Future(self, None, None)
        remaining = [len(deps)]
        lock = threading.Lock()

        def on_dep_done(_):
            with lock:
                remaining[0] -= 1
                if remaining[0] != 0:
                    return
            if fut.cancelled():
                return
            try:
                a = tuple(_value_of(x) for x in args)
                k = {key: _value_of(v) for key, v in kwargs.items()}
                task_id, keep = self._submit_now(fn, a, k, opts)
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

    def _function(self, fn):
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
                ref = _store.put_into(
                    self._handle.store, np.frombuffer(data, dtype=np.uint8),
                    "raw")
                self.function_stats["stored"] += 1
                entry = ("py:=" + ref.id, ref, None)
            else:
                entry = ("py:#" + digest, None, data)
            if len(self._by_hash) >= _MAX_STORED_FUNCTIONS:
                self._by_hash.pop(next(iter(self._by_hash)))
            self._by_hash[digest] = entry
        try:
            ref_fn = weakref.ref(fn)
        except TypeError:
            return entry
        if len(self._by_identity) >= _MAX_STORED_FUNCTIONS:
            self._by_identity.pop(next(iter(self._by_identity)))
        self._by_identity[key] = (ref_fn, fingerprint) + entry
        return entry

    # ---- completions -----------------------------------------------------

    @_reports_blocked
    def _await_one(self, future, timeout):
        """result()/done() of one future. The common case (no other thread
        collecting, no watched futures) waits on the task table directly on
        this thread, as a C++ client does: no Condition, no hand-off. After
        _DIRECT_WAIT_S (or when the direct way is taken) it joins _collect,
        which shares the table among threads."""
        if (future.id is not None and not self._watched and
                self._wait_lock.acquire(False)):
            direct = _DIRECT_WAIT_S if timeout is None else \
                min(timeout, _DIRECT_WAIT_S)
            notify = None
            try:
                rows = self._handle.wait([future.id], direct, 1)
                if rows:
                    notify = _finish(future, rows[0])
            finally:
                self._wait_lock.release()
                if self._user_waiting or self._watched:
                    with self._cond:  # (watched meanwhile: it is done now)
                        self._watched.pop(future.id, None)
                        self._cond.notify_all()
            if rows:
                if notify is not None:
                    notify._notify()
                return
            if timeout is not None:
                timeout = max(0.0, timeout - direct)
                if timeout == 0.0:
                    return
        self._collect([future], timeout, 1)

    @_reports_blocked
    def _collect(self, futures, timeout, min_done, completer=False):
        """Waits until `min_done` of `futures` finished or `timeout` passed.

        One thread at a time waits on the task table (a finished task is
        taken once): it waits for every thread's wanted futures and the
        watched ones (callbacks, as_completed, asyncio) at once, in rounds of
        at most _ROUND_S so that futures wanted later join, and delivers
        whatever finished; the other threads wait on the Condition. The
        completion thread (`completer`) steps aside while a user thread is
        in here (that one serves the watched futures too).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        mine = []  # registered in _wanted: when another thread collects
        with self._cond:
            if not completer:
                self._user_waiting += 1
        try:
            while self._collect_once(futures, deadline, min_done, completer,
                                     mine):
                pass
        finally:
            if not completer:
                with self._cond:
                    self._user_waiting -= 1
                    for f in mine:
                        entry = self._wanted.get(f.id)
                        if entry is None:
                            continue
                        if entry[1] <= 1:
                            del self._wanted[f.id]
                        else:
                            self._wanted[f.id] = (f, entry[1] - 1)

    def _collect_once(self, futures, deadline, min_done, completer, mine):
        """One round of _collect; whether to go on. The first time another
        thread holds the table, this one's futures go into _wanted (and
        into `mine`, for _collect to take them out again)."""
        with self._cond:
            done_states = _DONE_STATES
            waiting = [f for f in futures if f._state not in done_states]
            if len(futures) - len(waiting) >= min_done or not waiting:
                return False
            left = None if deadline is None else \
                max(0.0, deadline - time.monotonic())
            targets = {f.id: f for f in waiting if f.id is not None}
            need = min_done - (len(futures) - len(waiting))
            if self._wanted or self._watched:
                for task_id, entry in self._wanted.items():
                    if not _finished(entry[0]):
                        targets[task_id] = entry[0]
                for task_id, f in self._watched.items():
                    if not _finished(f):
                        targets[task_id] = f
                need = 1
            if (not targets or (completer and self._user_waiting) or
                    not self._wait_lock.acquire(False)):
                if not completer and not mine:
                    mine.extend(f for f in waiting if f.id is not None)
                    for f in mine:
                        entry = self._wanted.get(f.id)
                        self._wanted[f.id] = (f, 1 if entry is None
                                              else entry[1] + 1)
                if left == 0.0:
                    return False
                self._cond.wait(0.05 if left is None else min(left, 0.05))
                return not completer
        round_s = _ROUND_S if left is None else min(left, _ROUND_S)
        rows, notify = [], []
        try:
            rows = self._handle.wait(list(targets), round_s, need)
            for row in rows:
                f = _finish(targets[row[0]], row)
                if f is not None:
                    notify.append(f)
        finally:
            self._wait_lock.release()
            with self._cond:
                for row in rows:
                    self._watched.pop(row[0], None)
                self._cond.notify_all()
        for f in notify:
            f._notify()
        return not completer and left != 0.0 and (
            deadline is None or time.monotonic() < deadline)

    def _watch(self, future):
        """Delivers `future`'s completion without a caller waiting."""
        with self._cond:
            if future.id is None or future.id in self._watched:
                return
            self._watched[future.id] = future
            if self._completer is None or not self._completer.is_alive():
                self._completer = threading.Thread(
                    target=_complete_loop, args=(weakref.ref(self),),
                    name="shoal-completions", daemon=True)
                self._completer.start()
            self._cond.notify_all()

    def _forget(self, task_id):
        # From __del__: anything may be half torn down; just remember it.
        self._forgotten.append(task_id)

    def _release_forgotten(self):
        """Frees the table entries (and outputs) of dropped futures' tasks
        that finished; the others stay listed until a later sweep (sweeps
        come further apart while many stay, so a submit costs O(1)
        amortised)."""
        ids, self._forgotten = self._forgotten, []
        try:
            rows = self._handle.wait(ids, 0, 0)  # takes and frees them
        except _errors.Error:
            rows = []  # the node went away: nothing left to free
            ids = []
        done = {row[0] for row in rows}
        left = [i for i in ids if i not in done]
        self._forgotten.extend(left)
        self._sweep_at = max(_MIN_SWEEP, 2 * len(left))

    def _python_path(self):
        """This process's sys.path minus the interpreter's own folders (the
        worker has those): what a worker needs to import our modules. A long
        one is put into the store once and named by "@<object id>"; the
        object lives as long as this client (queued tasks may name it)."""
        if sys.path != self._path_key:  # (no copy when unchanged)
            key = list(sys.path)
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


def _complete_loop(client_ref):
    """The completion thread: delivers watched futures' completions while
    there are any; ends with its client."""
    while True:
        client = client_ref()
        if client is None:
            return
        with client._cond:
            for task_id in [i for i, f in client._watched.items()
                            if _finished(f)]:
                del client._watched[task_id]  # another thread took it
            if not client._watched:
                client._cond.wait(1.0)
                continue
            watched = list(client._watched.values())
        try:
            client._collect(watched, _COMPLETER_SLICE_S, 1, completer=True)
        except Exception as e:  # noqa: BLE001 (the node went away, ...)
            with client._cond:
                failed = list(client._watched.values())
                client._watched.clear()
            for f in failed:
                if not _finished(f) and f.set_running_or_notify_cancel():
                    f.set_exception(e)
        del client


def _results_in_order(futures, timeout, chunked):
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        for f in futures:
            left = None if deadline is None else \
                max(0.0, deadline - time.monotonic())
            if chunked:
                yield from f.result(left)
            else:
                yield f.result(left)
    finally:
        for f in futures:
            f.cancel()


def _value_of(x):
    return x.result() if isinstance(x, Future) else x


def _keep_also(keep, ref):
    if ref is None:
        return keep
    if keep is None:
        return [ref]
    keep.append(ref)
    return keep


_DEFAULT_OPTIONS = (0.0, -1, 1, 0)


def _task_options(options):
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


def _fingerprint(fn):
    """What rebinding would change: code, defaults, closure cells' values
    (by identity). A change inside an object the function refers to is not
    seen (as with Ray's remote functions, pickled once)."""
    f = getattr(fn, "__func__", fn)
    code = getattr(f, "__code__", None)
    cells = getattr(f, "__closure__", None) or ()
    try:
        values = tuple(id(c.cell_contents) for c in cells)
    except ValueError:  # an empty cell
        values = None
    return (id(code), id(getattr(f, "__defaults__", None)),
            id(getattr(f, "__kwdefaults__", None)), values,
            id(getattr(fn, "__self__", None)))


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


def task_name(fn, by_value_ok=False):
    """The task name of a function or name: "py:module:qualname" for Python
    functions a worker can import by name, C++ task names unchanged.

    For other callables (lambdas, closures, bound methods, callable objects,
    functions of `python -c` or an interactive session): None with
    `by_value_ok` (the caller sends them by value), else
    InvalidArgumentError."""
    if isinstance(fn, str):
        if fn.startswith("py:") or ":" not in fn:
            return fn
        return "py:" + fn
    try:
        name = _NAMES[fn]  # "" for a function that goes by value
    except (KeyError, TypeError):
        name = _importable_name(fn) or ""
        try:
            _NAMES[fn] = name
        except TypeError:
            pass
    if name or by_value_ok:
        return name or None
    raise _errors.InvalidArgumentError(
        f"{fn!r} cannot be imported by a worker by name")


def _importable_name(fn):
    """"py:module:qualname" if a worker importing that name gets `fn`."""
    if not isinstance(fn, (types.FunctionType, types.BuiltinFunctionType)):
        return None
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if not module or not qualname or "<" in qualname:
        return None
    owner = sys.modules.get(module)
    obj = owner
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    if obj is not fn:
        return None  # shadowed, decorated or rebound: by value
    if module == "__main__":
        try:
            module = _paths.main_module_name()
        except _errors.InvalidArgumentError:
            return None  # python -c, interactive: by value
    name = f"py:{module}:{qualname}"
    return name if len(name.encode()) <= 95 else None
