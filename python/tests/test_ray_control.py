"""Control of running tasks, as Ray's: shoal.cancel(f, force=True) stops a
task that never checks for cancellation (an asynchronous exception in pure
Python; C code such as time.sleep only by killing its worker, which the node
replaces), and nothing else on the node is lost. Each test runs against a
real node whose grace period is 1 s."""

import os
import time

import numpy as np
import pytest

import shoal
import ctltasks

GRACE_S = 1.0


@pytest.fixture(scope="module")
def node():
    env = dict(os.environ, SHOAL_FORCE_CANCEL_GRACE_MS=str(int(GRACE_S * 1e3)))
    with shoal.start_node(2, store_bytes="256M", env=env) as n:
        yield n


@pytest.fixture(scope="module")
def client(node):
    c = shoal.connect(job_id=node.job_id)
    for f in [c.submit(ctltasks.slow_square, i) for i in range(2)]:
        f.result(60)
    yield c
    shoal.disconnect()


def _started(path, timeout=30):
    deadline = time.monotonic() + timeout
    while not os.path.exists(path) or os.path.getsize(path) == 0:
        assert time.monotonic() < deadline, "the task did not start"
        time.sleep(0.01)
    return int(open(path).read())


def _restarts(client):
    return sum(w["restarts"] for w in client.status()["workers"])


def _cancel_running(client, tmp_path, fn):
    """Starts fn on one worker while the other has queued work and the store
    holds another task's result; force-cancels fn. Returns (the future, the
    seconds until it failed, the worker pid it ran on, the queued futures,
    the held result)."""
    held = client.submit(np.arange, 300_000)  # an output in the store
    held_value = held.result(30)
    path = str(tmp_path / "started")
    f = client.submit(fn, path)
    pid = _started(path)
    queued = [client.submit(ctltasks.slow_square, i) for i in range(20)]
    t0 = time.monotonic()
    assert shoal.cancel(f, force=True)
    with pytest.raises(shoal.CancelledError, match="force=True"):
        f.result(30)
    took = time.monotonic() - t0
    assert f.cancelled()
    assert [q.result(60) for q in queued] == [i * i for i in range(20)]
    assert np.array_equal(held_value, np.arange(300_000))
    assert np.array_equal(held.result(0), np.arange(300_000))
    return f, took, pid


def test_force_cancel_stops_a_busy_loop(client, tmp_path):
    before = _restarts(client)
    _, took, pid = _cancel_running(client, tmp_path, ctltasks.spin)
    assert took < GRACE_S  # the interrupt stopped it, not the kill
    assert _restarts(client) == before
    os.kill(pid, 0)  # its worker lives on


def test_except_exception_does_not_catch_the_interrupt(client, tmp_path):
    before = _restarts(client)
    _, took, _ = _cancel_running(client, tmp_path, ctltasks.spin_catching)
    assert took < GRACE_S
    assert _restarts(client) == before


def test_force_cancel_kills_a_worker_in_c_code(client, tmp_path):
    before = _restarts(client)
    _, took, pid = _cancel_running(client, tmp_path, ctltasks.sleep_long)
    assert took >= GRACE_S * 0.9  # it waited out the grace period
    deadline = time.monotonic() + 30
    while True:  # the killed worker's process is gone, a new one serves
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        assert time.monotonic() < deadline
        time.sleep(0.05)
    while _restarts(client) != before + 1:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    # Both workers run tasks again.
    fs = [client.submit(ctltasks.slow_square, i) for i in range(8)]
    assert [f.result(60) for f in fs] == [i * i for i in range(8)]


def test_plain_cancel_of_a_running_task_does_not_interrupt(client, tmp_path):
    path = str(tmp_path / "started")
    f = client.submit(ctltasks.sleep_long, path)
    _started(path)
    before = _restarts(client)
    assert shoal.cancel(f)
    time.sleep(GRACE_S * 1.5)
    assert not f.done()  # it never checks: a plain cancel only flags it
    assert _restarts(client) == before
    assert shoal.cancel(f, force=True)  # a plain cancel made forced
    with pytest.raises(shoal.CancelledError):
        f.result(30)
