"""shoal's types as a user's type checker sees them, and the base-class
protocol shoal.Future relies on (concurrent.futures.Future's private
attributes, which concurrent.futures.wait and as_completed read).

The type tests run the real mypy (Debian's) on small programs using the
public API, with the repository's configuration (pyproject.toml's
[tool.mypy]); they are skipped, saying why, where mypy is absent. None of
these tests needs a node."""

import concurrent.futures
import os
import shutil
import subprocess
import textwrap

import pytest

from shoal import _future

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))

GOOD = '''
import concurrent.futures
from typing import Any, Optional, assert_type

import numpy as np

import shoal


def square(x: int) -> int:
    return x * x


@shoal.remote
def cube(x: int) -> int:
    return x ** 3


@shoal.remote(num_cpus=1, max_retries=2)
def half(x: float) -> float:
    return x / 2


class CounterImpl:
    def __init__(self, start: int) -> None:
        self.n = start

    def add(self, k: int) -> int:
        self.n += k
        return self.n


# (mypy keeps a decorated class's own type: it does not apply a class
# decorator's return type, so the ActorClass is typed by a call.)
Counter = shoal.remote(CounterImpl)


def main(timeout: Optional[float]) -> None:
    client = shoal.connect()
    f = client.submit(square, 3)
    assert_type(f, shoal.Future[int])
    assert_type(f.result(timeout=60), int)
    g = shoal.submit(square, 4)
    assert_type(g.result(timeout), int)
    h = client.submit_with({"timeout": 5}, square, 5)
    assert_type(h, shoal.Future[int])
    done, pending = shoal.wait([f, g], timeout=1.5, num_returns=1)
    assert_type(done, list[shoal.Future[int]])
    done, pending = client.wait([f, g])
    for x in shoal.as_completed([f, g], timeout=None):
        assert_type(x.result(), int)
    concurrent.futures.wait([f, g], timeout=2)
    for y in concurrent.futures.as_completed([f, g]):
        assert_type(y.result(), int)
    f.add_done_callback(lambda fut: print(fut.result() + 1))
    assert_type(f.cancel(force=True), bool)
    assert_type(shoal.cancel(f), bool)
    assert_type(f.exception(0.5), Optional[BaseException])
    assert_type(list(shoal.map(square, [1, 2], timeout=3)), list[int])
    assert_type(cube(2), int)
    r = cube.remote(2)
    cube.options(num_cpus=2, timeout=5).remote(3)
    shoal.get(r)
    half.remote(1.0)
    counter = Counter.remote(10)
    assert_type(counter, shoal.ActorHandle)
    counter.add.remote(1)
    Counter.options(name="c").remote(0)
    shoal.kill(counter)
    ref = shoal.put(b"bytes")
    shoal.get(ref, timeout=5)
    shoal.get([ref, ref])
    assert_type(shoal.is_initialized(), bool)
    assert_type(shoal.get_actor("counter"), shoal.ActorHandle)
    with shoal.start_node(2, store_bytes="1G") as node:
        assert_type(node.job_id, str)
    shoal.shutdown()


def launched() -> None:
    job = shoal.init()
    grad: "np.ndarray[Any, np.dtype[np.float32]]" = np.ones(4, np.float32)
    assert_type(shoal.all_reduce(grad),
                "np.ndarray[Any, np.dtype[np.float32]]")
    assert_type(shoal.all_reduce(grad, async_op=True), shoal.Work)
    assert_type(shoal.world().rank, int)
    shoal.kv_set("step", "1")
    assert_type(shoal.kv_get("step", timeout=1.0), bytes)
    shoal.barrier()
    with shoal.span("step"):
        pass
    assert_type(shoal.timeline(), str)
    assert_type(shoal.task.in_task(), bool)
'''

WRONG = '''
import shoal


def square(x: int) -> int:
    return x * x


f = shoal.submit(square, 3)
f.result(timeout="soon")
shoal.wait([f], timeout="1")
text: str = f.result()
'''


