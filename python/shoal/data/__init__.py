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

import importlib
from typing import Any

# Names and the module defining each: imported on first use, so that a
# worker (which imports shoal.data._worker) loads neither the loader nor
# torch.
_EXPORTS = {
    "DataLoader": "_loader", "default_collate": "_loader",
    "default_convert": "_loader", "BatchSampler": "_samplers",
    "DistributedSampler": "_samplers", "RandomSampler": "_samplers",
    "SequentialSampler": "_samplers", "WorkerInfo": "_worker",
    "get_worker_info": "_worker"}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'shoal.data' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
