"""Generator tasks, as Ray's streaming generators: a remote function that
yields gives an iterator of futures, item i readable before the task ends;
large items travel as store objects; a caller that does not read holds the
task back (at most _stream.WINDOW items ahead). Each test runs for a client
on the node's machine and for one through the frontend (as off the
machine: items through a relay actor)."""

import os
import time

import numpy as np
import pytest

import shoal
from shoal import _stream
import ctltasks


@pytest.fixture(scope="module")
def node():
    with shoal.start_node(2, store_bytes="256M") as n:
        yield n


@pytest.fixture(params=["local", "remote"])
def client(node, request):
    c = shoal.connect(job_id=node.job_id,
                      force_remote=request.param == "remote")
    assert c.local == (request.param == "local")
    yield c
    shoal.disconnect()


def test_items_arrive_before_the_task_ends(client, tmp_path):
    gate = str(tmp_path / "gate")
    gen = ctltasks.stream_up.remote(5, gate)
    first = next(gen)
    second = next(gen)
    assert (first.result(0), second.result(0)) == (0, 1)
    # The task waits for the gate before item 2: it has not finished.
    time.sleep(0.2)
    assert not gen.task.done()
    open(gate, "w").close()
    assert [f.result(0) for f in gen] == [2, 3, 4]
    assert gen.task.result(30) == 5


def test_large_items_come_through_the_store(client):
    size = 100_000  # 800 KB each: over INLINE_BYTES
    items = [f.result(0) for f in ctltasks.stream_big.remote(6, size)]
    assert len(items) == 6
    for i, a in enumerate(items):
        assert a.shape == (size,) and (a == i).all()
        if client.local:
            assert not a.flags.writeable  # a view of the store object


def test_an_error_after_items_comes_last(client):
    gen = ctltasks.stream_failing.remote(3)
    assert [next(gen).result(0) for _ in range(3)] == [0, 1, 2]
    last = next(gen)
    with pytest.raises(KeyError, match="after the items"):
        last.result(0)
    with pytest.raises(StopIteration):
        next(gen)


def test_a_caller_that_does_not_read_holds_the_task(client, tmp_path):
    path = str(tmp_path / "produced")
    n = _stream.WINDOW * 4
    gen = ctltasks.stream_produced.remote(path, n)
    deadline = time.monotonic() + 30
    while not os.path.exists(path):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    time.sleep(0.5)
    ahead = int(open(path).read())
    # WINDOW sent and unacknowledged, and the one it is blocked sending.
    assert ahead <= _stream.WINDOW + 1
    assert not gen.task.done()
    assert [f.result(0) for f in gen] == list(range(n))
    assert gen.task.result(30) == n


def test_a_plain_function_with_num_returns_streaming(client):
    def pairs(k):
        for i in range(k):
            yield (i, i * i)
    up = shoal.remote(num_returns="streaming")(pairs)
    assert [f.result(0) for f in up.remote(4)] == \
        [(0, 0), (1, 1), (2, 4), (3, 9)]


def test_a_dropped_stream_ends_its_task(client, tmp_path):
    path = str(tmp_path / "produced")
    gen = ctltasks.stream_produced.remote(path, 10_000)
    assert next(gen).result(0) == 0
    task = gen.task
    gen.close()
    assert 1 <= task.result(30) < 10_000
