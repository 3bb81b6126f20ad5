"""Python tasks in the workers' embedded interpreters, through the client."""

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import pytasks
import shoal
from conftest import worker_log


def test_scalars_text_and_bytes_round_trip(client):
    args = (None, True, -7, 2.5, "text ✓", b"\x00\x01")
    assert client.submit(pytasks.echo, *args).result(30) == args
    assert client.submit(pytasks.add, 2, 3).result(30) == 5
    assert client.submit(pytasks.noop).result(30) is None


def test_functions_by_name_and_cpp_tasks(client):
    assert client.submit("pytasks:add", 1, 2).result(30) == 3
    assert client.submit("py:pytasks:add", 1, 2).result(30) == 3
    assert client.submit("add", 2, 3).result(30) == 5  # a C++ built-in


def test_arrays_arrive_read_only_small_inline_large_by_reference(client):
    small = np.arange(10, dtype=np.float32)
    kind, dtype, shape, writeable, _ = client.submit(
        pytasks.describe, small).result(30)
    assert (kind, dtype, shape, writeable) == ("ndarray", "float32", "(10,)",
                                               False)
    large = np.ones((512, 1024), dtype=np.float64)  # 4 MiB
    kind, dtype, shape, writeable, _ = client.submit(
        pytasks.describe, large).result(30)
    assert (kind, dtype, shape, writeable) == ("ndarray", "float64",
                                               "(512, 1024)", False)
    assert client.submit(pytasks.checksum, large).result(30) == 512 * 1024


def test_array_results_small_and_large(client):
    r = client.submit(pytasks.scale, np.arange(4, dtype=np.int32), 3).result(30)
    assert r.dtype == np.int32 and r.tolist() == [0, 3, 6, 9]
    assert not r.flags.writeable
    big = client.submit(pytasks.zeros, 3 << 20, "float16").result(30)
    assert isinstance(big, shoal.StoreArray)
    assert big.shape == (3 << 20,) and big.dtype == np.float16
    assert not big.any()


def test_torch_tensor_results(client):
    pytest.importorskip("torch")
    r = client.submit(pytasks.torch_double, 5).result(60)
    assert r.dtype == np.float32 and r.tolist() == [0, 2, 4, 6, 8]


def test_large_bytes_travel_through_the_store(client):
    data = b"\x01" * (1 << 20)
    kind = client.submit(pytasks.describe, data).result(30)[0]
    assert kind == "memoryview"
    assert client.submit(pytasks.byte_sum, data).result(30) == 1 << 20
    back = client.submit(pytasks.big_bytes, 1 << 20).result(30)
    assert bytes(back) == b"\x07" * (1 << 20)


def test_exception_type_message_and_traceback_reach_the_caller(client):
    # The task's own exception (it pickles), the worker's side as its
    # __cause__: a TaskError with the fields.
    f = client.submit(pytasks.raise_value_error, 42)
    with pytest.raises(ValueError, match="bad value 42") as info:
        f.result(30)
    assert type(info.value) is ValueError
    e = info.value.__cause__
    assert isinstance(e, shoal.TaskError)
    assert e.exc_type == "ValueError"
    assert e.exc_message == "bad value 42"
    assert "Traceback (most recent call last)" in e.remote_traceback
    assert "pytasks.py" in e.remote_traceback
    assert "in _inner" in e.remote_traceback  # the frame that raised
    assert type(f.exception()) is ValueError
    with pytest.raises(pytasks.CustomError) as info:
        client.submit(pytasks.raise_custom).result(30)
    assert info.value.__cause__.exc_type == "pytasks.CustomError"


def test_exception_fields_arrive_apart_whatever_the_message_holds(client):
    with pytest.raises(pytasks.CustomError) as info:
        client.submit(pytasks.raise_tricky).result(30)
    e = info.value.__cause__
    assert e.exc_type == "pytasks.CustomError"
    assert e.qualified_type == "pytasks.CustomError"
    assert e.exc_message == pytasks.TRICKY_MESSAGE  # unchanged, every line
    trace = e.remote_traceback
    assert trace.startswith("Traceback (most recent call last):\n")
    assert "in raise_tricky" in trace and "fake.py" in trace
    assert trace.endswith("pytasks.CustomError: " + pytasks.TRICKY_MESSAGE
                          + "\n")
    with pytest.raises(ValueError) as info:
        client.submit(pytasks.raise_value_error, 1).result(30)
    cause = info.value.__cause__
    assert cause.qualified_type == "builtins.ValueError"
    assert cause.exc_type == "ValueError"
    assert cause.exc_message == "bad value 1"
    # C++ tasks fail with their status only.
    with pytest.raises(shoal.InvalidArgumentError) as info:
        client.submit("add", "x", 1).result(30)
    assert not isinstance(info.value, shoal.TaskError)


