"""shoal.data.DataLoader: torch's DataLoader over shoal's workers and store.

The consumer (this process) iterates the sampler exactly as torch's
DataLoader does (torch's samplers and generator when torch is importable,
the same draw of the workers' base seed first) and hands each batch's
indices to worker `i % num_workers` in turn, at most
prefetch_factor × num_workers batches ahead. The workers are actors
(_worker.LoaderWorker) of a shoal node: the one this process is connected
to, else a node of the loader's own (shoal.start_node), else under
`shoal launch` one node per machine that the machine's ranks share. The
dataset goes into that node's store once (_share.py); every worker reads its
arrays in place. A batch is the worker's task result: its large arrays are
store objects the consumer views without a copy, freed when dropped.
"""

import atexit
import collections
import itertools
import os
import sys
import threading
import weakref

from .. import _actor, _client, _context, _errors, _ext, _node, _zero_copy
from . import _collate, _samplers, _share, _worker

try:
    import torch
    import torch.utils.data as _tud
except ImportError:
    torch = None
    _tud = None

_DEFAULT = "shoal.data:default-collate"
_CONVERT = "shoal.data:default-convert"


def _is_iterable_dataset(dataset):
    if _tud is not None:
        return isinstance(dataset, _tud.IterableDataset)
    return hasattr(dataset, "__iter__") and not hasattr(dataset,
                                                        "__getitem__")


def default_collate(batch):
    """torch's default_collate with torch, else shoal's numpy counterpart."""
    if _tud is not None:
        return _tud.default_collate(batch)
    return _collate.numpy_collate(batch)


def default_convert(data):
    if _tud is not None:
        return _tud.default_convert(data)
    return _collate.numpy_convert(data)


def _worker_collate(kind):
    """The collate a worker runs for the default collate: numpy's (then the
    consumer makes tensors of its arrays) while the worker has not imported
    torch and the samples are plain numpy values, else torch's."""
    def collate(batch):
        sample = batch[0] if kind == _DEFAULT and batch else batch
        if "torch" not in sys.modules and _collate.plain(sample):
            return (_collate.numpy_collate(batch) if kind == _DEFAULT
                    else batch)
        import torch.utils.data as tud
        return (tud.default_collate(batch) if kind == _DEFAULT
                else tud.default_convert(batch))
    return collate


# ---- the node the workers run on ------------------------------------------

_OWN_NODES = []  # nodes this process started for loaders, stopped at exit


def _stop_own_nodes():
    for node in _OWN_NODES:
        try:
            node.stop()
        except Exception:  # noqa: BLE001 (best effort at exit)
            pass


atexit.register(_stop_own_nodes)


def _data_bytes(dataset):
    """The bytes of the dataset's out-of-band buffers (a pickling pass that
    copies none of them)."""
    total = [0]

    def count(b):
        try:
            total[0] += b.raw().nbytes
        except BufferError:
            return True
        return False

    import io
    _share._pickler()(io.BytesIO(), 5, buffer_callback=count).dump(dataset)
    return total[0]


def _private_client(job_id):
    """A Client of node `job_id` that is not the process's default (large
    numpy allocations of the program stay in its own memory)."""
    handle = _ext.ext().Client.connect("", job_id, "", False)
    return _client.Client(handle)


class _Placement:
    """Where a loader's workers run and its dataset lives."""

    def __init__(self, client, shared, closer=None):
        self.client = client
        self.shared = shared
        self.closer = closer


_LOADERS_MADE = itertools.count()


def _place(dataset, store_bytes):
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


def _start_node(dataset, store_bytes):
    if store_bytes is None:
        store_bytes = _data_bytes(dataset) * 1.05 + (512 << 20)
    # The node's workers are not ranks of a launched job this process may be.
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCH_ENV}
    env.setdefault("SHOAL_LOG_LEVEL", "error")  # workers' ends are expected
    node = _node.start_node(1, store_bytes=str(int(store_bytes)), env=env)
    _OWN_NODES.append(node)
    return node


