"""pytest's conftest for the GPU bundle's CPU DLPack tests
(gpu-bundle/python/tests/conftest.py, beside python/tests/test_dlpack.py):
they run as the one rank of `shoal launch --nproc-per-node 1`, so put, get
and borrow go through the job's store. The tests that submit tasks are
deselected there (-k 'not task_results'): a worker embeds the Python of the
machine that built the bundle, not the GPU machine's."""

import pytest

import shoal


@pytest.fixture(scope="module")
def client():
    yield shoal.init()