def test_unknown_functions_fail_clearly(client):
    with pytest.raises(ModuleNotFoundError) as info:
        client.submit("no_such_module_xyz:f").result(30)
    assert info.value.__cause__.exc_type == "ModuleNotFoundError"


def test_the_client_api_works_inside_a_task(client):
    # (More in test_nested.py: submit, get, actors, waits on a 1-worker node.)
    assert client.submit(pytasks.client_api_inside_task).result(30) == 3.0


def test_wait_and_many_tasks(client):
    futures = [client.submit(pytasks.add, i, i) for i in range(500)]
    done, pending = shoal.wait(futures, timeout=60)
    assert len(done) == 500 and not pending
    assert [f.result() for f in futures] == [2 * i for i in range(500)]
    slow = [client.submit(pytasks.sleep, 0.5) for _ in range(2)]
    quick = client.submit(pytasks.noop)
    done, pending = shoal.wait(slow + [quick], timeout=0.2, num_returns=3)
    assert pending  # the sleeps are still running


def test_result_timeout_and_cancel(client):
    f = client.submit(pytasks.until_cancelled, 20)
    with pytest.raises(shoal.TimeoutError):
        f.result(timeout=0.2)
    t0 = time.time()
    assert f.cancel()
    with pytest.raises(shoal.CancelledError):  # the function saw the flag
        f.result(10)
    assert time.time() - t0 < 5
    queued = [client.submit(pytasks.sleep, 0.5) for _ in range(2)]
    victim = client.submit(pytasks.noop)
    assert victim.cancel()
    with pytest.raises(shoal.CancelledError):
        victim.result(10)
    for f in queued:
        f.result(10)


def test_task_timeout(client):
    f = client.submit(pytasks.until_cancelled, 20, _options={"timeout": 0.3})
    with pytest.raises(shoal.TimeoutError):
        f.result(30)


def test_worker_killed_mid_task_is_retried(client, tmp_path):
    pid_file = str(tmp_path / "pid")
    f = client.submit(pytasks.wait_to_be_killed, pid_file,
                      str(tmp_path / "marker"))
    deadline = time.time() + 30
    while not os.path.exists(pid_file):
        assert time.time() < deadline, "the task never started"
        time.sleep(0.01)
    victim = int(open(pid_file).read())
    os.kill(victim, signal.SIGKILL)
    state, attempt, pid = f.result(60)
    assert (state, attempt) == ("retried", 2)
    assert pid != victim


def test_no_retries_left_is_aborted(client, tmp_path):
    f = client.submit(pytasks.die_once, str(tmp_path / "m"),
                      _options={"max_retries": 0})
    with pytest.raises(shoal.AbortedError, match="died"):
        f.result(60)
    # With retries the same function succeeds on its second attempt.
    assert client.submit(pytasks.die_once, str(tmp_path / "m2")).result(60) == 2


def test_task_output_goes_to_the_worker_log(client, node):
    client.submit(pytasks.speak, "hello-log").result(30)
    deadline = time.time() + 10
    while time.time() < deadline:
        logs = worker_log(node, 0) + worker_log(node, 1)
        if "stdout says hello-log" in logs and "stderr says hello-log" in logs:
            return
        time.sleep(0.05)
    pytest.fail("task output did not reach the worker logs")


def test_modules_found_through_the_clients_path(client, tmp_path):
    (tmp_path / "fresh_module_a1.py").write_text(
        "def triple(x):\n    return 3 * x\n")
    sys.path.insert(0, str(tmp_path))
    try:
        assert client.submit("fresh_module_a1:triple", 5).result(30) == 15
    finally:
        sys.path.remove(str(tmp_path))


