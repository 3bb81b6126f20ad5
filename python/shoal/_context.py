"""The process's default connection — the one module that owns global state.

It holds the current Client (task mode: connect) and Job (launch mode:
init), makes them on first use when the caller did not, and carries the
module-level API that works on them: shoal.connect / submit / wait, shoal.init
(a node to connect to, or one it starts, as ray.init does; the job under
`shoal launch`) / shutdown / kv_* / barrier, shoal.put / get / borrow. The classes it hands out live in
_client, _job and _store, which know nothing of this module (see the module
graph in __init__.py).
"""

import os
import threading
from typing import (Any, Callable, Iterable, Iterator, Mapping, Optional,
                    Sequence, TypeVar, Union, overload)

from . import _client, _errors, _ext, _job, _node, _store, _zero_copy
from ._client import Client, Future
from ._job import Job
from ._store import ObjectRef, ValueRef

_T = TypeVar("_T")

_lock = threading.Lock()
_client_now: Optional[Client] = None  # shoal.Client from connect()
_job_now: Optional[Job] = None  # shoal.Job from init()
# init() in task mode: one at a time (starting a node takes seconds), and
# the node it started, which shutdown() stops.
_init_lock = threading.Lock()
_started_node: Optional[_node.Node] = None
# The most workers a node that init() starts gets by default.
DEFAULT_MAX_WORKERS = 16


# ---- the current client and job ------------------------------------------


def client() -> Client:
    """The default Client, connecting to the node found the usual way."""
    c = _client_now
    if c is None:
        c = connect()
    return c


def job() -> Job:
    """The Job of this launched process, joined on first use.

    Raises FailedPreconditionError when not started by shoal launch."""
    global _job_now
    with _lock:
        if _job_now is None:
            _job_now = _job.Job(_ext.ext().Job.init())
        return _job_now


def _default_store() -> Any:
    """The Store put/get go through: the job's under `shoal launch`, else the
    default client's."""
    if _job_now is not None:
        return _job_now._handle.store
    if _client_now is None and os.environ.get("SHOAL_KV_ENDPOINT"):
        return job()._handle.store
    return client()._handle.store


# ---- task mode --------------------------------------------------------------


def connect(endpoint: Optional[str] = None, *, job_id: Optional[str] = None,
            force_remote: bool = False, name: Optional[str] = None) -> Client:
    """Connects to a node and makes it this process's default; returns its
    Client.

    endpoint: the coordinator's tcp://host:port; default $SHOAL_COORDINATOR,
    else the discovery file of job_id / $SHOAL_JOB_ID / the node started last
    on this machine. A client on the node's machine uses shared memory for
    tasks and the store; elsewhere it goes through the coordinator.
    force_remote: go through the coordinator even on the node's machine.
    name: this client's name in the node's status.

    Raises NotFoundError when no node is found, UnavailableError when the
    node does not answer.
    """
    global _client_now
    handle = _ext.ext().Client.connect(endpoint or "", job_id or "",
                                       name or "", force_remote)
    new = _client.Client(handle)
    new._endpoint = endpoint or ""  # where its other connections go
    if handle.local:  # large numpy arrays made from now on: in the store
        _zero_copy.enable(handle.store)
    with _lock:
        _client_now = new
    return new


def disconnect() -> None:
    """Drops the default client (its unfinished tasks are freed)."""
    global _client_now
    with _lock:
        old, _client_now = _client_now, None
    if old is not None and old.local:
        _zero_copy.disable(old._handle.store)


@overload
def submit(fn: Callable[..., _T], *args: Any,
           _options: Optional[Mapping[str, Any]] = None,
           **kwargs: Any) -> Future[_T]: ...
@overload
def submit(fn: str, *args: Any, _options: Optional[Mapping[str, Any]] = None,
           **kwargs: Any) -> Future[Any]: ...


def submit(fn: Union[Callable[..., Any], str], *args: Any,
           _options: Optional[Mapping[str, Any]] = None,
           **kwargs: Any) -> Future[Any]:
    """Client.submit on the default client (connecting if needed): queues
    fn(*args, **kwargs); task options as the dict `_options`. Returns the
    task's Future."""
    return client()._submit_call(fn, args, kwargs, _options)


