"""DLPack: torch and numpy take store objects and views without a copy."""

import numpy as np
import pytest

import shoal

torch = pytest.importorskip("torch")


def test_torch_from_dlpack_shares_the_store_memory(client):
    a = np.arange(1 << 16, dtype=np.float32)
    ref = shoal.put(a)
    t = torch.from_dlpack(ref)
    assert t.data_ptr() == ref.address
    assert t.dtype == torch.float32 and tuple(t.shape) == a.shape
    assert float(t.sum()) == float(a.sum())
    assert ref.__dlpack_device__() == (1, 0)


def test_torch_from_dlpack_of_a_view_and_of_a_slice(client):
    ref = shoal.put(np.arange(100, dtype=np.int64).reshape(10, 10))
    view = shoal.get(ref)
    t = torch.from_dlpack(view)
    assert t.data_ptr() == ref.address
    part = view[2:5, ::3]  # a strided view: still the same memory
    tp = torch.from_dlpack(part)
    assert tp.data_ptr() == ref.address + (2 * 10) * 8
    assert tp.tolist() == part.tolist()


def test_the_tensor_keeps_the_object_alive(client):
    ref = shoal.put(np.full(1000, 7, dtype=np.int32))
    object_id = ref.id
    t = torch.from_dlpack(ref)
    del ref
    assert shoal.borrow(object_id).id == object_id
    assert int(t.sum()) == 7000
    del t
    with pytest.raises(shoal.NotFoundError):
        shoal.borrow(object_id)


def test_numpy_from_dlpack_shares_the_store_memory(client):
    ref = shoal.put(np.arange(10, dtype=np.float64))
    n = np.from_dlpack(ref)
    assert n.__array_interface__["data"][0] == ref.address
    np.testing.assert_array_equal(n, np.arange(10))


def test_task_results_export_dlpack(client):
    import pytasks
    r = client.submit(pytasks.zeros, 1 << 20, "float32").result(30)
    assert isinstance(r, shoal.StoreArray)
    t = torch.from_dlpack(r)
    assert t.data_ptr() == r.__array_interface__["data"][0]
    assert t.numel() == 1 << 20


def test_small_task_results_export_dlpack_too(client):
    """Results up to 64 KiB travel inline (a private read-only copy, which
    numpy's own __dlpack__ would refuse): they export DLPack all the same."""
    import pytasks
    r = client.submit(pytasks.scale, np.arange(4, dtype=np.float32), 2).result(30)
    assert not r.flags.writeable
    t = torch.from_dlpack(r)
    assert t.data_ptr() == r.__array_interface__["data"][0]
    assert t.tolist() == [0.0, 2.0, 4.0, 6.0]
    np.testing.assert_array_equal(np.from_dlpack(r), [0, 2, 4, 6])
