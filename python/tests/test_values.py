"""Any picklable argument and return value, end to end on a real node: the
plain values as before, everything else pickled (protocol 5), with numpy
arrays and torch CPU tensors inside containers put into the store once and
viewed in place by the worker."""

import fractions
import sys

import numpy as np
import pytest

import shoal
import valtasks
from shoal import _serialize, _zero_copy

torch = pytest.importorskip("torch")

STORE_MAPPING = "-store"  # /dev/shm/shoal-<job>-store


VALUES = [
    {"x": 1, "y": "s"},
    [1, 2.5, "three", None, b"four"],
    (1, (2, [3, {"four": 4}])),
    {1, 2, 3},
    frozenset({"a"}),
    1 << 100,  # beyond int64: pickled, not an error
    3 + 4j,
    fractions.Fraction(1, 3),
    {"nested": {"deeper": [{"k": (1, 2)}]}},
    [],
    {},
    range(5),
    valtasks.Point(3, "p", [1, 2]),
]


@pytest.mark.parametrize("value", VALUES, ids=lambda v: type(v).__name__)
def test_round_trip(client, value):
    back = client.submit(valtasks.echo, value).result(30)
    assert back == value and type(back) is type(value)


def test_plain_values_keep_their_fast_path(client):
    assert client.submit(valtasks.type_names, 1, 2.0, "s", b"b", None,
                         True, np.zeros(3)).result(30) == (
        ["int", "float", "str", "bytes", "NoneType", "bool", "ndarray"], {})
    # A tuple of plain values comes back as a tuple, as before; a
    # buffer-protocol result as an array (a bytearray as bytes).
    assert client.submit(valtasks.echo, 1, "a").result(30) == (1, "a")
    assert client.submit(valtasks.echo, bytearray(b"xy")).result(30) == b"xy"


def test_keyword_arguments(client):
    args, kwargs = client.submit(valtasks.echo, 1, k={"v": [2]}).result(30)
    assert args == (1,) and kwargs == {"k": {"v": [2]}}
    assert client.submit(valtasks.total, np.ones(4), b=2).result(30) == 6.0


def test_nested_arrays_and_dataclass(client):
    a = np.arange(10, dtype=np.float32)
    big = np.random.default_rng(0).standard_normal((512, 256))
    value = {"small": a, "big": [big, {"again": big[::2]}],
             "point": valtasks.Point(1, "q", big)}
    back = client.submit(valtasks.echo, value).result(60)
    np.testing.assert_array_equal(back["small"], a)
    np.testing.assert_array_equal(back["big"][0], big)
    np.testing.assert_array_equal(back["big"][1]["again"], big[::2])
    assert isinstance(back["point"], valtasks.Point)
    np.testing.assert_array_equal(back["point"].data, big)


def test_torch_tensors_in_containers(client):
    t = torch.arange(100_000, dtype=torch.float32).reshape(1000, 100)
    half = torch.ones(40_000, dtype=torch.bfloat16)
    small = torch.tensor([1, 2, 3])
    back = client.submit(valtasks.echo, {"t": t, "bf": half,
                                         "small": small}).result(60)
    assert isinstance(back["t"], torch.Tensor)
    assert torch.equal(back["t"], t)
    assert back["bf"].dtype == torch.bfloat16 and torch.equal(back["bf"], half)
    assert torch.equal(back["small"], small)
    grad = torch.ones(3, requires_grad=True)
    assert client.submit(valtasks.echo, [grad]).result(30)[0].requires_grad


def test_large_arrays_are_viewed_in_place_in_the_worker(client):
    """The worker's arrays lie inside the store's shared-memory mapping
    (read-only), not in a copy; torch tensors too."""
    a = np.arange(1 << 20, dtype=np.float32)  # 4 MiB
    b = np.ones((1024, 1024), dtype=np.float64)  # 8 MiB
    t = torch.full((1 << 18,), 2.0)  # 1 MiB
    where = client.submit(valtasks.where_are,
                          {"a": a, "b": b, "t": t}).result(60)
    for key, expected_sum in (("a", float(a.sum())), ("b", float(b.sum())),
                              ("t", float(t.sum()))):
        path, writeable, total = where[key]
        assert path.startswith("/dev/shm/shoal-") and \
            path.endswith(STORE_MAPPING), (key, path)
        assert total == expected_sum
        if key != "t":
            assert writeable is False
    # Small arrays stay in the pickle stream: the worker's own memory.
    small = client.submit(valtasks.where_are,
                          {"s": np.arange(10.0)}).result(30)["s"]
    assert not small[0].endswith(STORE_MAPPING)


