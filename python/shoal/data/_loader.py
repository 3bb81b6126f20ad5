"""shoal.data.DataLoader: torch's DataLoader over shoal's workers and store.

The consumer (this process) iterates the sampler exactly as torch's
DataLoader does (torch's samplers and generator when torch is importable,
the same draw of the workers' base seed first) and hands each batch's
indices to worker `i % num_workers` in turn, at most
prefetch_factor × num_workers batches ahead. The workers are actors
(_worker.LoaderWorker) of a shoal node: the one this process is connected
to, else a node of the loader's own (shoal.start_node), else under
`shoal launch` one node per machine that the machine's ranks share
(_place.py). The dataset goes into that node's store once (_share.py); every
worker reads its arrays in place. A batch is the worker's task result: its
large arrays are store objects the consumer views without a copy, freed when
dropped. While the workers start, a map-style loader makes the batches here,
each as its worker would (_start.py: the warm start).
"""

import collections
import itertools
import threading
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence

from .. import _actor, _errors
from . import _collate, _place, _samplers, _start, _worker

try:
    import torch
    import torch.utils.data as _tud
except ImportError:
    torch = None  # type: ignore[assignment]
    _tud = None  # type: ignore[assignment]


def _is_iterable_dataset(dataset: Any) -> bool:
    if _tud is not None:
        return isinstance(dataset, _tud.IterableDataset)
    return hasattr(dataset, "__iter__") and not hasattr(dataset,
                                                        "__getitem__")


def default_collate(batch: Any) -> Any:
    """torch's default_collate with torch, else shoal's numpy counterpart
    (arrays and numbers stacked, mappings and sequences collated field by
    field). Raises TypeError for samples of a type it cannot collate."""
    if _tud is not None:
        return _tud.default_collate(batch)
    return _collate.numpy_collate(batch)


def default_convert(data: Any) -> Any:
    """torch's default_convert with torch (numpy arrays as tensors), else
    the data as it is."""
    if _tud is not None:
        return _tud.default_convert(data)
    return _collate.numpy_convert(data)


# ---- the loader -------------------------------------------------------------

