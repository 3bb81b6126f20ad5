"""Actors against a real node: @shoal.remote classes, calls in order, state,
kill, death → ActorDiedError, restarts, owner lifetime, GPU options."""

import os
import subprocess
import sys
import tempfile
import time

import pytest

import shoal
import pyactors

HERE = os.path.dirname(os.path.abspath(__file__))


def wait_for(predicate, timeout=30, what="condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes (its parent reaps it).
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


@pytest.fixture(scope="module")
def node():
    with shoal.start_node(1, store_bytes="256M") as n:
        yield n


@pytest.fixture(scope="module")
def client(node):
    c = shoal.connect(job_id=node.job_id)
    yield c
    shoal.disconnect()


def test_calls_run_in_order_and_state_persists(client):
    c = pyactors.Counter.remote(100)
    futures = [c.add.remote(1) for _ in range(300)]
    assert [f.result(60) for f in futures] == list(range(101, 401))
    assert c.value.remote().result(30) == 400
    # Its own process: not ours, not the pool worker's.
    actor_pid = c.pid.remote().result(30)
    assert actor_pid != os.getpid()
    assert pyactors.pid_of_worker.remote().result(30) != actor_pid
    shoal.kill(c)


def test_two_actors_keep_separate_state(client):
    a = pyactors.Counter.remote(0, 1)
    b = pyactors.Counter.remote(0, 10)
    for _ in range(5):
        a.add.remote()
        b.add.remote()
    assert a.value.remote().result(30) == 5
    assert b.value.remote().result(30) == 50
    assert a.pid.remote().result(30) != b.pid.remote().result(30)
    shoal.kill(a)
    shoal.kill(b)


def test_method_exception_is_a_task_error_and_the_actor_lives(client):
    c = pyactors.Counter.remote(1)
    # The method's own exception type (or TaskError naming it).
    with pytest.raises((ValueError, shoal.TaskError)) as e:
        c.fail.remote("boom").result(30)
    assert "boom" in str(e.value)
    assert c.add.remote(1).result(30) == 2
    shoal.kill(c)


def test_unknown_method_and_direct_use_are_errors(client):
    c = pyactors.Counter.remote()
    with pytest.raises(AttributeError):
        c.no_such_method
    with pytest.raises(TypeError):
        c.add(1)
    with pytest.raises(TypeError):
        pyactors.Counter(1)
    shoal.kill(c)


def test_a_client_through_the_frontend_makes_and_kills_actors(node, client):
    """A client off the node's machine (here: forced through the frontend)
    makes actors through the frontend too; its calls keep order and state,
    and kill ends the actor."""
    remote = shoal.connect(job_id=node.job_id, force_remote=True)
    try:
        assert not remote.local
        c = pyactors.Counter.remote(100)
        futures = [c.add.remote(1) for _ in range(50)]
        assert [f.result(30) for f in futures] == list(range(101, 151))
        shoal.kill(c)
        with pytest.raises(shoal.ActorDiedError):
            c.add.remote(1).result(30)
    finally:
        shoal.connect(job_id=node.job_id)  # the module's local default again


def test_kill_fails_pending_and_later_calls(client, tmp_path):
    c = pyactors.Counter.remote()
    flag = str(tmp_path / "running")
    running = c.sleep_until.remote(flag)
    queued = [c.add.remote(1) for _ in range(5)]
    wait_for(lambda: os.path.exists(flag), what="the call to start")
    pid = c.pid  # the handle's method, not a call
    shoal.kill(c)
    for f in [running] + queued:
        with pytest.raises(shoal.ActorDiedError):
            f.result(30)
    with pytest.raises(shoal.ActorDiedError):
        c.add.remote(1)
    assert pid is not None


def test_death_fails_running_and_later_calls(client):
    c = pyactors.Counter.remote()
    actor_pid = c.pid.remote().result(30)
    dying = c.die.remote()
    with pytest.raises(shoal.ActorDiedError) as e:
        dying.result(30)
    assert "died" in str(e.value)
    wait_for(lambda: not pid_alive(actor_pid), what="the actor to exit")
    # Later calls: refused at once, or failed — ActorDiedError either way.
    with pytest.raises(shoal.ActorDiedError):
        c.add.remote(1).result(30)


def test_restart_runs_init_again_and_later_calls(client):
    r = pyactors.Restartable.remote("x")
    tag, calls, pid1 = r.call.remote().result(30)
    assert (tag, calls) == ("x", 1)
    with pytest.raises(shoal.ActorDiedError):
        r.die.remote().result(30)
    # The node restarts it: __init__ ran again with the same arguments.
    tag, calls, pid2 = r.call.remote().result(60)
    assert (tag, calls) == ("x", 1)
    assert pid2 != pid1
    # Its one restart is used: the next death ends it.
    with pytest.raises(shoal.ActorDiedError):
        r.die.remote().result(30)
    with pytest.raises(shoal.ActorDiedError):
        r.call.remote().result(30)


def test_failing_constructor_ends_the_actor(client):
    b = pyactors.BadInit.remote("no good")
    with pytest.raises(shoal.ActorDiedError) as e:
        b.value.remote().result(30)
    assert "constructor" in str(e.value)
    assert "no good" in str(e.value)


def test_actor_ends_when_its_owner_exits(node, tmp_path):
    out = tmp_path / "pid"
    script = (
        "import sys, shoal, pyactors\n"
        f"shoal.connect(job_id={node.job_id!r})\n"
        "c = pyactors.Counter.remote()\n"
        f"open({str(out)!r}, 'w').write(str(c.pid.remote().result(30)))\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [HERE] + os.environ.get("PYTHONPATH", "").split(os.pathsep)))
    subprocess.run([sys.executable, "-c", script], check=True, env=env,
                   timeout=120)
    actor_pid = int(out.read_text())
    wait_for(lambda: not pid_alive(actor_pid), what="the owned actor to end")


def test_detached_actor_outlives_its_owner(node, client, tmp_path):
    out = tmp_path / "id"
    script = (
        "import shoal, pyactors\n"
        f"shoal.connect(job_id={node.job_id!r})\n"
        "c = pyactors.Counter.options(lifetime='detached').remote(7)\n"
        "c.add.remote(1).result(30)\n"
        f"open({str(out)!r}, 'w').write(str(c.actor_id))\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [HERE] + os.environ.get("PYTHONPATH", "").split(os.pathsep)))
    subprocess.run([sys.executable, "-c", script], check=True, env=env,
                   timeout=120)
    actor_id = int(out.read_text())
    # Reach it by id from this process: a handle over the same actor.
    from shoal import _actor
    h = _actor.ActorHandle(client, _actor._control_for(client), actor_id, -1,
                           pyactors.Counter._cls)
    assert h.value.remote().result(30) == 8
    shoal.kill(h)


def test_option_checks():
    with pytest.raises(TypeError):
        pyactors.Counter.options(num_cpu=1)
    with pytest.raises(ValueError):
        pyactors.Counter.options(num_gpus=-1)
    with pytest.raises(ValueError):
        pyactors.Counter.options(max_restarts="2")
    with pytest.raises(ValueError):
        pyactors.Counter.options(lifetime="forever")


def test_gpu_options_give_each_actor_its_own_gpus():
    # The coordinator counts GPUs from CUDA_VISIBLE_DEVICES without the
    # driver, so two "GPUs" are enough to test the assignment here.
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="3,5")
    with shoal.start_node(1, store_bytes="64M", env=env) as n:
        shoal.connect(job_id=n.job_id)
        try:
            plain = pyactors.Counter.remote()
            assert plain.env.remote("CUDA_VISIBLE_DEVICES").result(30) == ""
            a = pyactors.Counter.options(num_gpus=1).remote()
            b = pyactors.Counter.options(num_gpus=1).remote()
            seen = {a.env.remote("CUDA_VISIBLE_DEVICES").result(30),
                    b.env.remote("CUDA_VISIBLE_DEVICES").result(30)}
            assert seen == {"3", "5"}
            with pytest.raises(shoal.ResourceExhaustedError):
                pyactors.Counter.options(num_gpus=1).remote()
            shoal.kill(a)  # frees its GPU
            c = pyactors.Counter.options(num_gpus=1).remote()
            assert c.env.remote("CUDA_VISIBLE_DEVICES").result(30) in seen
        finally:
            shoal.disconnect()