def test_large_result_arrays_are_store_views_in_the_client(client):
    n = 1 << 20
    back = client.submit(lambda: {"a": np.full(n, 3.0, np.float32)}
                         ).result(60)["a"]
    assert back.sum() == 3.0 * n and not back.flags.writeable
    assert valtasks.mapping_of(valtasks.array_address(back)).endswith(
        STORE_MAPPING)


def test_buffers_leave_the_pickle_stream():
    """Large buffers go out of band (into the store, by the client), so the
    pickle itself stays small; small ones stay in band."""
    with _zero_copy.paused():  # malloc'd (zero-copy arrays: test_zero_copy)
        a = np.zeros(1 << 20, dtype=np.uint8)
        t = torch.zeros(1 << 18)
    header, buffers = _serialize.dumps({"a": a, "t": t, "s": np.zeros(8)})
    assert len(header) < 2048
    assert sorted(b.nbytes for b in buffers) == [1 << 20, 1 << 20]
    # A remote client has no store: everything in band.
    header, buffers = _serialize.dumps({"a": a}, out_of_band=False)
    assert len(header) > (1 << 20) and not buffers


def test_submitting_many_dicts_holds_nothing_back(client):
    futures = [client.submit(valtasks.echo, {"i": i, "s": str(i)})
               for i in range(300)]
    assert [f.result(60)["i"] for f in futures] == list(range(300))
    assert sys.getrefcount(futures[0]) > 0


def test_a_known_function_takes_pickled_calls_on_the_fast_path(client):
    """Once the client knows a function by name, submit(f, value) pickles
    the call at once (Client._submit_plain): small values inline in the
    task, large arrays still out of band in the store, a Future still
    waited for, and an unpicklable argument still named at submit."""
    import threading
    assert client.submit(valtasks.echo, 1).result(30) == 1  # name known
    small = {"x": 1, "y": "s"}
    assert client.submit(valtasks.echo, small).result(30) == small
    a = np.arange(1 << 18, dtype=np.float32)  # 1 MiB: out of band
    where = client.submit(valtasks.where_are, {"a": a}).result(60)
    assert where["a"][0].endswith(STORE_MAPPING)
    first = client.submit(valtasks.echo, [1, 2])
    assert client.submit(valtasks.echo, first).result(30) == [1, 2]
    with pytest.raises(shoal.InvalidArgumentError, match="argument 0"):
        client.submit(valtasks.echo, threading.Lock())
    assert client.submit(valtasks.echo, small).result(30) == small


def test_small_calls_pickled_by_the_extension_load_as_pickle_would():
    """submit_small_call writes the call envelope itself for plain values in
    exact dicts, lists and tuples: pickle.loads reads back equal values of
    the same types; anything else is left to the Python pickler (None)."""
    import enum
    import math
    import pickle
    from shoal import _ext
    pickle_call = _ext._shoal._pickle_small_call
    for args in [(), (None, True, False), ({"x": 1, "y": "s"},),
                 (0, 255, 256, 65535, 65536, -1, -2**31, 2**31 - 1, 2**31,
                  -2**31 - 1, 2**63 - 1, -2**63),
                 (1.5, -0.0, float("inf")), ("", "é日本", "x" * 256),
                 (b"", b"\0" * 300), ([1, [2, [3]]], {(1, 2): [None]}),
                 ((1,), (1, 2), (1, 2, 3), (1, 2, 3, 4)), ([], {})]:
        for fn_bytes in (None, b"fn"):
            data = pickle_call(fn_bytes, args)
            assert data is not None, args
            back = pickle.loads(data)
            assert back == (fn_bytes, args, {}), args
            assert [type(a) for a in back[1]] == [type(a) for a in args]
    assert math.isnan(pickle.loads(pickle_call(None, (math.nan,)))[1][0])

    class Color(enum.IntEnum):
        RED = 1

    class Name(str):
        pass

    shared = [1]
    looped = []
    looped.append(looped)
    deep = 1
    for _ in range(20):
        deep = [deep]
    for args in [(2**63,), (-2**63 - 1,), ([shared, shared],), (looped,),
                 ("\ud800",), (bytearray(b"x"),), (Color.RED,),
                 ({"k": Name("n")},), (np.float64(1.0),), (b"x" * 9000,),
                 (deep,)]:
        assert pickle_call(None, args) is None, args


