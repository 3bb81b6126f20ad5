"""Programs as Ray users write them: threads making a process's first submits
together, a node that goes away under pending futures, a node started by a
script that exits without stopping it. Real nodes throughout."""

import os
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

import pytest

import shoal
import pytasks

HERE = os.path.dirname(os.path.abspath(__file__))


def test_first_submits_from_eight_threads(node):
    """Eight threads make a fresh client's first submits at once, with a
    search path over the inline limit (it goes as a store object): every
    task runs, 50 times over, each on a new client."""
    long_dir = tempfile.mkdtemp(prefix="shoal-a-search-path-folder-long-"
                                       "enough-to-go-by-store-object-")
    sys.path.append(long_dir)
    try:
        for round_ in range(50):
            c = shoal.connect(job_id=node.job_id)
            start = threading.Barrier(8)
            results, errors = [], []

            def first_submit(i):
                start.wait()
                try:
                    results.append(c.submit(pytasks.add, i, 1).result(20))
                except Exception as e:  # noqa: BLE001 (reported below)
                    errors.append(e)

            threads = [threading.Thread(target=first_submit, args=(i,))
                       for i in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert not errors, f"round {round_}: {errors[0]!r}"
            assert sorted(results) == list(range(1, 9))
    finally:
        sys.path.remove(long_dir)
        shoal.disconnect()


def test_node_going_away_fails_pending_futures_at_once():
    """The node's coordinator is killed under pending futures: result()
    raises UnavailableError at once (not a hang), for a future a thread
    waits on, one with a callback, and one nobody touched; a new submit
    fails at once too."""
    node = shoal.start_node(1)
    c = shoal.connect(job_id=node.job_id)
    try:
        assert c.submit(pytasks.add, 1, 2).result(30) == 3
        busy = c.submit(pytasks.sleep, 60)
        queued = c.submit(pytasks.add, 2, 3)
        called = threading.Event()
        with_callback = c.submit(pytasks.sleep, 60)
        with_callback.add_done_callback(lambda f: called.set())
        waited = []

        def waiter():
            try:
                busy.result()
            except Exception as e:  # noqa: BLE001 (checked below)
                waited.append(e)

        t = threading.Thread(target=waiter)
        t.start()
        time.sleep(0.3)
        node.process.kill()  # no Node.stop: the client learns it by itself
        node.process.wait()
        t0 = time.monotonic()
        t.join(10)
        assert not t.is_alive(), "result() still waits after the node died"
        assert isinstance(waited[0], shoal.UnavailableError), waited
        assert "went away" in str(waited[0])
        with pytest.raises(shoal.UnavailableError, match="went away"):
            queued.result()
        assert called.wait(5)
        assert isinstance(with_callback.exception(), shoal.UnavailableError)
        with pytest.raises(shoal.UnavailableError, match="went away"):
            c.submit(pytasks.add, 1, 1)
        with pytest.raises(shoal.UnavailableError, match="went away"):
            c.submit(lambda: 1)
        assert time.monotonic() - t0 < 5
    finally:
        shoal.disconnect()
        node.stop()


def _run_script(body, timeout=60):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [HERE] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                  if p])
    return subprocess.run([sys.executable, "-c", textwrap.dedent(body)],
                          env=env, capture_output=True, text=True,
                          timeout=timeout)


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (not yet reaped by init) counts as gone.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _wait_gone(pid, seconds=20):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("ending", ["return", "exception", "os._exit"])
def test_node_stops_with_the_script(ending):
    """A script that starts a node and ends without stopping it (normally,
    by an exception, or by os._exit) takes the node along."""
    end = {"return": "pass", "exception": "raise SystemExit(3)",
           "os._exit": "os._exit(0)"}[ending]
    out = _run_script(f"""
        import os, shoal, pytasks
        node = shoal.start_node(1)
        print(node.process.pid, flush=True)
        c = shoal.connect(job_id=node.job_id)
        assert c.submit(pytasks.add, 1, 2).result(30) == 3
        {end}
    """)
    pid = int(out.stdout.split()[0])
    assert _wait_gone(pid), f"node {pid} outlived its script ({ending})"


def test_detached_node_outlives_the_script():
    out = _run_script("""
        import shoal
        from shoal import _paths
        node = shoal.start_node(1, detached=True)
        print(_paths.coordinator_pid(node.job_id), node.job_id, flush=True)
    """)
    pid, job_id = out.stdout.split()
    pid = int(pid)
    try:
        time.sleep(0.5)
        assert _alive(pid), "a detached node stopped with its script"
        c = shoal.connect(job_id=job_id)
        assert c.submit(pytasks.add, 2, 2).result(30) == 4
        c.stop_node()
        shoal.disconnect()
        assert _wait_gone(pid)
    finally:
        if _alive(pid):
            os.kill(pid, 15)