def _place_launched(dataset, store_bytes):
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

        def closer():
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
    refs = {}

    def borrow(oid):
        if oid not in refs:
            refs[oid] = store.get(oid, 60)
        return refs[oid]

    shared = _share.SharedDataset(
        header if isinstance(header, bytes) else borrow(header),
        [(borrow(oid), o, ln) for oid, o, ln in pieces], nbytes)

    def closer():
        job.kv_set(f"{key}/closed/{job.local_rank}", b"1")
    return _Placement(client, shared, closer)


# ---- the loader -------------------------------------------------------------

class DataLoader:
    """torch.utils.data.DataLoader's signature and semantics, with shoal's
    workers and store (docs/data.md).

    Beyond torch's arguments: `store_bytes`, the store size of a node the
    loader starts itself (default: the dataset's bytes + 512 MiB).
    `multiprocessing_context` is accepted and ignored (workers are shoal's
    processes, never forked from this one).
    """

    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None,
                 batch_sampler=None, num_workers=0, collate_fn=None,
                 pin_memory=False, drop_last=False, timeout=0,
                 worker_init_fn=None, multiprocessing_context=None,
                 generator=None, *, prefetch_factor=2,
                 persistent_workers=False, pin_memory_device="",
                 store_bytes=None):
        if num_workers < 0:
            raise ValueError("num_workers option should be non-negative; "
                             "use num_workers=0 to disable multiprocessing.")
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        if num_workers == 0 and prefetch_factor != 2:
            raise ValueError("prefetch_factor option could only be specified "
                             "in multiprocessing.let num_workers > 0 to "
                             "enable multiprocessing.")
        if prefetch_factor < 1:
            raise ValueError("prefetch_factor must be at least 1")
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers "
                             "> 0")
        self.dataset = dataset
        self.num_workers = num_workers
        self.prefetch_factor = prefetch_factor
        self.pin_memory = pin_memory
        self.pin_memory_device = pin_memory_device
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.persistent_workers = persistent_workers
        self.store_bytes = store_bytes
        self._iterable = _is_iterable_dataset(dataset)
        if self._iterable:
            if shuffle not in {False, None}:
                raise ValueError(
                    "DataLoader with IterableDataset: expected unspecified "
                    f"shuffle option, but got shuffle={shuffle}")
            if sampler is not None:
                raise ValueError(
                    "DataLoader with IterableDataset: expected unspecified "
                    f"sampler option, but got sampler={sampler}")
            if batch_sampler is not None:
                raise ValueError(
                    "DataLoader with IterableDataset: expected unspecified "
                    f"batch_sampler option, but got "
                    f"batch_sampler={batch_sampler}")
        else:
            shuffle = bool(shuffle)
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with "
                             "shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or \
                    drop_last:
                raise ValueError("batch_sampler option is mutually exclusive "
                                 "with batch_size, shuffle, sampler, and "
                                 "drop_last")
            batch_size = None
            drop_last = False
        elif batch_size is None and drop_last:
            raise ValueError("batch_size=None option disables auto-batching "
                             "and is mutually exclusive with drop_last")
        if sampler is None and not self._iterable:
            if shuffle:
                sampler = _samplers.RandomSampler(dataset,
                                                  generator=generator)
            else:
                sampler = _samplers.SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None and \
                not self._iterable:
            batch_sampler = _samplers.BatchSampler(sampler, batch_size,
                                                   drop_last)
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.generator = generator
        self._auto_collation = batch_size is not None if self._iterable \
            else batch_sampler is not None
        self._user_collate = collate_fn is not None
        if collate_fn is None:
            collate_fn = default_collate if self._auto_collation \
                else default_convert
        self.collate_fn = collate_fn
        self._placement = None
        self._pool = None  # [ActorHandle] of persistent workers
        self._base_seed = None
        self._epoch = 0
        self._lock = threading.Lock()

    # -- torch's attributes ---------------------------------------------------

    @property
    def _index_sampler(self):
        return self.batch_sampler if self._auto_collation else self.sampler

    def __len__(self):
        if self._iterable:
            n = len(self.dataset)
            if self.batch_size is not None:
                import math
                n = (n // self.batch_size if self.drop_last
                     else math.ceil(n / self.batch_size))
            return n
        return len(self._index_sampler)

    # -- iteration --------------------------------------------------------------

    def _draw_base_seed(self):
        if torch is not None:
            return torch.empty((), dtype=torch.int64).random_(
                generator=self.generator).item()
        import random
        return random.getrandbits(63)

    def __iter__(self):
        if self.num_workers == 0:
            return _SingleProcessIter(self)
        if self.persistent_workers and self._pool is not None:
            return _MultiWorkerIter(self, self._pool, persistent=True)
        self._base_seed = self._draw_base_seed()
        pool = self._make_workers(self._base_seed)
        if self.persistent_workers:
            self._pool = pool
        return _MultiWorkerIter(self, pool, persistent=self.persistent_workers)

    def _placed(self):
        with self._lock:
            if self._placement is None:
                self._placement = _place(self.dataset, self.store_bytes)
            return self._placement

    def _spec(self):
        if self._user_collate:
            collate = self.collate_fn
        elif torch is None:
            collate = (_collate.numpy_collate if self._auto_collation
                       else _collate.numpy_convert)
        else:
            collate = _worker_collate(_DEFAULT if self._auto_collation
                                      else _CONVERT)
        return {"worker_init_fn": self.worker_init_fn,
                "collate_fn": collate,
                "auto_collation": self._auto_collation,
                "batch_size": self.batch_size, "drop_last": self.drop_last}

    def _make_workers(self, base_seed):
        placement = self._placed()
        spec = self._spec()
        return [self._make_worker(placement, i, base_seed, spec)
                for i in range(self.num_workers)]

    def _make_worker(self, placement, i, base_seed, spec):
        cls = _worker.LoaderWorker
        return _actor._create(cls._cls, (placement.shared, i,
                                         self.num_workers, base_seed, spec),
                              {}, cls._options, placement.client)

    def worker_pids(self, timeout=60):
        """The process ids of the persistent workers (for tests and the
        benchmark's worker kill); [] when there are none."""
        return [w.pid.remote().result(timeout) for w in self._pool or []]

    def close(self):
        """Ends the workers and releases the loader's dataset in the store
        (also done when the loader is collected or the program exits)."""
        pool, self._pool = self._pool, None
        _kill_all(pool)
        placement, self._placement = self._placement, None
        if placement is not None and placement.closer is not None:
            placement.closer()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 (interpreter shutdown)
            pass