def test_start_pythonpath_reaches_the_workers(tmp_path):
    (tmp_path / "node_path_mod_b2.py").write_text(
        "def hello():\n    return 'from --pythonpath'\n")
    # tmp_path is not on this process's sys.path: only --pythonpath has it.
    with shoal.start_node(1, pythonpath=str(tmp_path)) as n:
        c = shoal.connect(job_id=n.job_id)
        try:
            assert (c.submit("node_path_mod_b2:hello").result(30)
                    == "from --pythonpath")
        finally:
            shoal.disconnect()


def test_remote_client_through_the_frontend(node):
    c = shoal.connect(job_id=node.job_id, force_remote=True)
    try:
        assert not c.local
        assert c.submit(pytasks.add, 20, 22).result(30) == 42
        big = c.submit(pytasks.zeros, 1 << 20, "int8").result(30)
        assert big.shape == (1 << 20,) and not big.any()
        with pytest.raises(shoal.FailedPreconditionError):
            c.put(np.zeros(3))
    finally:
        shoal.disconnect()


def test_a_remote_client_pipelines_its_tasks(node):
    # A remote client's submits go pipelined (results pushed), and
    # futures behave as over the table: results in order, wait for some,
    # callbacks, cancel, errors at result().
    c = shoal.connect(job_id=node.job_id, force_remote=True)
    try:
        futures = [c.submit(pytasks.add, i, 1) for i in range(3000)]
        assert [f.result(60) for f in futures] == list(range(1, 3001))
        slow = c.submit(pytasks.until_cancelled, 30)
        quick = c.submit(pytasks.add, 1, 2)
        done, pending = c.wait([slow, quick], timeout=30, num_returns=1)
        assert done == [quick] and pending == [slow]
        called = threading.Event()
        quick2 = c.submit(pytasks.add, 2, 2)
        quick2.add_done_callback(lambda f: called.set())
        assert called.wait(30) and quick2.result(0) == 4
        assert slow.cancel()
        with pytest.raises(shoal.CancelledError):
            slow.result(30)
        with pytest.raises(ValueError):
            c.submit(pytasks.raise_value_error, 3).result(30)
        with pytest.raises(shoal.NotFoundError):
            c.submit("no_such_function").result(30)  # refused by the node
    finally:
        shoal.disconnect()


