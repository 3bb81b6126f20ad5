"""The loader's worker: an actor (docs/actors.md) per DataLoader worker, in
a process of its own that shoal starts (never forked from the consumer).

It rebuilds the dataset from the store (_share.SharedDataset: the arrays
view the store), seeds `random`, numpy's legacy RNG and torch (when the
worker has imported it) as torch's workers are seeded (base_seed +
worker id), sets get_worker_info() (and torch's own, so datasets written for
torch shard themselves alike), runs worker_init_fn, then serves calls:
`fetch(indices, rng)` for a map-style dataset, `next(epoch, seq)` for an
iterable one. Each returns the collated batch; the task's result goes into
the store and the consumer views it there. After a batch the worker drops
its store pages from its page tables (_share.Resident, at most every 50 ms):
they stay in the store, and its RSS holds only what it is reading.

The consumer makes a worker's first batches itself while the worker starts
(_loader._LocalWorkers): seed_process, rng_state and set_rng_state let it
emulate the worker's RNGs and hand their state over with the first fetch.
This module imports neither the loader nor torch.
"""

import itertools
import os
import random
import sys
from typing import Any, Callable, Optional, Sequence

from .. import _remote

# Seconds between two drops of the dataset's pages from a worker's page
# tables: its RSS holds what it read in that time.
_RELEASE_EVERY_S = 0.05

# The end of an iterable worker's stream (a batch is never this string).
END = "shoal.data:end-of-worker-stream"


class WorkerInfo:
    """What get_worker_info() returns inside a worker: id, num_workers,
    seed, dataset (this worker's copy)."""

    __slots__ = ("id", "num_workers", "seed", "dataset")

    def __init__(self, id: int, num_workers: int, seed: int,  # noqa: A002
                 dataset: Any) -> None:
        self.id = id
        self.num_workers = num_workers
        self.seed = seed
        self.dataset = dataset

    def __repr__(self) -> str:
        return (f"WorkerInfo(id={self.id}, num_workers={self.num_workers}, "
                f"seed={self.seed}, dataset={type(self.dataset).__name__})")


_info: Optional[WorkerInfo] = None


def get_worker_info() -> Optional[WorkerInfo]:
    """The WorkerInfo of this DataLoader worker; None in other processes."""
    return _info


def _generate_state(base_seed: int, worker_id: int) -> Any:
    """torch's numpy seed for a worker (torch/utils/data/_utils/worker.py)."""
    import numpy as np
    INIT_A = 0x43b0d7e5
    MULT_A = 0x931e8875
    INIT_B = 0x8b51f9dd
    MULT_B = 0x58f38ded
    MIX_MULT_L = 0xca01f9dd
    MIX_MULT_R = 0x4973f715
    XSHIFT = 4 * 8 // 2
    MASK32 = 0xFFFFFFFF
    entropy = [worker_id, base_seed & MASK32, base_seed >> 32, 0]
    pool = [0] * 4
    hash_const_A = INIT_A

    def hash(value: int) -> int:
        nonlocal hash_const_A
        value = (value ^ hash_const_A) & MASK32
        hash_const_A = (hash_const_A * MULT_A) & MASK32
        value = (value * hash_const_A) & MASK32
        value = (value ^ (value >> XSHIFT)) & MASK32
        return value

    def mix(x: int, y: int) -> int:
        result_x = (MIX_MULT_L * x) & MASK32
        result_y = (MIX_MULT_R * y) & MASK32
        result = (result_x - result_y) & MASK32
        result = (result ^ (result >> XSHIFT)) & MASK32
        return result

    for i in range(len(pool)):
        pool[i] = hash(entropy[i])
    for i_src in range(len(pool)):
        for i_dst in range(len(pool)):
            if i_src != i_dst:
                pool[i_dst] = mix(pool[i_dst], hash(pool[i_src]))
    hash_const_B = INIT_B
    state = []
    for i_dst in range(4):
        data_val = pool[i_dst]
        data_val = (data_val ^ hash_const_B) & MASK32
        hash_const_B = (hash_const_B * MULT_B) & MASK32
        data_val = (data_val * hash_const_B) & MASK32
        data_val = (data_val ^ (data_val >> XSHIFT)) & MASK32
        state.append(data_val)
    return np.array(state, dtype=np.uint32)


