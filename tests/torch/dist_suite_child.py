"""torch's own DistributedTest (torch/testing/_internal/distributed/
distributed_test.py, shipped inside torch) as torch's
test/distributed/test_distributed_spawn.py runs it, for one backend:
run by distributed_suite.py under pytest, with BACKEND=gloo, WORLD_SIZE,
TEMP_DIR set, and SHOAL_SUITE_BACKEND=gloo or shoal.

The shim, for SHOAL_SUITE_BACKEND=shoal only: the suite keeps BACKEND=gloo
(so it runs the tests it gates on gloo: timeouts, sparse all_reduce,
monitored_barrier, ...) while every group it creates, whatever backend it
names, gets "shoal": torch.distributed.Backend("gloo") — the name every
init_process_group and new_group passes through — reads "shoal". The suite's
`require_backend_is_available({"gloo"})` then checks "shoal", which torch's
own list of third-party backends (DistTestCases.backend_feature["plugin"])
names available. Nothing else is changed; a test that asks which backend it
runs on sees "shoal" (docs/torch.md lists the tests that compare that name
with "gloo").
"""

import os

import torch
import torch.distributed as dist

if os.environ.get("SHOAL_SUITE_BACKEND") == "shoal":
    import shoal.torch  # noqa: F401  (registers "shoal")

    _backend_new = dist.Backend.__new__

    def _gloo_is_shoal(cls, name):
        value = _backend_new(cls, name)
        return _backend_new(cls, "shoal") if value == "gloo" else value

    dist.Backend.__new__ = _gloo_is_shoal

    from torch.testing._internal.common_distributed import DistTestCases
    DistTestCases.backend_feature["plugin"].add("shoal")

from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest, TestDistBackend)


class TestDistBackendWithFork(TestDistBackend, DistributedTest._DistTestBase):
    # Forked, not spawned as test_distributed_spawn.py does: a spawned rank
    # imports torch and the suite again (about 10 s here), a forked one
    # starts at once. No rank touches CUDA before the fork.
    def setUp(self):
        super().setUp()
        if hasattr(self, "_fork_processes"):  # torch 1.x
            self._fork_processes()
        else:  # torch 2.x keeps only _spawn_processes
            self._start_processes(
                torch.multiprocessing.get_context("fork").Process)
        torch.backends.cudnn.flags(enabled=True, allow_tf32=False).__enter__()
