"""shoal.put of any picklable object, as Ray users call ray.put: a ValueRef
whose shoal.get is the object, passed to many tasks (its value at the top of
the arguments, a ref inside containers), its arrays read in place from the
store by the driver and by every task."""

import gc
import threading

import numpy as np
import pytest

import raytasks
import shoal


def model():
    return raytasks.Model("m", {"big": np.arange(1 << 18, dtype=np.float64),
                                "small": np.ones(8, dtype=np.float32)})


def test_put_get_any_object_views_the_store(client):
    ref = shoal.put(model())
    assert isinstance(ref, shoal.ValueRef)
    back = shoal.get(ref)
    assert type(back) is raytasks.Model and back.name == "m"
    big = back.weights["big"]
    assert float(big.sum()) == float(np.arange(1 << 18).sum())
    assert raytasks.in_store(big) and not big.flags.writeable
    assert shoal.get(ref) is not back  # a new object at each get
    # Plain objects, with no buffers at all.
    for value in ({"x": 1, "y": [1, 2]}, "text", (1, None), {3, 4}):
        assert shoal.get(shoal.put(value)) == value
    # Arrays stay ObjectRefs, as before.
    assert isinstance(shoal.put(np.ones(4)), shoal.ObjectRef)
    assert isinstance(shoal.put(b"bytes"), shoal.ObjectRef)
    with pytest.raises(shoal.InvalidArgumentError,
                       match=r"put: a _thread\.lock is neither"):
        shoal.put(threading.Lock())


def test_one_ref_to_many_tasks_reads_in_place(client):
    ref = shoal.put(model())
    futures = [client.submit(raytasks.summarize, ref) for _ in range(8)]
    total = float(np.arange(1 << 18).sum())
    for f in futures:
        name, sums, in_place, writable = f.result(60)
        assert (name, sums) == ("m", [total, 8.0])
        assert in_place, "a task's array was a copy, not the store's"
        assert writable[0] is False  # (the small one is a copy in the pickle)
    # A remote function, keyword arguments, a lambda: the value too.
    assert client.submit(lambda m=None: m.name, m=ref).result(60) == "m"


def test_nested_ref_stays_a_ref(client):
    ref = shoal.put(model())
    assert client.submit(raytasks.read_nested, {"ref": ref}).result(60) == \
        ("ValueRef", "m")


def test_ref_dropped_after_submit_still_reaches_the_task(client):
    futures = [client.submit(raytasks.summarize, shoal.put(model()))
               for _ in range(4)]
    gc.collect()
    for f in futures:
        assert f.result(60)[0] == "m"


def test_a_large_pickle_lives_in_the_store_too(client):
    big = {"ids": list(range(100_000)), "name": "x"}  # no buffers: a long pickle
    ref = shoal.put(big)
    assert isinstance(ref._header, shoal.ObjectRef)  # not carried inline
    assert shoal.get(ref) == big
    assert client.submit(lambda d: (len(d["ids"]), d["name"]), ref).result(
        60) == (100_000, "x")
    assert client.submit(lambda box: len(shoal.get(box[0])["ids"]),
                         [ref]).result(60) == 100_000
