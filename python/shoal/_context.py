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

from . import _client, _errors, _ext, _job, _node, _store, _zero_copy

_lock = threading.Lock()
_client_now = None  # shoal.Client from connect()
_job_now = None  # shoal.Job from init()
# init() in task mode: one at a time (starting a node takes seconds), and
# the node it started, which shutdown() stops.
_init_lock = threading.Lock()
_started_node = None
# The most workers a node that init() starts gets by default.
DEFAULT_MAX_WORKERS = 16


# ---- the current client and job ------------------------------------------


def client():
    """The default Client, connecting to the node found the usual way."""
    if _client_now is None:
        connect()
    return _client_now


def job():
    """The Job of this launched process, joined on first use.

    Raises FailedPreconditionError when not started by shoal launch."""
    global _job_now
    with _lock:
        if _job_now is None:
            _job_now = _job.Job(_ext.ext().Job.init())
        return _job_now


def _default_store():
    """The Store put/get go through: the job's under `shoal launch`, else the
    default client's."""
    if _job_now is not None:
        return _job_now._handle.store
    if _client_now is None and os.environ.get("SHOAL_KV_ENDPOINT"):
        return job()._handle.store
    return client()._handle.store


# ---- task mode --------------------------------------------------------------


def connect(endpoint=None, *, job_id=None, force_remote=False, name=None):
    """Connects to a node and makes it this process's default.

    endpoint: the coordinator's tcp://host:port; default $SHOAL_COORDINATOR,
    else the discovery file of job_id / $SHOAL_JOB_ID / the node started last
    on this machine. A client on the node's machine uses shared memory for
    tasks and the store; elsewhere it goes through the coordinator.
    """
    global _client_now
    handle = _ext.ext().Client.connect(endpoint or "", job_id or "",
                                       name or "", force_remote)
    new = _client.Client(handle)
    if handle.local:  # large numpy arrays made from now on: in the store
        _zero_copy.enable(handle.store)
    with _lock:
        _client_now = new
    return new


def disconnect():
    """Drops the default client (its unfinished tasks are freed)."""
    global _client_now
    with _lock:
        old, _client_now = _client_now, None
    if old is not None and old.local:
        _zero_copy.disable(old._handle.store)


def submit(fn, *args, _options=None, **kwargs):
    """Client.submit on the default client (connecting if needed): queues
    fn(*args, **kwargs); task options as the dict `_options`."""
    return client()._submit_call(fn, args, kwargs, _options)


def cancel(future, *, force=False):
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


def map(fn, *iterables, chunksize=1, timeout=None, progress=False,  # noqa: A001
        _options=None):
    """Client.map on the default client: fn(*items) for each zip of the
    iterables, results in order; progress=True shows a tqdm bar."""
    return client().map(fn, *iterables, chunksize=chunksize, timeout=timeout,
                        progress=progress, _options=_options)


def wait(futures, timeout=None, num_returns=None):
    """Waits for futures of the default client: (done, pending)."""
    futures = list(futures)
    if not futures:
        return [], []
    return futures[0]._client.wait(futures, timeout, num_returns)


# ---- launch mode ------------------------------------------------------------


def init(address=None, *, job_id=None, num_workers=None,
         store_bytes="512M"):
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


def _connect_or_start(address, job_id, num_workers, store_bytes):
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


def shutdown():
    """ray.shutdown(): drops the default client and stops the node init()
    started, if any (a node it connected to keeps running). Under `shoal
    launch` the job stays joined (its processes end with the job)."""
    global _started_node
    with _init_lock:
        disconnect()
        node, _started_node = _started_node, None
    if node is not None:
        node.stop()


def is_initialized():
    """Whether this process has a default client or a joined job."""
    return _client_now is not None or _job_now is not None


def kv_set(key, value):
    job().kv_set(key, value)


def kv_get(key, timeout=0):
    return job().kv_get(key, timeout)


def kv_add(key, delta=1):
    return job().kv_add(key, delta)


def kv_compare_and_set(key, expected, desired):
    return job().kv_compare_and_set(key, expected, desired)


def kv_delete(key):
    return job().kv_delete(key)


def kv_list(prefix=""):
    return job().kv_list(prefix)


def kv_wait(keys, timeout=None):
    job().kv_wait(keys, timeout)


def barrier(timeout=_job.DEFAULT_BARRIER_TIMEOUT):
    """Job.barrier on this process's job."""
    job().barrier(timeout)


# ---- the store, in both modes -----------------------------------------------


def put(obj, *, dtype=None):
    """Copies an array (numpy, torch CPU tensor, anything with the buffer
    protocol or __dlpack__) into the store; returns its ObjectRef. Any
    other picklable object is pickled into the store: a ValueRef, whose
    shoal.get is the object (its arrays read-only views of the store).

    `dtype` ("bf16", ...) reinterprets elements of the same size.
    """
    return _store.put_into(_default_store(), obj, dtype)


_UNSET = object()


def get(ref, *, timeout=_UNSET):
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


def borrow(object_id, *, timeout=0):
    """An ObjectRef to another process's object (by id), held by this one."""
    return _default_store().get(str(object_id), timeout)


def _borrow(object_id):
    """Unpickles an ObjectRef in a process on the same node (ObjectRef's
    __reduce__, python/ext/store.cc, names this function)."""
    return borrow(object_id)
