"""shoal.data: torch's DataLoader with shoal's workers and store.

    from shoal.data import DataLoader
    loader = DataLoader(dataset, batch_size=32, shuffle=True, num_workers=2,
                        generator=torch.Generator().manual_seed(0))
    for batch in loader: ...

Same signature, semantics and batch order as torch.utils.data.DataLoader;
the dataset goes into the node's store once and workers read it in place;
batches come back as views of the store; a worker that dies has its batches
computed again. See docs/data.md.

Modules: _loader (DataLoader, the consumer's iterators, where workers run),
_worker (the worker actor, get_worker_info), _share (a dataset in the store
once), _samplers (torch's or numpy's; DistributedSampler), _collate (numpy's
default collate).
"""

from ._loader import DataLoader, default_collate, default_convert
from ._samplers import (BatchSampler, DistributedSampler, RandomSampler,
                        SequentialSampler)
from ._worker import WorkerInfo, get_worker_info

__all__ = ["BatchSampler", "DataLoader", "DistributedSampler",
           "RandomSampler", "SequentialSampler", "WorkerInfo",
           "default_collate", "default_convert", "get_worker_info"]
