"""Zero-copy arrays (docs/values.md "Zero-copy arrays"): large numpy arrays
made after a local client connected live in the node's store and go to tasks
by reference, with copy-on-write snapshot semantics. Real nodes."""

import os
import struct
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import shoal
from shoal import _zero_copy
import zctasks
from valtasks import store_offset

N = 8 << 20  # float32 elements: 32 MiB


def stats():
    return _zero_copy.stats()


def used(client):
    return client.status()["store_used_bytes"]


def wait_used(client, at_most, timeout=30):
    """The store's bytes in use once at most `at_most` (deletions of freed
    objects are deferred to the service's sweep)."""
    deadline = time.monotonic() + timeout
    while used(client) > at_most and time.monotonic() < deadline:
        time.sleep(0.02)
    return used(client)


def test_large_arrays_made_after_connect_live_in_the_store(client):
    before = stats()["placed"]
    a = np.ones(N, np.float32)
    assert store_offset(a) is not None
    assert stats()["placed"] == before + 1
    small = np.ones(1000, np.float32)  # 4 KB: malloc
    assert store_offset(small) is None
    assert stats()["placed"] == before + 1


def test_resizing_a_store_array_keeps_its_values(client):
    a = np.arange(N // 2, dtype=np.float32)
    assert store_offset(a) is not None
    a.resize(N, refcheck=False)  # numpy's realloc: a new block + copy
    assert store_offset(a) is not None
    assert a[N // 2 - 1] == N // 2 - 1 and a[0] == 0
    assert client.submit(zctasks.where, {"a": a}).result(60)["a"][1] == \
        pytest.approx(float(a.sum()), rel=1e-5)


def test_a_dict_of_arrays_goes_by_reference(client):
    rng = np.random.default_rng(1)
    d = {"a": rng.random(N, dtype=np.float32),
         "b": rng.random(N, dtype=np.float32)}
    mine = {k: store_offset(a) for k, a in d.items()}
    assert None not in mine.values()
    before = used(client)
    fut = client.submit(zctasks.where, d)
    # The arrays' objects were created at allocation: submitting adds none.
    assert used(client) < before + (1 << 20)
    seen = fut.result(60)
    assert {k: v[0] for k, v in seen.items()} == mine  # the same bytes
    for k, a in d.items():
        assert seen[k][1] == pytest.approx(float(a.sum()), rel=1e-5)


def test_bare_array_arguments_go_by_reference(client):
    """A store-placed array as a top-level positional argument takes the
    pickled call (by reference), not the plain-value path (a copy); a
    malloc'd one still goes by value."""
    rng = np.random.default_rng(2)
    a = rng.random(N, dtype=np.float32)
    b = rng.random(N // 4, dtype=np.float32)
    mine = store_offset(a), store_offset(b)
    assert None not in mine
    before = used(client)
    for _ in range(2):  # twice: the second submit reuses the sealed objects
        seen = client.submit(zctasks.where_bare, a, b).result(60)
        assert (seen["a"][0], seen["b"][0]) == mine  # the same bytes
        assert seen["a"][1] == pytest.approx(float(a.sum()), rel=1e-5)
        assert seen["b"][1] == pytest.approx(float(b.sum()), rel=1e-5)
    assert used(client) < before + (1 << 20)  # no copy was stored
    with _zero_copy.paused():
        c = np.ones(N // 4, np.float32)  # malloc: copied, as before
    assert store_offset(c) is None
    seen = client.submit(zctasks.where_bare, c, c).result(60)
    assert seen["a"][0] is not None and seen["a"][1] == N // 4


def test_writes_after_submit_are_not_seen_by_the_task(client, tmp_path):
    a = np.full(N, 1.0, np.float32)
    go = tmp_path / "written"
    fut = client.submit(zctasks.where_after, str(go), {"a": a})
    a[:] = 2.0  # copy-on-write: private pages of this process
    a[-1] = 3.0
    go.touch()
    seen = fut.result(60)
    assert seen["a"][1] == float(N)  # the snapshot's ones
    assert seen["a"][0] == store_offset(a)
    assert a[0] == 2.0 and a[-1] == 3.0  # this process sees its writes


def test_resubmitting_unchanged_reuses_the_object(client):
    d = {"a": np.full(N, 1.0, np.float32)}
    first = client.submit(zctasks.where, d).result(60)
    reused = stats()["reused"]
    before = used(client)
    second = client.submit(zctasks.where, d).result(60)
    assert second == first
    assert stats()["reused"] == reused + 1
    assert used(client) <= before


def test_resubmitting_after_a_write_sends_the_new_values(client):
    d = {"a": np.full(N, 1.0, np.float32)}
    first = client.submit(zctasks.where, d).result(60)
    d["a"][:10] = 5.0
    second = client.submit(zctasks.where, d).result(60)
    assert second["a"][1] == float(N) + 40.0
    assert first["a"][1] == float(N)
    assert d["a"][0] == 5.0


def test_freeing_the_array_and_the_task_ref_frees_the_store_space(client):
    live = stats()["live"]
    d = {"a": np.ones(N, np.float32), "b": np.ones(N, np.float32)}
    assert stats()["live"] == live + 2
    # Objects of earlier tests may still be going (deletion is deferred to
    # the service's sweep): only a drop by the arrays' bytes is asserted.
    with_arrays = used(client)
    fut = client.submit(zctasks.where, d)
    fut.result(60)
    del d
    assert stats()["live"] == live  # the allocations are gone ...
    del fut  # ... and the task's refs: the objects go
    freed = with_arrays - 2 * N * 4
    assert wait_used(client, freed) <= freed


def _mapped_pages(address, nbytes):
    """(pages of [address, +nbytes) this process has page-table entries for,
    how many of those are the segment's own pages, not private copies)
    (/proc/self/pagemap bits 63 and 61)."""
    with open("/proc/self/pagemap", "rb") as f:
        f.seek(address // 4096 * 8)
        data = f.read(nbytes // 4096 * 8)
    entries = struct.unpack(f"<{len(data) // 8}Q", data)
    present = [e for e in entries if e >> 63 & 1]
    return len(present), sum(e >> 61 & 1 for e in present)


def test_a_freed_sealed_array_is_shared_again_with_its_pages_mapped(client):
    """Sealing moves the range's page-table entries aside instead of
    dropping them (Segment::Remap); freeing moves them back: the range is
    the segment's pages again, already mapped, and none of the private
    pages written after submit is left."""
    a = np.full(N, 1.0, np.float32)  # every page written: mapped
    address = a.ctypes.data
    pages = N * 4 // 4096
    assert _mapped_pages(address, N * 4) == (pages, pages)
    client.submit(zctasks.where, {"a": a}).result(60)
    assert _mapped_pages(address, N * 4) == (0, 0)  # private, none touched
    a[:N // 2] = 2.0  # private pages
    assert _mapped_pages(address, N * 4) == (pages // 2, 0)
    del a
    assert _mapped_pages(address, N * 4) == (pages, pages)


def test_new_arrays_every_rep_each_reach_the_task_as_at_submit(
        client, tmp_path):
    """The benchmark's pattern (new arrays each time, dropped after the
    task), with writes after each submit: every task sees its own arrays'
    submit-time values, though their store memory and pages are reused."""
    offsets = set()
    for i in range(6):
        go = tmp_path / f"written{i}"
        d = {"a": np.full(N, float(i), np.float32),
             "b": np.full(N // 2, float(i + 10), np.float32)}
        offsets.add(store_offset(d["a"]))
        fut = client.submit(zctasks.where_after, str(go), d)
        d["a"][:] = -1.0  # private pages from here
        d["b"][::1024] = -1.0
        go.touch()
        seen = fut.result(60)
        assert seen["a"][1] == float(i) * N
        assert seen["b"][1] == float(i + 10) * (N // 2)
        assert float(d["a"].sum()) == -float(N)
        del d, fut
    assert None not in offsets


def test_an_array_dropped_right_after_submit_still_reaches_the_task(
        client, tmp_path):
    go = tmp_path / "dropped"
    a = np.full(N, 1.0, np.float32)
    fut = client.submit(zctasks.where_after, str(go), {"a": a})
    del a
    go.touch()
    assert fut.result(60)["a"][1] == float(N)


def test_an_array_larger_than_the_store_falls_back_to_malloc(client):
    refused = stats()["refused"]
    big = np.empty(2 << 30, np.uint8)  # more than the 1 GiB store; untouched
    assert store_offset(big) is None
    assert stats()["refused"] == refused + 1
    del big


def test_a_forked_child_writes_privately(client):
    unsent = np.full(N, 1.0, np.float32)
    sent = np.full(N, 1.0, np.float32)
    client.submit(zctasks.where, {"a": sent}).result(60)  # sealed now
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        ok = unsent[0] == 1.0 and sent[-1] == 1.0
        unsent[:] = 7.0
        sent[:] = 7.0
        os.write(w, b"1" if ok else b"0")
        os._exit(0)
    os.close(w)
    got = os.read(r, 1)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    assert status == 0 and got == b"1"
    assert unsent[0] == 1.0 and unsent[-1] == 1.0
    assert sent[0] == 1.0
    # The parent's arrays still work with tasks.
    assert client.submit(zctasks.where, {"a": unsent}).result(60)["a"][1] == \
        float(N)


def test_the_node_stopping_while_arrays_live_does_not_crash_the_client():
    here = os.path.dirname(os.path.abspath(__file__))
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {here!r})
        import numpy as np
        import shoal
        from shoal import _zero_copy
        import zctasks
        from valtasks import store_offset
        node = shoal.start_node(1, store_bytes="256M")
        c = shoal.connect(job_id=node.job_id)
        d = {{"a": np.ones({N}, np.float32), "b": np.ones({N}, np.float32)}}
        assert store_offset(d["a"]) is not None
        c.submit(zctasks.where, d).result(60)
        node.stop()
        d["a"][:] = 2.0          # sealed: private pages
        d["b"][:] = 3.0
        assert float(d["a"].sum()) == 2.0 * {N}
        later = np.ones({N}, np.float32)  # the store is gone: malloc
        assert store_offset(later) is None
        del d, later
        print("ok", _zero_copy.stats()["live"])
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["ok", "0"]


def test_malformed_slices_are_invalid_argument():
    """A call whose zero-copy slice table names a missing buffer, runs past
    its object, or is cut short fails with InvalidArgumentError."""
    from shoal import _serialize
    obj = bytearray(4096)
    good = _serialize._with_slices(b"pickle", [(0, 100, 200)])
    header, bufs = _serialize._sliced(good, [obj])
    assert bytes(header) == b"pickle" and bufs[0].nbytes == 200
    for bad, buffers in [
            (_serialize._with_slices(b"p", [(1, 0, 10)]), [obj]),  # no buffer 1
            (_serialize._with_slices(b"p", [(0, 4000, 200)]), [obj]),  # past end
            (good[:12], [obj]),  # cut short
    ]:
        with pytest.raises(shoal.InvalidArgumentError):
            _serialize._sliced(bad, buffers)