class DataLoader:
    """torch.utils.data.DataLoader's signature and semantics, with shoal's
    workers and store (docs/data.md).

    Beyond torch's arguments: `store_bytes`, the store size of a node the
    loader starts itself (default: the dataset's bytes + 512 MiB);
    `warm_start` (default True): while the workers start, a map-style
    loader without worker_init_fn makes the batches in this process, each
    as its worker would (_start.py), and hands over when they are ready.
    `multiprocessing_context` is accepted and ignored (workers are shoal's
    processes, never forked from this one).
    """

    def __init__(self, dataset: Any, batch_size: Optional[int] = 1,
                 shuffle: Optional[bool] = None, sampler: Any = None,
                 batch_sampler: Any = None, num_workers: int = 0,
                 collate_fn: Optional[Callable[[Any], Any]] = None,
                 pin_memory: bool = False, drop_last: bool = False,
                 timeout: float = 0,
                 worker_init_fn: Optional[Callable[[int], None]] = None,
                 multiprocessing_context: Any = None,
                 generator: Any = None, *, prefetch_factor: int = 2,
                 persistent_workers: bool = False,
                 pin_memory_device: str = "",
                 store_bytes: Optional[int] = None,
                 warm_start: bool = True) -> None:
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
        self.warm_start = warm_start
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
        self._placement: Any = None
        # _start.Starter of the persistent workers.
        self._starter: Optional[_start.Starter] = None
        self._base_seed: Any = None  # an int once iterated
        self._epoch = 0
        self._lock = threading.Lock()

    # -- torch's attributes ---------------------------------------------------

    @property
    def _index_sampler(self) -> Any:
        return self.batch_sampler if self._auto_collation else self.sampler

    def __len__(self) -> int:
        """Batches per epoch (an iterable dataset's: from its len())."""
        if self._iterable:
            n = len(self.dataset)
            if self.batch_size is not None:
                import math
                n = (n // self.batch_size if self.drop_last
                     else math.ceil(n / self.batch_size))
            return n
        return len(self._index_sampler)

    # -- iteration --------------------------------------------------------------

    def _draw_base_seed(self) -> Any:
        if torch is not None:
            return torch.empty((), dtype=torch.int64).random_(
                generator=self.generator).item()
        import random
        return random.getrandbits(63)

    def __iter__(self) -> Iterator[Any]:
        """An epoch's batches, in the sampler's order."""
        if self.num_workers == 0:
            return _SingleProcessIter(self)
        if self.persistent_workers and self._starter is not None:
            return _MultiWorkerIter(self, self._starter, persistent=True)
        self._base_seed = self._draw_base_seed()
        local = None
        if self.warm_start and not self._iterable and \
                self.worker_init_fn is None:
            spec = self._spec()
            local = _start.LocalWorkers(self.dataset, spec["collate_fn"],
                                        self._auto_collation,
                                        self.num_workers, self._base_seed)
        starter = _start.Starter(self, self._base_seed, local)
        if local is None:
            starter.run_inline()
        if self.persistent_workers:
            self._starter = starter
        return _MultiWorkerIter(self, starter,
                                persistent=self.persistent_workers)

    def _placed(self) -> Any:
        with self._lock:
            if self._placement is None:
                self._placement = _place.place(self.dataset,
                                               self.store_bytes)
            return self._placement

    def _spec(self) -> dict[str, Any]:
        collate: Callable[[Any], Any]
        if self._user_collate:
            collate = self.collate_fn
        elif torch is None:
            collate = (_collate.numpy_collate if self._auto_collation
                       else _collate.numpy_convert)
        else:
            collate = _collate.WorkerCollate(self._auto_collation)
        return {"worker_init_fn": self.worker_init_fn,
                "collate_fn": collate,
                "auto_collation": self._auto_collation,
                "batch_size": self.batch_size, "drop_last": self.drop_last}

    def _make_workers(self, base_seed: int) -> list[Any]:
        placement = self._placed()
        spec = self._spec()
        return [self._make_worker(placement, i, base_seed, spec)
                for i in range(self.num_workers)]

    def _make_worker(self, placement: Any, i: int, base_seed: int,
                     spec: dict[str, Any]) -> Any:
        cls: Any = _worker.LoaderWorker  # an ActorClass
        return _actor._create(cls._cls, (placement.shared, i,
                                         self.num_workers, base_seed, spec),
                              {}, cls._options, placement.client)

    def worker_pids(self, timeout: Optional[float] = 60) -> list[int]:
        """The process ids of the persistent workers (for tests and the
        benchmark's worker kill); [] when there are none."""
        if self._starter is None:
            return []
        return [w.pid.remote().result(timeout) for w in self._starter.wait()]

    def close(self) -> None:
        """Ends the workers and releases the loader's dataset in the store
        (also done when the loader is collected or the program exits)."""
        starter, self._starter = self._starter, None
        if starter is not None:
            starter.close()
        placement, self._placement = self._placement, None
        if placement is not None and placement.closer is not None:
            placement.closer()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 (interpreter shutdown)
            pass


def _pin(batch: Any, loader: DataLoader) -> Any:
    if torch is None or not loader.pin_memory or \
            not torch.cuda.is_available():
        return batch
    from torch.utils.data._utils.pin_memory import pin_memory
    return pin_memory(batch, loader.pin_memory_device or None)


class _SingleProcessIter:
    """num_workers=0: batches made in this process, as torch does."""

    def __init__(self, loader: DataLoader) -> None:
        self._loader = loader
        loader._draw_base_seed()  # torch draws it too: the same order after
        self._sampler_iter: Any = None if loader._iterable else \
            iter(loader._index_sampler)
        self._stream = iter(loader.dataset) if loader._iterable else None

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        lo: Any = self._loader
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

    def __len__(self) -> int:
        return len(self._loader)


class _Pending:
    __slots__ = ("worker", "payload", "rng", "future")

    def __init__(self, worker: int, payload: Any, rng: Any,
                 future: Any) -> None:
        self.worker = worker
        self.payload = payload
        self.rng = rng
        self.future = future


# Times one batch is computed again after its worker died.
_MAX_RECOMPUTES = 5