def _kill_all(pool):
    for w in pool or []:
        try:
            _actor.kill(w)
        except Exception:  # noqa: BLE001 (already gone)
            pass


def _pin(batch, loader):
    if torch is None or not loader.pin_memory or \
            not torch.cuda.is_available():
        return batch
    from torch.utils.data._utils.pin_memory import pin_memory
    return pin_memory(batch, loader.pin_memory_device or None)


class _SingleProcessIter:
    """num_workers=0: batches made in this process, as torch does."""

    def __init__(self, loader):
        self._loader = loader
        loader._draw_base_seed()  # torch draws it too: the same order after
        self._sampler_iter = None if loader._iterable else \
            iter(loader._index_sampler)
        self._stream = iter(loader.dataset) if loader._iterable else None

    def __iter__(self):
        return self

    def __next__(self):
        lo = self._loader
        if lo._iterable:
            if lo._auto_collation:
                data = list(itertools.islice(self._stream, lo.batch_size))
                if not data or (lo.drop_last and
                                len(data) < lo.batch_size):
                    raise StopIteration
            else:
                data = next(self._stream)
        else:
            index = next(self._sampler_iter)
            if lo._auto_collation:
                data = [lo.dataset[i] for i in index]
            else:
                data = lo.dataset[index]
        return _pin(lo.collate_fn(data), lo)

    def __len__(self):
        return len(self._loader)


class _Pending:
    __slots__ = ("worker", "payload", "future")

    def __init__(self, worker, payload, future):
        self.worker = worker
        self.payload = payload
        self.future = future


# Times one batch is computed again after its worker died.
_MAX_RECOMPUTES = 5