def cancel(future: "Future[Any]", *, force: bool = False) -> bool:
    """Cancels a task, as ray.cancel: a queued one never runs; a running one
    sees shoal.task.cancelled(). force=True also stops a running task that
    never looks: shoal.task.TaskCancelledError is raised in it (stopping
    pure-Python code), and if it still runs after the node's grace period
    (SHOAL_FORCE_CANCEL_GRACE_MS, 2 s) its worker is killed and replaced.
    Either way future.result() raises CancelledError. Returns whether the
    task had not finished. force needs a client on the node's machine run by
    its owner (elsewhere: a plain cancel, with a warning); an actor's calls
    are never forced (its process holds the actor's state)."""
    return future.cancel(force=force) if force else future.cancel()


@overload
def map(fn: Callable[..., _T], *iterables: Iterable[Any],  # noqa: A001
        chunksize: int = ..., timeout: Optional[float] = ...,
        progress: bool = ...,
        _options: Optional[Mapping[str, Any]] = ...) -> Iterator[_T]: ...
@overload
def map(fn: str, *iterables: Iterable[Any],  # noqa: A001
        chunksize: int = ..., timeout: Optional[float] = ...,
        progress: bool = ...,
        _options: Optional[Mapping[str, Any]] = ...) -> Iterator[Any]: ...


def map(fn: Union[Callable[..., Any], str],  # noqa: A001
        *iterables: Iterable[Any], chunksize: int = 1,
        timeout: Optional[float] = None, progress: bool = False,
        _options: Optional[Mapping[str, Any]] = None) -> Iterator[Any]:
    """Client.map on the default client: fn(*items) for each zip of the
    iterables, results in order; progress=True shows a tqdm bar."""
    return client().map(fn, *iterables, chunksize=chunksize, timeout=timeout,
                        progress=progress, _options=_options)


def wait(futures: Iterable[Future[_T]], timeout: Optional[float] = None,
         num_returns: Optional[int] = None
         ) -> tuple[list[Future[_T]], list[Future[_T]]]:
    """Client.wait on the futures' client: waits until `num_returns`
    (default: all) of `futures` finished or `timeout` seconds passed (None:
    no limit). Returns (done, pending) lists."""
    listed = list(futures)
    if not listed:
        return [], []
    return listed[0]._client.wait(listed, timeout, num_returns)


# ---- launch mode ------------------------------------------------------------


def init(address: Optional[str] = None, *, job_id: Optional[str] = None,
         num_workers: Optional[int] = None,
         store_bytes: Union[str, int] = "512M") -> Union[Client, Job]:
    """ray.init(): this process's connection to shoal (idempotent).

    Under `shoal launch` (and with no address or job_id): joins the job and
    returns its Job. Elsewhere, task mode, returns the default Client,
    connected to the first of: `address` (a coordinator's tcp://host:port,
    or "auto": the node started last on this machine, which must exist),
    `job_id`, $SHOAL_COORDINATOR, $SHOAL_JOB_ID, the node started last on
    this machine; when none of those names one and no node was started
    here, it starts a node (`num_workers` workers, default the CPUs this
    process may use, at most DEFAULT_MAX_WORKERS; `store_bytes`) that stops
    with this process or at shutdown().
    """
    if (address is None and job_id is None and
            os.environ.get("SHOAL_KV_ENDPOINT")):
        return job()
    with _init_lock:
        if _client_now is not None and address is None and job_id is None:
            return _client_now
        return _connect_or_start(address, job_id, num_workers, store_bytes)


def _connect_or_start(address: Optional[str], job_id: Optional[str],
                      num_workers: Optional[int],
                      store_bytes: Union[str, int]) -> Client:
    global _started_node
    if address == "auto":
        return connect()
    if (address or job_id or os.environ.get("SHOAL_COORDINATOR") or
            os.environ.get("SHOAL_JOB_ID")):
        return connect(address, job_id=job_id)
    try:
        return connect()  # the node started last on this machine
    except (_errors.NotFoundError, _errors.UnavailableError):
        pass  # none, or its discovery file outlived it
    if num_workers is None:
        num_workers = min(len(os.sched_getaffinity(0)), DEFAULT_MAX_WORKERS)
    node = _node.start_node(num_workers, store_bytes=store_bytes)
    try:
        c = connect(job_id=node.job_id)
    except BaseException:
        node.stop()
        raise
    _started_node = node
    return c


