"""torch.distributed's "shoal" backend: shoal's collectives under torch's API.

    import torch.distributed as dist
    import shoal.torch                  # registers the backend "shoal"
    dist.init_process_group("shoal")    # env:// (shoal launch, torchrun), or
                                        # init_method/store, rank, world_size
    dist.all_reduce(t)                  # CPU tensors: shared memory
    model = torch.nn.parallel.DistributedDataParallel(model)

The process group is C++ (torch_backend/, a c10d ProcessGroup over
shoal::collectives::Communicator, in the extension shoal._shoal_torch): DDP
waits on its Work objects from C++. It meets the group's other ranks through
the store torch gives it, so it needs nothing from `shoal launch`; every rank
of a group must be on one machine. See docs/torch.md for the ops, dtypes and
limits.
"""

import inspect
from typing import Any

import torch.distributed as dist

from . import _shoal_torch  # type: ignore[attr-defined]

BACKEND = "shoal"


def _create(options: Any, pg_options: Any) -> Any:
    """register_backend's extended creator: options is torch's
    _DistributedBackendOptions (store, group_rank, group_size, timeout,
    group_id)."""
    if pg_options is not None:
        raise RuntimeError("the shoal backend takes no pg_options")
    return _shoal_torch.create_process_group(
        options.store, options.group_rank, options.group_size,
        options.timeout, str(options.group_id))


def _register() -> None:
    if BACKEND.upper() in dist.Backend._plugins:  # imported twice
        return
    # torch 2.x dispatches by device to a c10d::Backend (the creator's
    # result) and takes the devices it serves; torch 1.13 has no `devices`
    # (its ProcessGroup serves every tensor). The Python side's one
    # difference between them (the C++ side's: torch_backend/torch_compat.h).
    kwargs: dict[str, Any] = {"extended_api": True}
    if "devices" in inspect.signature(dist.Backend.register_backend).parameters:
        kwargs["devices"] = ["cpu", "cuda"]
    dist.Backend.register_backend(BACKEND, _create, **kwargs)


_register()
