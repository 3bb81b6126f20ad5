"""A node whose store is overfilled many times by held task results: the
results nobody maps spill to disk and every one reads back correctly.

Run: PYTHONPATH=<bazel-bin>/python/site SHOAL_BIN=<bazel-bin>/tools/shoal
python3 -m pytest tests/shm/test_spill.py
"""

import os
import sys
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import shoal  # noqa: E402
import spilltasks  # noqa: E402

MIB = 1 << 20


def spilled_files(parent):
    """Objects on disk in the store's spill folder inside `parent`."""
    folders = os.listdir(parent)
    if not folders:
        return 0
    assert len(folders) == 1, folders
    return len(os.listdir(os.path.join(parent, folders[0]))) - 1  # owner


def finish_all(client, n, deadline_s=120):
    """Waits until the node finished n tasks, without taking their results
    (a taken result is mapped by this process: it could not spill)."""
    start = time.time()
    while client._handle.status()["completed"] < n:
        assert time.time() - start < deadline_s, client._handle.status()
        time.sleep(0.05)


@pytest.fixture
def spill_dir():
    with tempfile.TemporaryDirectory(prefix="shoal-spill-py-") as d:
        yield d


def start(spill_dir, store="64M", *extra):
    return shoal.start_node(
        2, store_bytes=store, pythonpath=HERE,
        extra_args=["--spill-dir", spill_dir,
                    "--max-store-bytes-per-client", "8G", *extra])


def test_held_results_many_times_the_store_all_read_back(spill_dir):
    n = 1000  # 1000 MiB of results held at once in a 64 MiB store
    with start(spill_dir) as node:
        c = shoal.connect(job_id=node.job_id)
        try:
            futures = [c.submit(spilltasks.block, i) for i in range(n)]
            finish_all(c, n)
            on_disk = spilled_files(spill_dir)
            assert on_disk >= n - 64, on_disk
            # Every result, oldest (on disk) first: each is read back into
            # the store (mapped again) while others leave for its room.
            for i in range(n):
                f, futures[i] = futures[i], None
                assert spilltasks.check(f.result(60), i), i
                del f
        finally:
            shoal.disconnect()
    # The node's stop removed the folder and every file in it.
    assert os.listdir(spill_dir) == []


def test_a_full_spill_quota_is_a_clear_error_and_loses_nothing(spill_dir):
    # The arena of a 64 MiB store (about 46 MiB: its tables take the rest)
    # and 32 MiB of disk hold about 78 of them.
    n = 160
    with start(spill_dir, "64M", "--spill-bytes", "32M") as node:
        c = shoal.connect(job_id=node.job_id)
        try:
            futures = [c.submit(spilltasks.block, i) for i in range(n)]
            finish_all(c, n)
            ok, refused = 0, []
            for i in range(n):
                f, futures[i] = futures[i], None
                try:
                    value = f.result(60)
                except shoal.ResourceExhaustedError as e:
                    refused.append(str(e))
                    continue
                assert spilltasks.check(value, i), i
                ok += 1
                del value, f
            assert refused, "the quota was never reached"
            assert ok >= 60, ok
            assert all("--spill-bytes" in m for m in refused), refused[0]
            # Room again once results are gone.
            assert spilltasks.check(c.submit(spilltasks.block, 7).result(60), 7)
        finally:
            shoal.disconnect()
    assert os.listdir(spill_dir) == []
