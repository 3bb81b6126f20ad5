"""Functions a worker cannot import by name go by value (cloudpickle):
lambdas, closures, nested functions, bound methods, callables, functions
of `python -c`; pickled once per client and unpickled once per worker"""

import functools
import os
import subprocess
import sys

import numpy as np

import shoal
import valtasks
from shoal import _client


class Scaler:
    def __init__(self, k):
        self.k = k

    def scale(self, x):
        return x * self.k

    def __call__(self, x):
        return x + self.k


def test_module_level_functions_still_go_by_name(client):
    assert _client.task_name(valtasks.square) == "py:valtasks:square"
    before = dict(client.function_stats)
    assert client.submit(valtasks.square, 7).result(30) == 49
    assert client.function_stats == before


def test_lambdas_closures_nested_functions(client):
    assert client.submit(lambda: 42).result(30) == 42
    base = {"offset": 5}
    assert client.submit(lambda x: x + base["offset"], 1).result(30) == 6

    def outer(n):
        def inner(x):
            return x * n
        return inner
    assert client.submit(outer(3), 4).result(30) == 12
    assert client.submit(lambda a: a.sum(), np.ones(10)).result(30) == 10


def test_bound_methods_and_callables(client):
    s = Scaler(3)
    assert client.submit(s.scale, 5).result(30) == 15
    assert client.submit(s, 5).result(30) == 8
    assert client.submit(functools.partial(valtasks.total, b=1.5),
                         np.ones(2)).result(30) == 3.5


def test_a_closure_is_pickled_and_transferred_once(client):
    """200 submits of one closure: pickled once by the client, put into the
    store once, unpickled at most once by each worker (its count of loaded
    functions does not move across the calls it ran)."""
    factor = 3

    def probe(x):
        import _shoal_task
        return x * factor, _shoal_task.worker_id(), \
            _shoal_task.functions_loaded()

    stats = dict(client.function_stats)
    futures = [client.submit(probe, i) for i in range(200)]
    rows = [f.result(60) for f in futures]
    assert [r[0] for r in rows] == [3 * i for i in range(200)]
    assert client.function_stats["pickled"] == stats["pickled"] + 1
    assert client.function_stats["stored"] == stats["stored"] + 1
    loaded = {}
    for _, worker, count in rows:
        loaded.setdefault(worker, set()).add(count)
    assert all(len(counts) == 1 for counts in loaded.values()), loaded

    # The same code with the same values from a new function object: the
    # client pickles it again, but the content is known: nothing new stored.
    def make():
        def probe2(x):
            return x + 1
        return probe2
    assert client.submit(make(), 1).result(30) == 2
    stored = client.function_stats["stored"]
    assert client.submit(make(), 2).result(30) == 3
    assert client.function_stats["stored"] == stored

    # Rebinding a closure variable is seen: the function is pickled again.
    factor = 10
    assert client.submit(probe, 2).result(30)[0] == 20


def test_a_closure_sent_before_takes_the_fast_path(node):
    """A closure submitted again (the same object, unchanged) takes
    submit's fast path: from a local client as "py:=<object>" with plain
    or pickled arguments, from a remote one carried in the call envelope
    ("py:#<hash>!") every time; a rebinding is still seen."""
    offset = 5

    def add(d):
        return (d["x"] if isinstance(d, dict) else d) + offset

    for force_remote in (False, True):
        c = shoal.connect(job_id=node.job_id, force_remote=force_remote)
        try:
            assert c.local is not force_remote
            pickled = c.function_stats["pickled"]
            got = [c.submit(add, {"x": i}).result(30) for i in range(3)] + \
                [c.submit(add, i).result(30) for i in range(3)]
            assert got == [5, 6, 7, 5, 6, 7]
            assert c.function_stats["pickled"] == pickled + 1
            offset = 50
            assert c.submit(add, 1).result(30) == 51
            offset = 5
        finally:
            shoal.disconnect()


def test_functions_of_python_dash_c(node, tmp_path):
    code = (
        "import shoal\n"
        f"c = shoal.connect(job_id={node.job_id!r})\n"
        "def triple(x):\n"
        "    return 3 * x\n"
        "print(c.submit(triple, 14).result(60))\n"
        "print(sorted(c.map(lambda x: -x, [1, 2, 3], chunksize=2)))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True,
                         text=True, timeout=120, cwd=str(tmp_path),
                         env=dict(os.environ))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["42", "[-3, -2, -1]"]
