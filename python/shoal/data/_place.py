"""Where a loader's workers run and its dataset lives: the node this
process is connected to, else a node of the loader's own
(shoal.start_node, stopped at exit), else under `shoal launch` one node per
machine that the machine's ranks share (docs/data.md)."""

import atexit
import io
import itertools
import os
from typing import Any, Callable, Optional

from .. import _context, _ext, _node, _zero_copy
from .. import _client
from . import _share

# Nodes this process started for loaders, stopped at exit.
_OWN_NODES: list[_node.Node] = []


def _stop_own_nodes() -> None:
    for node in _OWN_NODES:
        try:
            node.stop()
        except Exception:  # noqa: BLE001 (best effort at exit)
            pass


atexit.register(_stop_own_nodes)


def _data_bytes(dataset: Any) -> int:
    """The bytes of the dataset's out-of-band buffers (a pickling pass that
    copies none of them)."""
    total = [0]

    def count(b: Any) -> bool:
        try:
            total[0] += b.raw().nbytes
        except BufferError:
            return True
        return False

    _share._pickler()(io.BytesIO(), 5, buffer_callback=count).dump(dataset)
    return total[0]


def _private_client(job_id: str) -> _client.Client:
    """A Client of node `job_id` that is not the process's default (large
    numpy allocations of the program stay in its own memory)."""
    handle = _ext.ext().Client.connect("", job_id, "", False)
    return _client.Client(handle)


class _Placement:
    """Where a loader's workers run and its dataset lives."""

    def __init__(self, client: _client.Client, shared: _share.SharedDataset,
                 closer: Optional[Callable[[], None]] = None) -> None:
        self.client = client
        self.shared = shared
        self.closer = closer


_LOADERS_MADE = itertools.count()


def place(dataset: Any, store_bytes: Optional[float]) -> _Placement:
    """The client whose node runs the workers, and the dataset shared in
    its store."""
    if _context._client_now is not None and _context._client_now.local:
        client = _context._client_now
        snapshot = _zero_copy.snapshot if _zero_copy.active else None
        return _Placement(client, _share.share(dataset, client.put, snapshot))
    if os.environ.get("SHOAL_KV_ENDPOINT"):
        return _place_launched(dataset, store_bytes)
    node = _start_node(dataset, store_bytes)
    client = _private_client(node.job_id)
    return _Placement(client, _share.share(dataset, client.put))


_LAUNCH_ENV = frozenset([
    "GROUP_RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
    "MASTER_PORT", "RANK", "SHOAL_JOB_ID", "SHOAL_KV_ENDPOINT",
    "SHOAL_KV_SECRET_FILE", "SHOAL_NNODES", "SHOAL_RESTART_COUNT",
    "SHOAL_STORE_ENDPOINT", "WORLD_SIZE", "SHOAL_COORDINATOR"])


def _start_node(dataset: Any, store_bytes: Optional[float]) -> _node.Node:
    if store_bytes is None:
        store_bytes = _data_bytes(dataset) * 1.05 + (512 << 20)
    # The node's workers are not ranks of a launched job this process may be.
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCH_ENV}
    env.setdefault("SHOAL_LOG_LEVEL", "error")  # workers' ends are expected
    node = _node.start_node(1, store_bytes=str(int(store_bytes)), env=env)
    _OWN_NODES.append(node)
    return node


def _place_launched(dataset: Any,
                    store_bytes: Optional[float]) -> _Placement:
    """Under `shoal launch`: local rank 0 of each machine starts one node,
    puts the dataset there and publishes both in the job's key-value store;
    the machine's other ranks use that node and that one copy."""
    import pickle
    job = _context.job()
    n = next(_LOADERS_MADE)
    key = f"shoal.data/{job.node_rank}/{n}"
    if job.local_rank == 0:
        node = _start_node(dataset, store_bytes)
        client = _private_client(node.job_id)
        shared = _share.share(dataset, client.put)
        job.kv_set(key, pickle.dumps(
            (node.job_id, shared.header if isinstance(shared.header, bytes)
             else shared.header.id,
             [(r.id, o, ln) for r, o, ln in shared.pieces], shared.nbytes)))

        def closer() -> None:
            # The node (and the dataset) stay until every local rank closed.
            try:
                job.kv_wait([f"{key}/closed/{r}"
                             for r in range(1, job.local_world_size)], 300)
            except Exception:  # noqa: BLE001 (a rank that died)
                pass
        return _Placement(client, shared, closer)
    node_id, header, pieces, nbytes = pickle.loads(job.kv_get(key, 300))
    client = _private_client(node_id)
    store = client._handle.store
    refs: dict[str, Any] = {}

    def borrow(oid: str) -> Any:
        if oid not in refs:
            refs[oid] = store.get(oid, 60)
        return refs[oid]

    shared = _share.SharedDataset(
        header if isinstance(header, bytes) else borrow(header),
        [(borrow(oid), o, ln) for oid, o, ln in pieces], nbytes)

    def closer() -> None:  # type: ignore[no-redef]
        job.kv_set(f"{key}/closed/{job.local_rank}", b"1")
    return _Placement(client, shared, closer)
