"""shoal for Python.

Task mode (a node started with `shoal start`):

    import shoal
    shoal.connect()                          # the node started last here
    f = shoal.submit(mymodule.train_step, batch)
    print(f.result(timeout=60))

Launch mode (`shoal launch --nproc-per-node 2 -- python train.py`):

    job = shoal.init()
    shoal.all_reduce(grad)                   # numpy arrays or torch tensors

The store, in both: ref = shoal.put(array); view = shoal.get(ref) (zero-copy,
read-only); torch.from_dlpack(ref) shares the memory. shoal.put(obj) of any
other picklable object gives a ValueRef; shoal.get unpickles it, its arrays
viewing the store. See docs/python.md.

Modules, each importing only modules below it (a DAG: no import hides in a
function to dodge a cycle); the arrows name its imports besides _errors:

    __init__       the public names
    _collectives   Communicator, all_reduce, ...        → _context, _ext
    _remote        @shoal.remote: RemoteFunction (retry_exceptions,
                   num_returns, generators)
                   → _actor, _context, _ext, _future, _naming, _retry,
                     _stream
    _stream        generator tasks: StreamingFutures (caller), produce
                   (worker)                               → _future
    _retry         retry_exceptions, run in the worker   (no shoal imports)
    _actor         actor classes, handles, kill; the actor
                   worker's _init/_call                 → _context, _ext
    _node          start_node: `shoal start` as a child → _client, _paths
    _context       THE global state: the current Client and Job, made on
                   first use; connect/submit/wait/cancel/map, init
                   (connects to or starts a node; the job under
                   launch)/shutdown, kv_*/barrier, put/get/borrow
                                → _client, _job, _node, _store, _ext
    _client        Client (task mode): submitting, map, forced cancels
                   → _collector, _naming, _future, _paths, _progress,
                     _serialize, _store, _ext
    _collector     Collector, the Client's completions half: result(),
                   waits, the completion thread           → _future
    _naming        task names of functions, the worker's search path,
                   by-value fingerprints                  → _paths
    _future        Future, and its completion from a task's row
                                                        → _serialize
    _job           Job (launch mode)                    → _store
    _store         put_into/get_from on a Store (the one put/get),
                   ObjectRef, StoreArray, ValueRef      → _ext, _serialize
    _ext           the C++ extension _shoal (absent in a worker); at call
                   time, not import time, it looks up _errors.from_status
                   (to raise) and _context._borrow (to unpickle an ObjectRef)
    _paths         the shoal binary, __main__'s name, a node's
                   coordinator pid
    _progress      tqdm bars of map, as_completed       (no shoal imports)
    _timeline      span, timeline: this process's ring, a job's trace
                                 → _context, _ext, _paths
    _errors        Error and its subclasses, TaskError  (no shoal imports)
    _version       __version__, generated from VERSION by Bazel
    task           shoal.task, for code running as a task
    bench          `python -m shoal_bench` (and _bench_tasks): on the public API
"""

from ._version import __version__
from ._errors import (AbortedError, ActorDiedError, AlreadyExistsError,
                      CancelledError, DataLossError,
                      Error, FailedPreconditionError, InternalError,
                      InvalidArgumentError, NotFoundError, OutOfRangeError,
                      PermissionDeniedError, ResourceExhaustedError,
                      TaskError, TimeoutError, UnauthenticatedError,
                      UnavailableError, UnimplementedError, UnknownError)
from ._store import ObjectRef, StoreArray, ValueRef
from ._client import Client, Future
from ._job import Job
from ._context import (barrier, borrow, cancel, connect, disconnect, get,
                       init, is_initialized, kv_add, kv_compare_and_set,
                       kv_delete, kv_get, kv_list, kv_set, kv_wait, map, put,
                       shutdown, submit, wait)
from ._progress import as_completed
from ._collectives import (Communicator, Work, all_gather, all_reduce,
                           all_to_all, broadcast, new_group, recv, reduce,
                           reduce_scatter, send, world)
from ._node import Node, start_node
from ._actor import ActorHandle, get_actor, kill
from ._remote import remote
from ._timeline import span, timeline
from . import task

__all__ = [
    "AbortedError", "ActorDiedError", "ActorHandle", "AlreadyExistsError",
    "CancelledError", "Client", "Communicator", "DataLossError", "Error",
    "FailedPreconditionError", "Future", "InternalError",
    "InvalidArgumentError", "Job", "Node", "NotFoundError", "ObjectRef",
    "OutOfRangeError", "PermissionDeniedError", "ResourceExhaustedError",
    "StoreArray", "TaskError", "TimeoutError", "UnauthenticatedError",
    "UnavailableError", "UnimplementedError", "UnknownError",
    "ValueRef", "Work", "all_gather", "all_reduce", "all_to_all",
    "as_completed", "barrier", "borrow", "broadcast", "cancel", "connect", "disconnect", "get", "get_actor", "init",
    "is_initialized", "kv_add", "kv_compare_and_set", "kv_delete", "kv_get",
    "kv_list", "kv_set", "kv_wait", "kill", "map", "new_group", "put", "recv",
    "reduce", "reduce_scatter", "remote", "send", "shutdown", "span",
    "start_node", "submit", "task", "timeline", "wait", "world"
]
