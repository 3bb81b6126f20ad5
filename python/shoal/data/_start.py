"""A loader's warm start: the consumer makes the first batches while its
workers start.

Starting the workers takes seconds (a node, the dataset copied into its
store, a process and an interpreter per worker); torch's DataLoader with its
defaults has its first batch in milliseconds because it makes it in the
calling process. So a map-style loader (without worker_init_fn) makes its
batches in the consumer, as torch's num_workers=0 does, until its workers are
ready, then hands over. `_Starter` runs the start on a thread of its own;
`LocalWorkers` makes batch i as worker i % num_workers would: with that
worker's RNGs (seeded as torch seeds the worker, kept between its batches),
its get_worker_info(), and the same collate, so the batches are those the
workers would have made. The consumer's own RNG states are restored after
each batch; a worker's state goes to it with its first fetch.
"""

import atexit
import threading
import time
import traceback
import weakref
from typing import Any, Callable, Optional

from . import _worker


# A started thread waits this long before its first step: Thread.start()
# hands it the GIL, which the consumer then waits for (up to the switch
# interval) before it can return the first batch.
_THREAD_DELAY_S = 0.01


class Starter:
    """Places the dataset and starts the workers (loader._make_workers),
    inline or on a thread; `pool` is the list of actor handles once `done`
    is set (or `error`, what the start raised)."""

    def __init__(self, loader: Any, base_seed: int,
                 local: Optional["LocalWorkers"]) -> None:
        self.pool: Optional[list[Any]] = None
        self.error: Optional[BaseException] = None
        self.done = threading.Event()
        self.local = local  # LocalWorkers, or None
        self._loader = loader
        self._base_seed = base_seed
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()
        self._abandoned = False

    def run_inline(self) -> None:
        """Starts the workers now (without waiting for their constructors:
        the first calls queue behind them)."""
        self._run(wait_ready=False)

    def start(self) -> None:
        """Starts them on a thread (once), waiting for each constructor, so
        that `done` means the workers take calls at once."""
        with self._lock:
            if self._thread is None and not self.done.is_set():
                self._thread = threading.Thread(
                    target=self._run, args=(True, _THREAD_DELAY_S),
                    daemon=True,
                    name="shoal.data start")
                self._thread.start()
                _RUNNING.add(self)

    def _run(self, wait_ready: bool, delay: float = 0.0) -> None:
        pool = None
        time.sleep(delay)
        try:
            pool = self._loader._make_workers(self._base_seed)
            if wait_ready:
                for w in pool:
                    w.pid.remote().result()
        except BaseException as e:  # noqa: BLE001 (raised to the consumer)
            self.error = e
        with self._lock:
            self.pool = pool
            abandoned = self._abandoned
            self.done.set()
        if abandoned:
            _kill(pool)

    def wait(self) -> Any:
        """The pool, once started (starting it inline if it was not)."""
        with self._lock:
            started = self._thread is not None or self.done.is_set()
        if not started:
            self._run(wait_ready=False)
        self.done.wait()
        if self.error is not None:
            raise self.error
        return self.pool

    def abandon(self) -> None:
        """Kills the pool now, or when the start finishes."""
        with self._lock:
            self._abandoned = True
            pool = self.pool if self.done.is_set() else None
            self.pool = None
        _kill(pool)

    def close(self) -> None:
        """Kills the pool, waiting for a start in progress to end (a thread
        left blocked in the extension when the interpreter exits aborts
        the process)."""
        self.abandon()
        self.join()

    def join(self) -> None:
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()


# Starters whose thread was started: joined at exit.
_RUNNING: "weakref.WeakSet[Starter]" = weakref.WeakSet()


@atexit.register
def _join_running() -> None:
    for starter in list(_RUNNING):
        starter.join()


def _kill(pool: Optional[list[Any]]) -> None:
    from .. import _actor
    for w in pool or []:
        try:
            _actor.kill(w)
        except Exception:  # noqa: BLE001 (already gone)
            pass


class LocalWorkers:
    """The consumer making workers' batches: `make(w, indices)` is the batch
    worker `w` would return for them, with its RNG state carried from its
    previous batch; `take_state(w)` is the state to hand to the real worker
    with its first fetch (None when the consumer made none of its
    batches)."""

    def __init__(self, dataset: Any, collate: Callable[[Any], Any],
                 auto_collation: bool, num_workers: int,
                 base_seed: int) -> None:
        self._dataset = dataset
        self._collate = collate
        self._auto = auto_collation
        self._n = num_workers
        self._base_seed = base_seed
        self._states: list[Any] = [None] * num_workers
        self._seeds: list[Any] = [None] * num_workers

    def make(self, w: int, indices: Any) -> Any:
        own = _worker.rng_state()
        own_info = _worker.get_worker_info()
        try:
            if self._states[w] is None:
                self._seeds[w] = _worker.seed_process(self._base_seed, w)
            else:
                _worker.set_rng_state(self._states[w])
            _worker.set_info(_worker.WorkerInfo(w, self._n, self._seeds[w],
                                                self._dataset))
            try:
                return _worker.make_batch(self._dataset, self._collate,
                                          self._auto, indices)
            except Exception as e:  # noqa: BLE001 (raised as a worker's)
                raise WorkerError(e, traceback.format_exc()) from e
            finally:
                self._states[w] = _worker.rng_state()
        finally:
            _worker.set_rng_state(own)
            _worker.set_info(own_info)

    def take_state(self, w: int) -> Any:
        state, self._states[w] = self._states[w], None
        return state


class WorkerError(Exception):
    """An exception of a batch the consumer made for a worker, with its
    traceback text (raised to the caller as a worker's exception)."""

    def __init__(self, error: BaseException, tb: str) -> None:
        super().__init__(str(error))
        self.error = error
        self.remote_traceback = tb