def seed_process(base_seed: int, worker_id: int) -> int:
    """Seeds `random`, numpy's legacy RNG and torch's CPU generator (when
    imported) as torch seeds its worker `worker_id`; returns the seed."""
    seed = base_seed + worker_id
    random.seed(seed)
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed(
            _generate_state(base_seed, worker_id))
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.default_generator.manual_seed(seed)
    return seed


def rng_state() -> tuple[Any, Any, Any]:
    """The state of the RNGs seed_process seeds (torch's as bytes, so that
    a process without torch can hold it)."""
    np = sys.modules.get("numpy")
    torch = sys.modules.get("torch")
    return (random.getstate(),
            np.random.get_state() if np is not None else None,
            torch.default_generator.get_state().numpy().tobytes()
            if torch is not None else None)


def set_rng_state(state: Sequence[Any]) -> None:
    """Sets the RNGs seed_process seeds to a state rng_state took."""
    py, np_state, torch_state = state
    random.setstate(py)
    np = sys.modules.get("numpy")
    if np is not None and np_state is not None:
        np.random.set_state(np_state)
    torch = sys.modules.get("torch")
    if torch is not None and torch_state is not None:
        torch.default_generator.set_state(
            torch.frombuffer(bytearray(torch_state), dtype=torch.uint8))


def set_info(info: Optional[WorkerInfo]) -> None:
    """Sets get_worker_info() (and torch's, when imported) to `info`."""
    global _info
    _info = info
    torch = sys.modules.get("torch")
    if torch is not None:
        from torch.utils.data._utils import worker as tw
        tw._worker_info = None if info is None else tw.WorkerInfo(
            id=info.id, num_workers=info.num_workers, seed=info.seed,
            dataset=info.dataset)


class LoaderWorker:
    def __init__(self, shared: Any, worker_id: int, num_workers: int,
                 base_seed: int, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.dataset = shared.load()
        self.resident = shared.resident
        self.resident.release()  # loading mapped the whole dataset
        seed = seed_process(base_seed, worker_id)
        set_info(WorkerInfo(worker_id, num_workers, seed, self.dataset))
        if spec["worker_init_fn"] is not None:
            spec["worker_init_fn"](worker_id)
        self.collate = spec["collate_fn"]
        self.epoch: Optional[int] = None
        self.produced = 0
        self.stream: Any = None

    def pid(self) -> int:
        """The worker's process id."""
        return os.getpid()

    def fetch(self, indices: Any, rng: Any = None) -> Any:
        """A map-style batch: collate([dataset[i] for i in indices]), or
        dataset[index] collated alone without automatic batching. `rng`:
        the RNG state to continue from (the consumer made this worker's
        first batches while it started)."""
        if rng is not None:
            set_rng_state(rng)
        try:
            return make_batch(self.dataset, self.collate,
                              self.spec["auto_collation"], indices)
        finally:
            self.resident.release(_RELEASE_EVERY_S)

    def _restart(self, epoch: int, seq: int) -> None:
        """A fresh iterator of the dataset at batch `seq` of `epoch` (a new
        epoch, or a worker restarted after a death: the batches it made
        before are made again and dropped, so the stream goes on where the
        consumer is)."""
        self.epoch = epoch
        self.stream = iter(self.dataset)
        self.produced = 0
        for _ in range(seq):
            if self._one() is END:
                break

    def _one(self) -> Any:
        if self.spec["auto_collation"]:
            batch = list(itertools.islice(self.stream,
                                          self.spec["batch_size"]))
            if not batch or (self.spec["drop_last"] and
                             len(batch) < self.spec["batch_size"]):
                return END
        else:
            try:
                batch = next(self.stream)
            except StopIteration:
                return END
        self.produced += 1
        return batch

    def next(self, epoch: int, seq: int) -> Any:
        """Batch `seq` of this worker's stream in `epoch`, or END."""
        if epoch != self.epoch or seq != self.produced:
            self._restart(epoch, seq)
        batch = self._one()
        try:
            return END if batch is END else self.collate(batch)
        finally:
            self.resident.release(_RELEASE_EVERY_S)


def make_batch(dataset: Any, collate: Callable[[Any], Any],
               auto_collation: bool, indices: Any) -> Any:
    if auto_collation:
        return collate([dataset[i] for i in indices])
    return collate(dataset[indices])


LoaderWorker = _remote.remote(  # type: ignore[misc,assignment]
    max_restarts=100)(LoaderWorker)