class _MultiWorkerIter:
    """One epoch over the workers: batch i to worker i % n (among the
    active ones), at most prefetch_factor × n requested ahead. While the
    starter has no pool yet, the consumer makes the batches itself
    (_start.LocalWorkers), else it waits for the pool."""

    def __init__(self, loader: DataLoader, starter: Any,
                 persistent: bool) -> None:
        self._loader = loader
        self._starter = starter
        self._pool = starter.pool if starter.done.is_set() else None
        self._persistent = persistent
        loader._epoch += 1
        self._epoch = loader._epoch
        n = loader.num_workers
        self._active = [True] * n
        self._seq = [0] * n
        self._cycle = itertools.cycle(range(n))
        self._pending: collections.deque[_Pending] = collections.deque()
        self._sampler_iter: Any = None if loader._iterable else \
            iter(loader._index_sampler)
        self._exhausted = False
        self._limit = loader.prefetch_factor * n
        self._to_torch = (torch is not None and not loader._user_collate)
        self._done = False
        if self._pool is not None or starter.local is None:
            self._adopt()

    def __iter__(self) -> Iterator[Any]:
        return self

    def __len__(self) -> int:
        return len(self._loader)

    def _adopt(self) -> None:
        """Takes the started pool (waiting for it) and fills the queue."""
        self._pool = self._starter.wait()
        self._dispatch()

    def _submit(self, w: int, payload: Any, rng: Any) -> Any:
        worker = self._pool[w]
        if self._loader._iterable:
            return worker.next.remote(self._epoch, payload)
        return worker.fetch.remote(payload, rng)

    def _next_worker(self) -> Optional[int]:
        for _ in range(len(self._active)):
            c = next(self._cycle)
            if self._active[c]:
                return c
        return None

    def _dispatch(self) -> None:
        local = self._starter.local
        while len(self._pending) < self._limit and not self._exhausted:
            w = self._next_worker()
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
            rng = local.take_state(w) if local is not None else None
            self._pending.append(_Pending(w, payload, rng,
                                          self._submit(w, payload, rng)))

    def _replace_worker(self, w: int) -> None:
        """A worker whose actor ended (no restarts left): a new one."""
        lo: Any = self._loader
        self._pool[w] = lo._make_worker(lo._placed(), w, lo._base_seed,
                                        lo._spec())

    def _result(self, entry: _Pending) -> Any:
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
                    entry.future = self._submit(entry.worker, entry.payload,
                                                entry.rng)
                except _errors.ActorDiedError:
                    self._replace_worker(entry.worker)
                    entry.future = self._submit(entry.worker, entry.payload,
                                                entry.rng)
            except _errors.TimeoutError:
                raise RuntimeError(
                    f"DataLoader timed out after {self._loader.timeout} "
                    "seconds") from None
            except Exception as e:  # noqa: BLE001 (the worker's error)
                raise _reraised(e, entry.worker) from e

    def _next_local(self) -> Any:
        """The next batch made here, as its worker would make it."""
        w = self._next_worker()
        try:
            indices = next(self._sampler_iter)
        except StopIteration:
            self._exhausted = True
            self._finish()
            raise
        try:
            value = self._starter.local.make(w, indices)
        except _start.WorkerError as e:
            raise _reraised(e.error, w, e.remote_traceback) from e.error
        finally:
            self._starter.start()  # after the first batch: it waited for none
        return value

    def __next__(self) -> Any:
        if self._pool is None:
            if self._exhausted:
                raise StopIteration
            if not self._starter.done.is_set():
                return self._deliver(self._next_local())
            self._adopt()
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
            return self._deliver(value)

    def _deliver(self, value: Any) -> Any:
        if self._to_torch:
            value = _collate.to_torch(value)
        return _pin(value, self._loader)

    def _finish(self) -> None:
        if not self._done and not self._persistent:
            self._starter.abandon()
        self._done = True

    def __del__(self) -> None:
        try:
            self._finish()
        except Exception:  # noqa: BLE001 (interpreter shutdown)
            pass


def _reraised(e: BaseException, worker: Optional[int],
              tb: Optional[str] = None) -> BaseException:
    """The worker's exception as torch re-raises it: its type, with a
    message naming the worker and carrying the worker's traceback."""
    tb = tb or getattr(e.__cause__, "remote_traceback", None)
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

    def __repr__(self) -> str:
        return self
