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
read-only); torch.from_dlpack(ref) shares the memory. See docs/python.md.
"""

from ._errors import (AbortedError, AlreadyExistsError, CancelledError,
                      Error, FailedPreconditionError, InternalError,
                      InvalidArgumentError, NotFoundError,
                      PermissionDeniedError, ResourceExhaustedError,
                      TaskError, TimeoutError, UnavailableError, UnknownError)
from ._store import ObjectRef, StoreArray, borrow, get, put
from ._client import Client, Future, connect, disconnect, submit, wait
from ._job import (Job, barrier, init, kv_add, kv_compare_and_set, kv_delete,
                   kv_get, kv_list, kv_set, kv_wait)
from ._collectives import (Communicator, Work, all_gather, all_reduce,
                           all_to_all, broadcast, new_group, recv, reduce,
                           reduce_scatter, send, world)
from ._node import Node, start_node
from . import task

__all__ = [
    "AbortedError", "AlreadyExistsError", "CancelledError", "Client",
    "Communicator", "Error", "FailedPreconditionError", "Future",
    "InternalError", "InvalidArgumentError", "Job", "Node", "NotFoundError",
    "ObjectRef", "PermissionDeniedError", "ResourceExhaustedError",
    "StoreArray", "TaskError", "TimeoutError", "UnavailableError",
    "UnknownError", "Work", "all_gather", "all_reduce", "all_to_all",
    "barrier", "borrow", "broadcast", "connect", "disconnect", "get", "init",
    "kv_add", "kv_compare_and_set", "kv_delete", "kv_get", "kv_list",
    "kv_set", "kv_wait", "new_group", "put", "recv", "reduce",
    "reduce_scatter", "send", "start_node", "submit", "task", "wait",
    "world",
]
