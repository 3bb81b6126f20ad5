"""The process's default connection — the one module that owns global state.

It holds the current Client (task mode: connect) and Job (launch mode:
init), makes them on first use when the caller did not, and carries the
module-level API that works on them: shoal.connect / submit / wait, shoal.init
/ kv_* / barrier, shoal.put / get / borrow. The classes it hands out live in
_client, _job and _store, which know nothing of this module (see the module
graph in __init__.py).
"""

import os
import threading

from . import _client, _ext, _job, _store, _zero_copy

_lock = threading.Lock()
_client_now = None  # shoal.Client from connect()
_job_now = None  # shoal.Job from init()


# ---- the current client and job ------------------------------------------


def client():
    """The default Client, connecting to the node found the usual way."""
    if _client_now is None:
        connect()
    return _client_now


def job():
    """The Job of this launched process (shoal.init() if not yet called)."""
    return init()


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


def wait(futures, timeout=None, num_returns=None):
    """Waits for futures of the default client: (done, pending)."""
    futures = list(futures)
    if not futures:
        return [], []
    return futures[0]._client.wait(futures, timeout, num_returns)


# ---- launch mode ------------------------------------------------------------


def init():
    """Joins the job `shoal launch` started this process in (idempotent).

    Raises FailedPreconditionError when not started by shoal launch.
    """
    global _job_now
    with _lock:
        if _job_now is None:
            _job_now = _job.Job(_ext.ext().Job.init())
        return _job_now


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