def shutdown() -> None:
    """ray.shutdown(): drops the default client and stops the node init()
    started, if any (a node it connected to keeps running). Under `shoal
    launch` the job stays joined (its processes end with the job)."""
    global _started_node
    with _init_lock:
        disconnect()
        node, _started_node = _started_node, None
    if node is not None:
        node.stop()


def is_initialized() -> bool:
    """Whether this process has a default client or a joined job."""
    return _client_now is not None or _job_now is not None


def kv_set(key: str, value: Union[str, bytes]) -> None:
    """Job.kv_set on this process's job."""
    job().kv_set(key, value)


def kv_get(key: str, timeout: Optional[float] = 0) -> bytes:
    """Job.kv_get on this process's job."""
    return job().kv_get(key, timeout)


def kv_add(key: str, delta: int = 1) -> int:
    """Job.kv_add on this process's job."""
    return job().kv_add(key, delta)


def kv_compare_and_set(key: str, expected: Optional[Union[str, bytes]],
                       desired: Union[str, bytes]) -> bool:
    """Job.kv_compare_and_set on this process's job."""
    return job().kv_compare_and_set(key, expected, desired)


def kv_delete(key: str) -> bool:
    """Job.kv_delete on this process's job."""
    return job().kv_delete(key)


def kv_list(prefix: str = "") -> dict[str, bytes]:
    """Job.kv_list on this process's job."""
    return job().kv_list(prefix)


def kv_wait(keys: Union[str, Iterable[str]],
            timeout: Optional[float] = None) -> None:
    """Job.kv_wait on this process's job."""
    job().kv_wait(keys, timeout)


def barrier(timeout: Optional[float] = _job.DEFAULT_BARRIER_TIMEOUT) -> None:
    """Job.barrier on this process's job."""
    job().barrier(timeout)


# ---- the store, in both modes -----------------------------------------------


def put(obj: Any, *,
        dtype: Optional[str] = None) -> Union[ObjectRef, ValueRef]:
    """Copies an array (numpy, torch CPU tensor, anything with the buffer
    protocol or __dlpack__) into the store; returns its ObjectRef. Any
    other picklable object is pickled into the store: a ValueRef, whose
    shoal.get is the object (its arrays read-only views of the store).

    `dtype` ("bf16", ...) reinterprets elements of the same size.
    """
    return _store.put_into(_default_store(), obj, dtype)


_UNSET: Any = object()


@overload
def get(ref: Future[_T], *, timeout: Optional[float] = ...) -> _T: ...
@overload
def get(ref: Union[list[Any], tuple[Any, ...]], *,
        timeout: Optional[float] = ...) -> list[Any]: ...
@overload
def get(ref: Any, *, timeout: Optional[float] = ...) -> Any: ...


def get(ref: Any, *, timeout: Optional[float] = _UNSET) -> Any:
    """A read-only numpy view (StoreArray) of a store object — no copy; a
    ValueRef's object; a Future's value; or for a list or tuple of those,
    their values in order.

    `ref` is an ObjectRef, or an object id (hex) made by another process on
    this node; then get waits up to `timeout` seconds (default 0; None:
    forever) for it to appear. A Future is waited for up to `timeout`
    (default: until it finished) and raises what its task raised. bf16
    objects come out as uint16 (use torch.from_dlpack(ref)); raw byte
    objects as uint8.
    """
    if isinstance(ref, (list, tuple)):
        return [get(r, timeout=timeout) for r in ref]
    if isinstance(ref, _client.Future):
        return ref.result(None if timeout is _UNSET else timeout)
    return _store.get_from(_default_store, ref,
                           0 if timeout is _UNSET else timeout)


def borrow(object_id: str, *, timeout: Optional[float] = 0) -> ObjectRef:
    """An ObjectRef to another process's object (by id, a hex str), held by
    this one; waits up to `timeout` seconds (None: forever) for it to
    appear. Raises NotFoundError / TimeoutError when it does not."""
    return _default_store().get(str(object_id), timeout)


def _borrow(object_id: str) -> ObjectRef:
    """Unpickles an ObjectRef in a process on the same node (ObjectRef's
    __reduce__, python/ext/store.cc, names this function)."""
    return borrow(object_id)
