"""The timeline against a real node and a real launched job: `shoal
timeline` writes Chrome trace-event JSON in which every task submitted is a
span on its worker's track, spans nest, shoal.span regions appear on the
process that marked them, and each rank of a launched all_reduce has its
collective span."""

import json
import os
import subprocess
import sys
import time

import pytest

import shoal

HERE = os.path.dirname(os.path.abspath(__file__))


def run_timeline(job, out):
    done = subprocess.run(
        [shoal._paths.shoal_binary(), "timeline", "--job", job, "--seconds",
         "120", "--out", out],
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    with open(out) as f:
        return json.load(f)


def tracks(trace):
    """{pid: process label} from the metadata events."""
    return {e["pid"]: e["args"]["name"] for e in trace["traceEvents"]
            if e["ph"] == "M" and e["name"] == "process_name"}


def check_well_formed(trace):
    """Every event has ph/ts/pid/tid; complete events on a thread nest (each
    span lies within the one it starts inside)."""
    by_thread = {}
    for e in trace["traceEvents"]:
        for key in ("ph", "ts", "pid", "tid"):
            assert key in e, e
        if e["ph"] == "X":
            assert e["dur"] >= 0, e
            by_thread.setdefault((e["pid"], e["tid"]), []).append(e)
    for spans in by_thread.values():
        # Outer spans first where two start together.
        spans.sort(key=lambda e: (e["ts"], -e["dur"]))
        open_ends = []
        for e in spans:
            end = e["ts"] + e["dur"]
            while open_ends and open_ends[-1] <= e["ts"] + 1e-3:
                open_ends.pop()
            if open_ends:
                assert end <= open_ends[-1] + 1e-3, (e, open_ends)
            open_ends.append(end)


@pytest.fixture(scope="module")
def node():
    with shoal.start_node(2, store_bytes="256M") as n:
        yield n


def test_tasks_and_spans_of_a_node(node, tmp_path):
    import tltasks
    c = shoal.connect(job_id=node.job_id)
    try:
        works = [c.submit(tltasks.work, 0.002) for _ in range(40)]
        marked = [c.submit(tltasks.marked, 0.01) for _ in range(4)]
        for f in works + marked:
            f.result(60)
        with shoal.span("driver-region", detail="test"):
            time.sleep(0.005)
        ids = {f.id for f in works + marked}
    finally:
        shoal.disconnect()
    trace = run_timeline(node.job_id, str(tmp_path / "t.json"))
    check_well_formed(trace)
    labels = tracks(trace)
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    tasks = [e for e in spans if e["cat"] == "task"]
    # Each task submitted, once, by name, on a worker's track.
    seen = {}
    for e in tasks:
        assert labels[e["pid"]].startswith("worker "), (e, labels)
        assert e["args"]["outcome"] == "ok", e
        assert e["args"]["queued_us"] >= 0, e
        seen[e["args"]["task_id"]] = e["name"]
    assert ids <= set(seen), ids - set(seen)
    assert sum(n.endswith("work") for i, n in seen.items() if i in ids) == 40
    assert sum(n.endswith("marked") for i, n in seen.items() if i in ids) == 4
    # A span marked inside a task nests in that task's span, same track.
    inside = [e for e in spans if e["name"] == "inside-task"]
    assert len(inside) == 4, inside
    for s in inside:
        assert s["cat"] == "span" and s["args"]["detail"] == "user"
        outer = [t for t in tasks if (t["pid"], t["tid"]) == (s["pid"], s["tid"])
                 and t["ts"] <= s["ts"] + 1e-3
                 and s["ts"] + s["dur"] <= t["ts"] + t["dur"] + 1e-3]
        assert len(outer) == 1 and outer[0]["name"].endswith("marked"), s
    # The driver's span, on a track of its own process.
    driver = [e for e in spans if e["name"] == "driver-region"]
    assert len(driver) == 1, driver
    assert driver[0]["pid"] == os.getpid()
    assert labels[os.getpid()] == f"client (pid {os.getpid()})"
    assert driver[0]["dur"] >= 5000


def test_large_store_reads_are_spans_on_the_worker(node, tmp_path):
    import numpy as np
    import tltasks
    c = shoal.connect(job_id=node.job_id)
    try:
        big = np.ones(1 << 19, dtype=np.float32)  # 2 MiB: a store object
        assert c.submit(tltasks.total, big).result(60) == float(1 << 19)
    finally:
        shoal.disconnect()
    trace = run_timeline(node.job_id, str(tmp_path / "store.json"))
    labels = tracks(trace)
    gets = [e for e in trace["traceEvents"]
            if e["ph"] == "X" and e["cat"] == "store_get"
            and e["args"]["bytes"] >= 1 << 21]
    assert gets, [e for e in trace["traceEvents"] if e["ph"] == "X"][-20:]
    # The worker's read of its argument (the client's process may show
    # reads of its own too, when it records).
    assert any(labels[e["pid"]].startswith("worker ") for e in gets), gets


def test_python_timeline_writes_the_same_trace(node, tmp_path):
    # A task of its own: the module's node may be this test's alone (pytest
    # -n spreads a module's tests over processes), and its workers then have
    # run nothing yet.
    import tltasks
    c = shoal.connect(job_id=node.job_id)
    try:
        c.submit(tltasks.work, 0.002).result(60)
        path = shoal.timeline(str(tmp_path / "py.json"), seconds=0)
    finally:
        shoal.disconnect()
    with open(path) as f:
        trace = json.load(f)
    check_well_formed(trace)
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    assert any(e["ph"] == "X" and e["cat"] == "task"
               for e in trace["traceEvents"])


def test_rings_are_private_and_go_with_the_node(tmp_path):
    n = shoal.start_node(1, store_bytes="64M")
    try:
        c = shoal.connect(job_id=n.job_id)
        c.submit("noop").result(60)
        shoal.disconnect()
        rings = [r for r in os.listdir("/dev/shm")
                 if r.startswith(f"shoal-{n.job_id}-")
                 and r.endswith("-timeline")]
        assert rings
        for r in rings:
            st = os.stat("/dev/shm/" + r)
            assert st.st_mode & 0o777 == 0o600 and st.st_uid == os.getuid()
    finally:
        n.stop()
    deadline = time.time() + 20
    while time.time() < deadline:
        left = [r for r in os.listdir("/dev/shm")
                if r.startswith(f"shoal-{n.job_id}-") and r.endswith("-timeline")
                and not r.startswith(f"shoal-{n.job_id}-{os.getpid()}-")]
        if not left:
            break
        time.sleep(0.1)
    assert not left


def test_shoal_timeline_0_records_nothing(monkeypatch):
    monkeypatch.setenv("SHOAL_TIMELINE", "0")
    n = shoal.start_node(1, store_bytes="64M")
    try:
        c = shoal.connect(job_id=n.job_id)
        assert c.submit("noop").result(60) is None
        shoal.disconnect()
        assert not [r for r in os.listdir("/dev/shm")
                    if r.startswith(f"shoal-{n.job_id}-")
                    and r.endswith("-timeline")]
    finally:
        n.stop()


LAUNCHED = """
import numpy as np, shoal
job = shoal.init()
x = np.full(1024, job.rank + 1, dtype=np.float32)
for _ in range(3):
    y = shoal.all_reduce(x.copy())
    assert float(y[0]) == 3.0, y[0]
with shoal.span("rank-region"):
    pass
big = shoal.put(np.ones(1 << 19, dtype=np.float32))  # 2 MiB: a store span
assert float(shoal.get(big)[7]) == 1.0
if job.rank == 1:
    import time
    time.sleep(0.3)  # rank 0's fourth all_reduce waits for it
shoal.all_reduce(x.copy())
"""


def test_launched_all_reduce_has_a_collective_span_per_rank(tmp_path):
    out = str(tmp_path / "launch.json")
    job = "tl-launch-%d-%d" % (os.getpid(), time.monotonic_ns() % 100000)
    env = dict(os.environ)
    env["PYTHONPATH"] = shoal._paths.package_dir()
    done = subprocess.run(
        [shoal._paths.shoal_binary(), "launch", "--nproc-per-node", "2",
         "--job-id", job, "--timeline", out, "--", sys.executable, "-c",
         LAUNCHED],
        capture_output=True, text=True, timeout=150, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    with open(out) as f:
        trace = json.load(f)
    check_well_formed(trace)
    labels = tracks(trace)
    assert sorted(v.split(" (")[0] for v in labels.values()) == [
        "launcher 0", "rank 0", "rank 1"], labels
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    for rank in ("rank 0", "rank 1"):
        pid = next(p for p, v in labels.items() if v.startswith(rank + " "))
        calls = [e for e in spans if e["pid"] == pid and e["cat"] == "collective"]
        reduces = sorted((e for e in calls if e["name"] == "all_reduce"),
                         key=lambda e: e["ts"])
        assert len(reduces) == 4, calls
        for e in reduces:
            assert e["args"]["bytes"] == 4096 and e["args"]["backend"] == "shm"
            assert 0 <= e["args"]["wait_us"] <= e["dur"] + 1, e
        if rank == "rank 0":  # the time it waited for rank 1 to arrive
            assert reduces[3]["args"]["wait_us"] >= 200_000, reduces[3]
        puts = [e for e in spans if e["pid"] == pid and e["cat"] == "store_put"]
        assert any(e["args"]["bytes"] == 1 << 21 for e in puts), puts
        assert any(e["name"] == "rank-region" and e["pid"] == pid
                   for e in spans)
    launcher = next(p for p, v in labels.items() if v.startswith("launcher"))
    assert any(e["pid"] == launcher and e["name"].startswith("ranks")
               for e in spans)
    # The launcher removed the job's rings at its end.
    assert not [r for r in os.listdir("/dev/shm")
                if r.startswith(f"shoal-{job}-") and r.endswith("-timeline")]