def _deep_types(v):
    """v's types, recursively, for comparing two readings of one pickle."""
    if isinstance(v, (list, tuple)):
        return (type(v), [_deep_types(x) for x in v])
    if isinstance(v, dict):
        return (type(v), [(_deep_types(k), _deep_types(x))
                          for k, x in v.items()])
    return type(v)


def test_small_calls_read_by_the_worker_as_pickle_reads_them():
    """The worker reads submit_small_call's pickles without the pickle
    module: equal values of the same types (dict order too) as
    pickle.loads; any other pickle, or a damaged one, it leaves to
    pickle.loads (None here), never half-read."""
    import math
    import pickle
    import random
    from shoal import _ext
    pickle_call = _ext._shoal._pickle_small_call
    read = _ext._shoal._unpickle_small_call
    cases = [(), (None, True, False), ({"x": 1, "y": "s"},),
             (0, 255, 256, 65535, 65536, -1, -255, -256, -2**31, 2**31 - 1,
              2**31, -2**31 - 1, 2**63 - 1, -2**63, 2**32, -2**40),
             (1.5, -0.0, float("inf"), -1e300), ("", "é日本", "x" * 256),
             (b"", b"\0" * 300, b"y" * 255), ([1, [2, [3]]], {(1, 2): [None]}),
             ((1,), (1, 2), (1, 2, 3), (1, 2, 3, 4)), ([], {}, ((),)),
             ({"b": 1, "a": 2, 3: [{}], None: (1.0,), b"k": "v"},),
             ("\U0001f600", [True, False] * 50)]
    for args in cases:
        for fn_bytes in (None, b"fn"):
            data = pickle_call(fn_bytes, args)
            mine = read(data)
            theirs = pickle.loads(data)
            assert mine == theirs == (fn_bytes, args, {}), args
            assert _deep_types(mine) == _deep_types(theirs), args
            assert [list(d) for d in mine[1] if type(d) is dict] == \
                [list(d) for d in args if type(d) is dict]
    assert math.isnan(read(pickle_call(None, (math.nan,)))[1][0])
    # Other pickles: the pickle module's own writing of the same call, a
    # memo, a frame, an object: left to pickle.loads.
    for other in [pickle.dumps((None, ({"x": 1},), {}), 5),
                  pickle.dumps((None, ([1], [1]), {}), 2),
                  pickle.dumps(({1, 2},), 5), b"", b"\x80", b"\x80\x05."]:
        assert read(other) is None, other
    # Damaged: every truncation, and bytes changed at random, read as None
    # or as pickle.loads reads them; an unhashable key is refused, no error
    # left behind.
    data = pickle_call(b"fn", ({"k": [1, "two", b"3", 4.0, (5, None)]},
                               "x" * 300))
    for n in range(len(data)):
        assert read(data[:n]) is None
    assert read(data + b".") is None
    rng = random.Random(7)
    for _ in range(3000):
        bad = bytearray(data)
        for _ in range(rng.randint(1, 3)):
            bad[rng.randrange(2, len(bad))] = rng.randrange(256)
        mine = read(bytes(bad))
        if mine is not None:
            assert mine == pickle.loads(bytes(bad))
    unhashable = b"\x80\x05}(]]u."  # {[]: []}
    assert read(unhashable) is None
    with pytest.raises(TypeError):
        pickle.loads(unhashable)


def test_small_calls_keep_identity_and_types_end_to_end(client):
    """What the extension's pickler refuses still goes, by pickle: a list
    shared twice stays one list, an IntEnum stays an IntEnum."""
    import signal
    assert client.submit(valtasks.echo, 1).result(30) == 1  # name known
    shared = [1]
    assert client.submit(valtasks.pair_is_shared,
                         {"pair": [shared, shared]}).result(30) is True
    assert client.submit(valtasks.pair_is_shared,
                         {"pair": [[1], [1]]}).result(30) is False
    value = {"k": (1, "a", b"b", 2.5, None, [True])}
    assert client.submit(valtasks.echo, value).result(30) == value
    back = client.submit(valtasks.echo, [signal.SIGINT]).result(30)
    assert type(back[0]) is signal.Signals  # an IntEnum