class _MultiWorkerIter:
    def __init__(self, loader, pool, persistent):
        self._loader = loader
        self._pool = pool
        self._persistent = persistent
        loader._epoch += 1
        self._epoch = loader._epoch
        n = len(pool)
        self._active = [True] * n
        self._seq = [0] * n
        self._cycle = itertools.cycle(range(n))
        self._pending = collections.deque()
        self._sampler_iter = None if loader._iterable else \
            iter(loader._index_sampler)
        self._exhausted = False
        self._limit = loader.prefetch_factor * n
        self._to_torch = (torch is not None and not loader._user_collate)
        self._done = False
        self._dispatch()

    def __iter__(self):
        return self

    def __len__(self):
        return len(self._loader)

    def _submit(self, w, payload):
        worker = self._pool[w]
        if self._loader._iterable:
            return worker.next.remote(self._epoch, payload)
        return worker.fetch.remote(payload)

    def _dispatch(self):
        while len(self._pending) < self._limit and not self._exhausted:
            w = None
            for _ in range(len(self._pool)):
                c = next(self._cycle)
                if self._active[c]:
                    w = c
                    break
            if w is None:
                self._exhausted = True
                return
            if self._loader._iterable:
                payload = self._seq[w]
                self._seq[w] += 1
            else:
                try:
                    payload = next(self._sampler_iter)
                except StopIteration:
                    self._exhausted = True
                    return
            self._pending.append(_Pending(w, payload,
                                          self._submit(w, payload)))

    def _replace_worker(self, w):
        """A worker whose actor ended (no restarts left): a new one."""
        lo = self._loader
        self._pool[w] = lo._make_worker(lo._placed(), w, lo._base_seed,
                                        lo._spec())

    def _result(self, entry):
        timeout = self._loader.timeout or None
        for attempt in range(_MAX_RECOMPUTES + 1):
            try:
                return entry.future.result(timeout)
            except _errors.ActorDiedError:
                # Its worker died: the batch is made again (the node
                # restarts the worker; queued calls run on the new one).
                if attempt == _MAX_RECOMPUTES:
                    raise
                try:
                    entry.future = self._submit(entry.worker, entry.payload)
                except _errors.ActorDiedError:
                    self._replace_worker(entry.worker)
                    entry.future = self._submit(entry.worker, entry.payload)
            except _errors.TimeoutError:
                raise RuntimeError(
                    f"DataLoader timed out after {self._loader.timeout} "
                    "seconds") from None
            except Exception as e:  # noqa: BLE001 (the worker's error)
                raise _reraised(e, entry.worker) from e

    def __next__(self):
        while True:
            if not self._pending:
                self._finish()
                raise StopIteration
            entry = self._pending.popleft()
            if not self._active[entry.worker]:
                continue
            try:
                value = self._result(entry)
            except BaseException:
                self._dispatch()
                raise
            if isinstance(value, str) and value == _worker.END:
                self._active[entry.worker] = False
                self._dispatch()
                continue
            self._dispatch()
            if self._to_torch:
                value = _collate.to_torch(value)
            return _pin(value, self._loader)

    def _finish(self):
        if not self._done and not self._persistent:
            _kill_all(self._pool)
        self._done = True

    def __del__(self):
        try:
            self._finish()
        except Exception:  # noqa: BLE001 (interpreter shutdown)
            pass


def _reraised(e, worker):
    """The worker's exception as torch re-raises it: its type, with a
    message naming the worker and carrying the worker's traceback."""
    tb = getattr(e.__cause__, "remote_traceback", None)
    if not tb:
        return e
    msg = (f"Caught {type(e).__name__} in DataLoader worker process "
           f"{worker}.\nOriginal {tb}")
    if isinstance(e, KeyError):
        msg = KeyErrorMessage(msg)
    try:
        new = type(e)(msg)
    except Exception:  # noqa: BLE001 (a constructor with other arguments)
        return e
    return new


class KeyErrorMessage(str):
    """KeyError's str() repr()s its message; this keeps the lines."""

    def __repr__(self):
        return self