def test_ctrl_c_interrupts_a_blocking_result(node, tmp_path):
    script = tmp_path / "waiter.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {os.path.dirname(pytasks.__file__)!r})
        import pytasks, shoal
        c = shoal.connect(job_id={node.job_id!r})
        f = c.submit(pytasks.until_cancelled, 30)
        print("waiting", flush=True)
        try:
            f.result()
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            f.cancel()
    """))
    # SIGINT back to its default in the child: a shell running the tests in
    # the background (no job control) starts them with SIGINT ignored, and
    # Python then never raises KeyboardInterrupt.
    p = subprocess.Popen([sys.executable, str(script)],
                         stdout=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT,
                                                          signal.SIG_DFL))
    assert p.stdout.readline().strip() == "waiting"
    time.sleep(0.3)
    t0 = time.time()
    p.send_signal(signal.SIGINT)
    out, _ = p.communicate(timeout=20)
    assert "interrupted" in out
    assert time.time() - t0 < 5


def test_each_worker_keeps_one_interpreter(client):
    """The interpreter starts once per worker: module state lives on from
    one task to the next on the same worker."""
    seen = {}
    for _ in range(8):
        pid, calls, sys_id = client.submit(pytasks.count_calls).result(30)
        last_calls, last_sys = seen.get(pid, (0, sys_id))
        assert calls == last_calls + 1 and sys_id == last_sys, (pid, calls)
        seen[pid] = (calls, sys_id)
    assert 1 <= len(seen) <= 2


def test_functions_in_packages_and_classes(client, tmp_path):
    pkg = tmp_path / "pkg_c3"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "sub.py").write_text(
        "class Tools:\n"
        "    @staticmethod\n"
        "    def twice(x):\n"
        "        return 2 * x\n")
    sys.path.insert(0, str(tmp_path))
    try:
        assert client.submit("pkg_c3.sub:Tools.twice", 21).result(30) == 42
        assert client.submit("py:pkg_c3.sub:Tools.twice", 4).result(30) == 8
    finally:
        sys.path.remove(str(tmp_path))


def test_buffer_protocol_results(client):
    floats, raw, ints = client.submit(pytasks.buffer_results).result(30)
    assert floats.dtype == np.float64 and floats.tolist() == [1.5, 2.5, 3.5]
    assert bytes(raw) == b"abc"
    assert ints.dtype == np.int16 and ints.shape == (2, 3)
    assert ints.tolist() == [[0, 1, 2], [3, 4, 5]]


def _frontend(node):
    # "node ready job <id>, frontend tcp://127.0.0.1:<port>, store ..."
    return node.ready_line.split("frontend ")[1].split(",")[0]


def test_connect_by_endpoint_environment_and_job_id(node):
    endpoint = _frontend(node)
    c = shoal.connect(endpoint)
    try:
        assert c.local and c.job_id == node.job_id
        assert c.submit(pytasks.add, 1, 1).result(30) == 2
    finally:
        shoal.disconnect()
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {os.path.dirname(pytasks.__file__)!r})
        import pytasks, shoal
        c = shoal.connect()
        print(c.job_id, c.local, shoal.submit(pytasks.add, 2, 3).result(30))
    """)
    for var, value in (("SHOAL_COORDINATOR", endpoint),
                       ("SHOAL_JOB_ID", node.job_id)):
        env = {k: v for k, v in os.environ.items()
               if k not in ("SHOAL_COORDINATOR", "SHOAL_JOB_ID")}
        env[var] = value
        out = subprocess.run([sys.executable, "-c", script], env=env,
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, (var, out.stderr)
        assert out.stdout.split() == [node.job_id, "True", "5"], var


def test_refs_outliving_their_node_do_not_hold_up_exit():
    """Refs dropped after their node stopped send the (gone) store no
    request that would wait out its timeout: after shoal.Node.stop in this
    process, and at interpreter exit when another process stopped it."""
    script = textwrap.dedent("""
        import sys, time, numpy as np, shoal
        with shoal.start_node(1, store_bytes="64M") as node:
            shoal.connect(job_id=node.job_id)
            refs = [shoal.put(np.zeros(1 << 16)) for _ in range(3)]
        t0 = time.time()
        del refs[0]
        print(f"dropped {time.time() - t0:.3f}", flush=True)
        node = shoal.start_node(1, store_bytes="64M")
        shoal.connect(job_id=node.job_id)
        refs += [shoal.put(np.zeros(1 << 16)) for _ in range(3)]
        views = [shoal.get(r) for r in refs[-3:]]
        node.process.terminate()  # not through Node.stop: unseen here
        node.process.wait()
        print("second node stopped", flush=True)
    """)
    t0 = time.time()
    out = subprocess.run([sys.executable, "-c", script], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    dropped = float(out.stdout.split()[1])
    assert dropped < 5, out.stdout
    assert "second node stopped" in out.stdout
    assert time.time() - t0 < 25, time.time() - t0


def test_long_module_paths_go_once_through_the_store(client, tmp_path):
    """A client whose path is long (a venv, several project folders) does
    not carry it in every task: thousands of tasks can be in flight."""
    deep = tmp_path.joinpath(*[f"folder_with_a_long_name_{i}" for i in range(6)])
    deep.mkdir(parents=True)
    (deep / "long_path_mod_d4.py").write_text("def inc(x):\n    return x + 1\n")
    sys.path.insert(0, str(deep))
    try:
        assert len(str(deep)) > 160
        # Both workers busy: all 3000 tasks wait in the table at once (more
        # than its 2048 payload chunks).
        busy = [client.submit(pytasks.sleep, 1.0) for _ in range(2)]
        futures = [client.submit("long_path_mod_d4:inc", i) for i in range(3000)]
        assert client._python_path().startswith("@")
        done, pending = client.wait(busy + futures, timeout=120)
        assert not pending
        assert [f.result() for f in futures] == list(range(1, 3001))
    finally:
        sys.path.remove(str(deep))
    # The path changed back: tasks name the new one.
    assert client.submit(pytasks.add, 1, 2).result(30) == 3
