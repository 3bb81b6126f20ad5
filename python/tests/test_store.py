"""put / get through the node's store: zero-copy views, lifetimes, dtypes."""

import os
import pickle
import subprocess
import sys
import time

import numpy as np
import pytest

import pytasks
import shoal


def test_get_is_a_read_only_view_of_the_put_object(client):
    a = np.arange(100_000, dtype=np.float32)
    ref = shoal.put(a)
    assert (ref.dtype, ref.shape, ref.nbytes) == ("f32", (100_000,), 400_000)
    v = shoal.get(ref)
    assert isinstance(v, shoal.StoreArray)
    assert v.__array_interface__["data"][0] == ref.address  # no copy
    assert not v.flags.writeable
    with pytest.raises(ValueError):
        v[0] = 1
    np.testing.assert_array_equal(v, a)
    assert np.asarray(ref).__array_interface__["data"][0] == ref.address
    assert memoryview(ref).readonly


def test_a_consumer_process_maps_the_same_bytes(client):
    """Zero-copy across processes: the worker's argument array lies in its
    own mapping of the segment at the object's offset — the bytes the
    producer wrote, not a copy."""
    ref = shoal.put(np.full(1 << 20, 3, dtype=np.float32))
    mine = pytasks.store_offset(shoal.get(ref))
    assert mine >= 0
    theirs = client.submit(pytasks.store_offset, ref).result(30)
    assert theirs == mine
    # A numpy view of a whole object passes by reference too.
    assert client.submit(pytasks.store_offset, shoal.get(ref)).result(30) == mine


def test_get_cost_does_not_grow_with_size(client):
    def median_get_seconds(ref, n=50):
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            shoal.get(ref)
            times.append(time.perf_counter() - t0)
        return sorted(times)[n // 2]

    small = shoal.put(np.zeros(1 << 10, np.uint8))
    large = shoal.put(np.zeros(256 << 20, np.uint8))
    t_small, t_large = median_get_seconds(small), median_get_seconds(large)
    # A copy of 256 MiB takes tens of milliseconds; a view, microseconds.
    assert t_large < 1e-3, (t_small, t_large)
    assert t_large < 20 * t_small + 200e-6, (t_small, t_large)
    del large


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64,
                                   np.int8, np.int16, np.int32, np.int64,
                                   np.uint8, np.bool_])
def test_dtypes_round_trip(client, dtype):
    a = (np.arange(24) % 5).astype(dtype).reshape(2, 3, 4)
    v = shoal.get(shoal.put(a))
    assert v.dtype == a.dtype and v.shape == a.shape
    np.testing.assert_array_equal(v, a)


def test_strided_arrays_are_stored_contiguously(client):
    a = np.arange(100, dtype=np.int64).reshape(10, 10)[::2, 1::3]
    v = shoal.get(shoal.put(a))
    assert v.flags.c_contiguous
    np.testing.assert_array_equal(v, a)


def test_other_dtypes_and_objects_are_pickled(client):
    # No store dtype: pickled (shoal.put takes any picklable object).
    a = np.arange(4, dtype=np.complex64)
    ref = shoal.put(a)
    assert isinstance(ref, shoal.ValueRef)
    np.testing.assert_array_equal(shoal.get(ref), a)
    assert shoal.get(shoal.put([1, 2, 3])) == [1, 2, 3]
    # A dtype to reinterpret as still needs an array of its element size.
    with pytest.raises(shoal.InvalidArgumentError, match="no shoal dtype"):
        shoal.put(np.zeros(4, dtype=np.complex64), dtype="f32")


def test_views_keep_the_object_alive(client):
    ref = shoal.put(np.arange(10, dtype=np.int64))
    object_id = ref.id
    v = shoal.get(ref)
    del ref
    np.testing.assert_array_equal(v, np.arange(10))
    assert shoal.borrow(object_id).id == object_id  # still there
    del v
    # The owner's last reference went: the object is deleted.
    with pytest.raises(shoal.NotFoundError):
        shoal.borrow(object_id)


def test_refs_pickle_to_processes_on_the_node(client, node):
    ref = shoal.put(np.arange(5, dtype=np.float64))
    assert pickle.loads(pickle.dumps(ref)).id == ref.id
    script = (
        "import pickle, sys, shoal\n"
        f"shoal.connect(job_id={node.job_id!r})\n"
        "ref = pickle.loads(sys.stdin.buffer.read())\n"
        "print(shoal.get(ref).sum())\n")
    out = subprocess.run([sys.executable, "-c", script],
                         input=pickle.dumps(ref), capture_output=True,
                         check=True, timeout=60)
    assert out.stdout.decode().strip() == "10.0"


def test_get_by_id_waits_for_the_object(client):
    with pytest.raises(shoal.TimeoutError):
        shoal.get("00" * 16, timeout=0.2)
    with pytest.raises(shoal.NotFoundError):
        shoal.get("00" * 16)


def test_torch_tensors_put_and_come_back(client):
    torch = pytest.importorskip("torch")
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    np.testing.assert_array_equal(shoal.get(shoal.put(t)), t.numpy())
    b = torch.tensor([1.5, -2.25, 3.0], dtype=torch.bfloat16)
    ref = shoal.put(b)
    assert ref.dtype == "bf16"
    assert torch.equal(torch.from_dlpack(ref), b)
    flags = torch.tensor([True, False, True])
    assert shoal.get(shoal.put(flags)).tolist() == [True, False, True]
