"""shoal.init() in task mode, as ray.init(): it connects to the node the
environment names (SHOAL_JOB_ID) or the one started last on this machine,
else starts a node that shutdown() (or the script's end) stops. Each case is
a script with a runtime folder of its own, so no other node is found."""

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

import pytest

import shoal

PRELUDE = """
import os, sys, shoal
from shoal import _paths

@shoal.remote
def square(x):
    return x * x

def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
"""


@pytest.fixture
def runtime():
    """A runtime folder of the test's own under /tmp: pytest's tmp_path can
    be longer than an ipc:// socket's path allows (under pytest-xdist)."""
    path = tempfile.mkdtemp(prefix="shoal-rt-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def run_script(body, tmp_path, runtime, **env_extra):
    script = tmp_path / "driver.py"
    script.write_text(PRELUDE + textwrap.dedent(body))
    env = {k: v for k, v in os.environ.items()
           if k not in ("SHOAL_JOB_ID", "SHOAL_COORDINATOR",
                        "SHOAL_KV_ENDPOINT")}
    if runtime is not None:  # else the fixture's (the default) folder
        env["SHOAL_RUNTIME_DIR"] = str(runtime)
    env.update(env_extra)
    p = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, f"--- stdout\n{p.stdout}\n--- stderr\n{p.stderr}"
    return p.stdout.split()


def gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_init_starts_a_node_and_shutdown_stops_it(tmp_path, runtime):
    out = run_script("""
        c = shoal.init(num_workers=1)
        assert shoal.is_initialized() and shoal.init() is c
        assert square.remote(7).result(60) == 49
        pid = _paths.coordinator_pid(c.job_id)
        assert alive(pid)
        shoal.shutdown()
        assert not shoal.is_initialized()
        import time
        deadline = time.time() + 20
        while alive(pid) and time.time() < deadline:
            time.sleep(0.05)
        assert not alive(pid), "shutdown left the node running"
        # A second init starts another node (the first one's discovery
        # file names a node that is gone).
        c2 = shoal.init(num_workers=1)
        assert c2.job_id != c.job_id
        assert square.remote(8).result(60) == 64
        print(_paths.coordinator_pid(c2.job_id))   # left running at exit
    """, tmp_path, runtime)
    pid = int(out[-1])
    import time
    deadline = time.time() + 20
    while not gone(pid) and time.time() < deadline:
        time.sleep(0.05)
    assert gone(pid), "the node init started outlived the script"


def test_init_connects_to_the_node_the_environment_names(node, tmp_path):
    out = run_script("""
        c = shoal.init()
        assert square.remote(3).result(60) == 9
        shoal.shutdown()       # a node it connected to keeps running
        print(c.job_id)
    """, tmp_path, None, SHOAL_JOB_ID=node.job_id)
    assert out == [node.job_id]
    c = shoal.connect(job_id=node.job_id)
    assert c.submit(abs, -2).result(60) == 2


def test_init_finds_the_node_started_last_here(tmp_path, runtime):
    out = run_script("""
        try:
            shoal.init("auto")
            raise AssertionError("init('auto') found a node")
        except (shoal.NotFoundError, shoal.UnavailableError) as e:
            print("none")
    """, tmp_path, runtime)
    assert out == ["none"]
    env = dict(os.environ, SHOAL_RUNTIME_DIR=str(runtime))
    with shoal.start_node(1, env=env) as started:
        out = run_script("""
            print(shoal.init().job_id, shoal.init("auto").job_id)
            assert square.remote(2).result(60) == 4
        """, tmp_path, runtime)
        assert out == [started.job_id, started.job_id]


def test_init_inside_a_task_is_its_own_node(node, client):
    def inner():
        import shoal
        return shoal.init().job_id

    assert client.submit(inner).result(60) == node.job_id