def _mypy(tmp_path, source):
    mypy = shutil.which("mypy")
    if mypy is None:
        print("test_typing: skipped, mypy is not installed (Debian: "
              "apt-get install mypy)")
        pytest.skip("mypy is not installed")
    program = tmp_path / "program.py"
    program.write_text(textwrap.dedent(source))
    # The repository's configuration (its mypy_path finds python/shoal,
    # and its overrides the modules without stubs), on this one program.
    return subprocess.run(
        [mypy, "--config-file", os.path.join(ROOT, "pyproject.toml"),
         "--no-error-summary", str(program)],
        cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_a_program_using_the_api_type_checks(tmp_path):
    run = _mypy(tmp_path, GOOD)
    assert run.returncode == 0, run.stdout + run.stderr


def test_a_wrong_program_fails_the_type_check(tmp_path):
    run = _mypy(tmp_path, WRONG)
    assert run.returncode == 1, run.stdout + run.stderr
    errors = [line for line in run.stdout.splitlines() if ": error:" in line]
    lines = sorted(int(e.split(":")[1]) for e in errors)
    # A str where a timeout (Optional[float]) goes, twice, and an int
    # result taken as a str.
    assert lines == [10, 11, 12], run.stdout
    assert all('"str"' in e for e in errors[:2]), run.stdout


def test_the_base_class_protocol():
    """What shoal.Future takes from concurrent.futures.Future's private
    side (see the comment above _future._base_states): fails on a Python
    whose concurrent.futures changed it."""
    plain = concurrent.futures.Future()
    for name in ("_condition", "_state", "_result", "_exception", "_waiters",
                 "_done_callbacks"):
        assert name in vars(plain), (
            f"concurrent.futures.Future has no attribute {name!r} any more: "
            "shoal.Future (python/shoal/_future.py) must follow it")
    assert callable(getattr(plain, "_invoke_callbacks", None)), (
        "concurrent.futures.Future._invoke_callbacks is gone: shoal.Future "
        "calls it")
    states = (_future._PENDING, _future._RUNNING, _future._FINISHED,
              _future._CANCELLED, _future._CANCELLED_AND_NOTIFIED)
    assert len(set(states)) == 5, states

    # wait() and as_completed() install their waiter by _waiters.append:
    # that is how a shoal future learns someone waits for it.
    appended = []

    class Recording(list):
        def append(self, waiter):
            appended.append(waiter)
            super().append(waiter)

    probe = concurrent.futures.Future()
    probe._waiters = Recording()
    concurrent.futures.wait([probe], timeout=0)
    assert appended, ("concurrent.futures.wait no longer appends to "
                      "Future._waiters: shoal.Future's _WaiterList misses it")
    appended.clear()
    with pytest.raises(concurrent.futures.TimeoutError):
        next(concurrent.futures.as_completed([probe], timeout=0))
    assert appended, ("concurrent.futures.as_completed no longer appends to "
                      "Future._waiters")


def test_futures_without_a_node_follow_the_base_class():
    """A finished shoal future and pending ones that never were submitted
    (no client) through wait, as_completed, callbacks, cancel and
    set_running_or_notify_cancel."""
    f = _future.finished(None, 5)
    done, pending = concurrent.futures.wait([f], timeout=0)
    assert done == {f} and not pending
    assert list(concurrent.futures.as_completed([f])) == [f]
    seen = []
    f.add_done_callback(seen.append)
    assert seen == [f] and f.result() == 5 and f.done()

    failed = _future.finished(None, error=ValueError("no"))
    with pytest.raises(ValueError):
        failed.result()
    assert isinstance(failed.exception(), ValueError)

    c = _future.Future(None, None, None)
    calls = []
    c.add_done_callback(calls.append)
    assert not c.done() and not c.cancelled()
    assert c.cancel() and c.cancelled() and calls == [c]
    assert c.set_running_or_notify_cancel() is False
    assert concurrent.futures.wait([c], timeout=0).done == {c}

    r = _future.Future(None, None, None)
    assert r.set_running_or_notify_cancel() is True and r.running()
    assert not r.cancel()
    r.set_result(7)
    assert r.result(0) == 7 and r.done() and not r.running()
