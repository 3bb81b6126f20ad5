"""Samplers: torch's own when torch is importable (so the order of indices
is torch's for the same generator), numpy counterparts otherwise, and
DistributedSampler, whose rank and world size default to `shoal launch`'s.
"""

import math
from typing import Any, Iterator, Optional, Sized

import numpy as np

try:
    import torch
    import torch.utils.data as _tud
except ImportError:  # numpy only
    torch = None  # type: ignore[assignment]
    _tud = None  # type: ignore[assignment]


class _NumpySequential:
    """torch's SequentialSampler without torch: 0, 1, ..., len - 1."""

    def __init__(self, data_source: Sized) -> None:
        self.data_source = data_source

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


class _NumpyRandom:
    """A permutation per epoch from a numpy Generator (`generator`: a
    np.random.Generator, an int seed, or None for fresh entropy)."""

    def __init__(self, data_source: Sized, replacement: bool = False,
                 num_samples: Optional[int] = None,
                 generator: Any = None) -> None:
        self.data_source = data_source
        self.replacement = replacement
        self._num_samples = num_samples
        if generator is None or isinstance(generator, (int, np.integer)):
            generator = np.random.default_rng(generator)
        self.generator = generator

    @property
    def num_samples(self) -> int:
        """Indices per epoch: num_samples if given, else the data's length."""
        return (len(self.data_source) if self._num_samples is None
                else self._num_samples)

    def __iter__(self) -> Iterator[int]:
        n = len(self.data_source)
        if self.replacement:
            return iter(self.generator.integers(
                0, n, self.num_samples).tolist())
        out: list[int] = []
        for _ in range(self.num_samples // n):
            out.extend(self.generator.permutation(n).tolist())
        out.extend(self.generator.permutation(n)[
            :self.num_samples % n].tolist())
        return iter(out)

    def __len__(self) -> int:
        return self.num_samples


class _NumpyBatch:
    """torch's BatchSampler without torch: lists of `batch_size` indices of
    `sampler` (the last one shorter unless drop_last). Raises ValueError
    for a batch_size that is not a positive int."""

    def __init__(self, sampler: Any, batch_size: int,
                 drop_last: bool) -> None:
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) \
                or batch_size <= 0:
            raise ValueError(f"batch_size should be a positive integer "
                             f"value, but got batch_size={batch_size}")
        self.sampler = sampler
        self.batch_size = batch_size
        self.drop_last = drop_last

    def __iter__(self) -> Iterator[list[int]]:
        batch: list[int] = []
        for idx in self.sampler:
            batch.append(idx)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else \
            (n + self.batch_size - 1) // self.batch_size


if torch is not None:
    SequentialSampler = _tud.SequentialSampler
    RandomSampler = _tud.RandomSampler
    BatchSampler = _tud.BatchSampler
else:
    SequentialSampler = _NumpySequential  # type: ignore[misc]
    RandomSampler = _NumpyRandom  # type: ignore[misc]
    BatchSampler = _NumpyBatch  # type: ignore[misc]


def _launch_rank_and_size() -> tuple[int, int]:
    from .. import _context
    job = _context.job()
    return job.rank, job.world_size


class DistributedSampler:
    """torch's DistributedSampler semantics: each of `num_replicas` ranks
    reads its own shard (indices rank, rank + num_replicas, ... of the
    padded, optionally shuffled order); call set_epoch(e) each epoch for a
    new shuffle. num_replicas and rank default to the `shoal launch` job's
    world size and rank (shoal.init()). With torch the order is exactly
    torch.utils.data.DistributedSampler's (seed + epoch through
    torch.Generator); without torch a numpy permutation of the same seed.
    Raises ValueError for a rank outside [0, num_replicas)."""

    def __init__(self, dataset: Sized, num_replicas: Optional[int] = None,
                 rank: Optional[int] = None, shuffle: bool = True,
                 seed: int = 0, drop_last: bool = False) -> None:
        if num_replicas is None or rank is None:
            r, n = _launch_rank_and_size()
            rank = r if rank is None else rank
            num_replicas = n if num_replicas is None else num_replicas
        if rank >= num_replicas or rank < 0:
            raise ValueError(f"Invalid rank {rank}, rank should be in the "
                             f"interval [0, {num_replicas - 1}]")
        self.dataset = dataset
        self.num_replicas = num_replicas
        self.rank = rank
        self.epoch = 0
        self.drop_last = drop_last
        n = len(dataset)
        if drop_last and n % num_replicas != 0:
            self.num_samples = math.ceil((n - num_replicas) / num_replicas)
        else:
            self.num_samples = math.ceil(n / num_replicas)
        self.total_size = self.num_samples * num_replicas
        self.shuffle = shuffle
        self.seed = seed

    def __iter__(self) -> Iterator[int]:
        n = len(self.dataset)
        if self.shuffle:
            if torch is not None:
                g = torch.Generator()
                g.manual_seed(self.seed + self.epoch)
                indices = torch.randperm(n, generator=g).tolist()
            else:
                indices = np.random.default_rng(
                    self.seed + self.epoch).permutation(n).tolist()
        else:
            indices = list(range(n))
        if not self.drop_last:
            padding = self.total_size - len(indices)
            if padding <= len(indices):
                indices += indices[:padding]
            else:
                indices += (indices * math.ceil(padding / len(indices)))[
                    :padding]
        else:
            indices = indices[:self.total_size]
        return iter(indices[self.rank:self.total_size:self.num_replicas])

    def __len__(self) -> int:
        """The indices this rank reads per epoch."""
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next iteration shuffles for (seed + epoch)."""
        self.epoch = epoch


if torch is not None:
    # isinstance checks written for torch's class see shoal's as one.
    DistributedSampler = type(  # type: ignore[misc, assignment]
        "DistributedSampler",
        (DistributedSampler, torch.utils.data.distributed.DistributedSampler),
        {"__doc__": DistributedSampler.__doc__,
         "__module__": __name__})
