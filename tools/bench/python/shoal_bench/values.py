"""`shoal bench python`, the values section: what real Python
tasks pass, on a node of N workers, beside multiprocessing.Pool(N),
concurrent.futures.ProcessPoolExecutor(N) and Ray (num_cpus=N), all in the
same run:

  noop       no-op task (the reference for the goals below)
  dict       a module-level function taking {"x": 1, "y": "s"}
  closure    the same work in a closure (shoal and Ray send it by value,
             once; the standard library cannot pickle closures: skipped)
  arrays     a dict of two 32 MiB float32 arrays as the argument: time from
             submit until the task has read every page of both. The arrays
             are made after shoal connected, so shoal's are zero-copy arrays
             (in the store, passed by reference; docs/values.md); two more
             shoal rows: the same with arrays made as if before connect
             (malloc'd: copied into the store at submit), and with new
             zero-copy arrays every rep (the worker maps fresh pages)

async: N submitted, then all awaited (tasks/s); sync: submit + result, one
after the other (p50/p99 µs), a system's workloads interleaved in blocks
(--values-blocks) so that they meet the same machine. Rounds alternate the
order of the systems; the tables show medians over rounds.

Ray comes from a virtualenv (default ~/.cache/shoal-bench-venv, made with
--system-site-packages; --install-ray creates it and pip-installs ray):
absent, it is skipped and the output says so.
"""

import concurrent.futures
import multiprocessing
import os
import statistics
import subprocess
import sys
import time

import numpy as np

from shoal import _zero_copy
from shoal_bench import tasks

SHOAL = "shoal"
DEFAULT_VENV = os.path.expanduser("~/.cache/shoal-bench-venv")
ARRAY_BYTES = 32 << 20


def _percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * q))]


# ---- the systems: submit(fn, *args) → handle; result(handle); all(handles)

class _Shoal:
    name = SHOAL

    def __init__(self, client):
        self.client = client
        self.closure = tasks.make_closure()

    def submit(self, fn, *args):
        return self.client.submit(fn, *args)

    def result(self, h):
        return h.result(120)

    def all(self, hs):
        done, pending = self.client.wait(hs, timeout=300)
        return len(pending) + sum(f.exception() is not None for f in done)


class _Pool:
    def __init__(self, workers):
        self.name = f"multiprocessing.Pool({workers})"
        self.pool = multiprocessing.get_context("fork").Pool(workers)
        self.closure = None  # the standard library's pickle refuses closures

    def submit(self, fn, *args):
        return self.pool.apply_async(fn, args)

    def result(self, h):
        return h.get(120)

    def all(self, hs):
        return _count_failed(lambda h: h.get(300), hs)

    def close(self):
        self.pool.terminate()
        self.pool.join()


class _Executor:
    def __init__(self, workers):
        self.name = f"ProcessPoolExecutor({workers})"
        self.ex = concurrent.futures.ProcessPoolExecutor(
            workers, mp_context=multiprocessing.get_context("fork"))
        for f in [self.ex.submit(tasks.noop) for _ in range(workers)]:
            f.result(60)  # its processes fork now, before shoal connects
        self.closure = None

    def submit(self, fn, *args):
        return self.ex.submit(fn, *args)

    def result(self, h):
        return h.result(120)

    def all(self, hs):
        return _count_failed(lambda h: h.result(300), hs)

    def close(self):
        self.ex.shutdown(cancel_futures=True)


class _Ray:
    def __init__(self, ray, workers):
        self.ray = ray
        self.name = f"Ray {ray.__version__} (num_cpus={workers})"
        self._remote = {}
        self.closure = tasks.make_closure()

    def submit(self, fn, *args):
        r = self._remote.get(fn)
        if r is None:
            r = self._remote[fn] = self.ray.remote(fn)
        return r.remote(*args)

    def result(self, h):
        return self.ray.get(h, timeout=120)

    def all(self, hs):
        try:
            self.ray.get(hs, timeout=300)
            return 0
        except Exception:  # noqa: BLE001 (counted, not raised)
            return _count_failed(lambda h: self.ray.get(h, timeout=300), hs)

    def close(self):
        self.ray.shutdown()


def _count_failed(get, hs):
    failed = 0
    for h in hs:
        try:
            get(h)
        except Exception:  # noqa: BLE001
            failed += 1
    return failed


def load_ray(venv, install, workers):
    """(Ray system or None, a note saying why not)."""
    python = os.path.join(venv, "bin", "python")
    if install and not os.path.exists(python):
        subprocess.run([sys.executable, "-m", "venv",
                        "--system-site-packages", venv], check=True)
    if install:
        subprocess.run([python, "-m", "pip", "install", "-q", "ray"],
                       check=True)
    site = os.path.join(venv, "lib", f"python{sys.version_info.major}."
                        f"{sys.version_info.minor}", "site-packages")
    if not os.path.isdir(os.path.join(site, "ray")):
        return None, (f"Ray skipped: not installed in {venv} (run with "
                      "--install-ray, which pip-installs it there)")
    sys.path.append(site)
    # Ray's workers are this interpreter: they need Ray and this package.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (os.environ.get("PYTHONPATH"), site) if p)
    try:
        import ray
        ray.init(num_cpus=workers, include_dashboard=False,
                 logging_level="ERROR", log_to_driver=False)
    except Exception as e:  # noqa: BLE001
        return None, f"Ray skipped: {type(e).__name__}: {e}"
    system = _Ray(ray, workers)
    for h in [system.submit(tasks.noop) for _ in range(200)]:
        system.result(h)
    return system, ""


# ---- workloads ----------------------------------------------------------------

SMALL_DICT = {"x": 1, "y": "s"}


def _workload_fn(system, workload):
    if workload == "noop":
        return tasks.noop, ()
    if workload == "dict":
        return tasks.take_dict, (SMALL_DICT,)
    return system.closure, (SMALL_DICT,)


def _async_round(system, fn, args, n):
    t0 = time.perf_counter()
    hs = [system.submit(fn, *args) for _ in range(n)]
    failed = system.all(hs)
    return n / (time.perf_counter() - t0), failed


def _sync_round(system, fn, args, n):
    latencies, failed = [], 0
    for _ in range(n):
        t0 = time.perf_counter()
        try:
            system.result(system.submit(fn, *args))
        except Exception:  # noqa: BLE001
            failed += 1
        latencies.append(time.perf_counter() - t0)
    return latencies, failed


def _sync_interleaved(system, cases, n_sync, blocks):
    """Sync round trips of every (workload, fn, args) in `cases`, in
    `blocks` blocks of n_sync/blocks each, the workloads' order reversed
    every other block: so a spell of this VM (vCPUs moving between host
    cores) falls on all of a system's workloads alike, and the goals'
    ratios (dict / no-op, closure / dict) compare like with like. Returns
    {workload: (latencies, failed)}."""
    out = {w: ([], 0) for w, _, _ in cases}
    per = max(1, n_sync // max(1, blocks))
    for b in range(max(1, blocks)):
        for w, fn, args in (cases if b % 2 == 0 else cases[::-1]):
            lat, failed = _sync_round(system, fn, args, per)
            old_lat, old_failed = out[w]
            out[w] = (old_lat + lat, old_failed + failed)
    return out


def _arrays_round(system, arrays, reps):
    """Seconds from submit until the task had read both arrays, per rep."""
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        read_at, total = system.result(
            system.submit(tasks.read_arrays, arrays))
        out.append(read_at - t0)
    return out


SHOAL_COPIED = "shoal, arrays made before connect"
SHOAL_FRESH = "shoal, new arrays every rep"
BOUND_FRESH = "bound: one memcpy into fresh pages"
BOUND_WARM = "bound: one memcpy, prefaulted"


def _fresh_arrays_round(system, rng, reps):
    """As _arrays_round, with new arrays (made outside the timing) each rep."""
    out = []
    for _ in range(reps):
        arrays = {"a": rng.random(ARRAY_BYTES // 4, dtype=np.float32),
                  "b": rng.random(ARRAY_BYTES // 4, dtype=np.float32)}
        t0 = time.perf_counter()
        read_at, total = system.result(
            system.submit(tasks.read_arrays, arrays))
        out.append(read_at - t0)
        del arrays
    return out


def _memcpy_rounds(arrays, reps, warm):
    """The one-copy bound of the arrays case, in the same run: seconds to
    copy both arrays' bytes once (np.copyto: memcpy) into fresh pages (the
    page faults included, as for a new store object) or into a buffer
    already written once (prefaulted), per rep."""
    out = []
    for _ in range(reps):
        with _zero_copy.paused():  # malloc'd pages, not the store's
            t0 = time.perf_counter()
            dst = warm or [np.empty_like(a) for a in arrays.values()]
            for d, a in zip(dst, arrays.values()):
                np.copyto(d, a)
            out.append(time.perf_counter() - t0)
            del dst
    return out


def run(systems, n_async, n_sync, rounds, array_reps, blocks=10):
    """Rows: one per (system, workload, mode). Per round, each system (in
    an order reversed every other round) runs its async rounds, then its
    sync round trips with the workloads interleaved (_sync_interleaved)."""
    per = {}
    rng = np.random.default_rng(1)
    # Made after shoal connected: zero-copy arrays (when on) ...
    arrays = {"a": rng.random(ARRAY_BYTES // 4, dtype=np.float32),
              "b": rng.random(ARRAY_BYTES // 4, dtype=np.float32)}
    with _zero_copy.paused():  # ... and as if made before connect: malloc'd
        copied = {k: a.copy() for k, a in arrays.items()}
        warm = [np.ones_like(a) for a in arrays.values()]  # prefaulted
    shoal = next((s for s in systems if s.name == SHOAL), None)
    for s in systems:  # warm-up: every function once, everywhere
        for w in ("noop", "dict", "closure"):
            fn, args = _workload_fn(s, w)
            if fn is not None:
                _sync_round(s, fn, args, 50)
        _arrays_round(s, arrays, 1)
    for r in range(rounds):
        order = systems if r % 2 == 0 else systems[::-1]
        for s in order:
            cases = [(w, *_workload_fn(s, w))
                     for w in ("noop", "dict", "closure")]
            cases = [c for c in cases if c[1] is not None]
            for w, fn, args in cases:
                row = per.setdefault((s.name, w), {"tps": [], "p50": [],
                                                   "p99": [], "failed": 0})
                tps, failed = _async_round(s, fn, args, n_async)
                row["tps"].append(tps)
                row["failed"] += failed
            for w, (lat, failed) in _sync_interleaved(
                    s, cases, n_sync, blocks).items():
                row = per[(s.name, w)]
                row["p50"].append(_percentile(lat, 0.5) * 1e6)
                row["p99"].append(_percentile(lat, 0.99) * 1e6)
                row["failed"] += failed
        for s in order:
            per.setdefault((s.name, "arrays"), {"s": []})["s"].extend(
                _arrays_round(s, arrays, array_reps))
        if shoal is not None:
            per.setdefault((SHOAL_COPIED, "arrays"), {"s": []})["s"].extend(
                _arrays_round(shoal, copied, array_reps))
            per.setdefault((SHOAL_FRESH, "arrays"), {"s": []})["s"].extend(
                _fresh_arrays_round(shoal, rng, array_reps))
        for name, dst in ((BOUND_FRESH, None), (BOUND_WARM, warm)):
            per.setdefault((name, "arrays"), {"s": []})["s"].extend(
                _memcpy_rounds(arrays, array_reps, dst))
    rows = []
    for (name, w), p in per.items():
        if w == "arrays":
            rows.append({"workload": "python-values", "system": name,
                         "case": "arrays", "median_ms":
                         statistics.median(p["s"]) * 1e3,
                         "reps": len(p["s"]),
                         "per_rep_ms": [x * 1e3 for x in p["s"]]})
            continue
        rows.append({"workload": "python-values", "system": name, "case": w,
                     "tasks_per_s": statistics.median(p["tps"]),
                     "p50_us": statistics.median(p["p50"]),
                     "p99_us": statistics.median(p["p99"]),
                     "per_round_tps": p["tps"], "per_round_p50_us": p["p50"],
                     "async_tasks": n_async, "sync_tasks": n_sync,
                     "rounds": rounds, "failed": p["failed"]})
    return rows


def targets(rows):
    """(text, met) for each goal of the values section."""
    by = {(r["system"], r["case"]): r for r in rows}
    out = []
    noop, d, c = (by.get((SHOAL, w)) for w in ("noop", "dict", "closure"))
    if noop and d:
        tr = d["tasks_per_s"] / noop["tasks_per_s"]
        pr = d["p50_us"] / noop["p50_us"]
        out.append((f"(a) dict: async {tr:.2f}x of no-op's tasks/s (goal "
                    ">= 0.5x)", tr >= 0.5))
        out.append((f"(a) dict: sync p50 {pr:.2f}x of no-op's (goal <= "
                    "1.5x)", pr <= 1.5))
    if d and c:
        tr = d["tasks_per_s"] / c["tasks_per_s"]
        pr = c["p50_us"] / d["p50_us"]
        out.append((f"(b) closure: dict's tasks/s {tr:.2f}x the closure's "
                    "(goal <= 1.5x)", tr <= 1.5))
        out.append((f"(b) closure: sync p50 {pr:.2f}x dict's (goal <= 1.5x)",
                    pr <= 1.5))
    ray = next((r for r in rows if r["system"].startswith("Ray")
                and r["case"] == "arrays"), None)
    mine = by.get((SHOAL, "arrays"))
    if ray and mine:
        ratio = ray["median_ms"] / mine["median_ms"]
        out.append((f"(c) two 32 MiB arrays: {ratio:.1f}x faster than Ray "
                    "(goal >= 5x)", ratio >= 5))
    elif mine:
        out.append(("(c) two 32 MiB arrays: Ray absent, no ratio", False))
    for name in (SHOAL_COPIED, SHOAL_FRESH):
        other = by.get((name, "arrays"))
        if ray and other:  # figures beside the goal's
            out.append((f"(c) {name}: {ray['median_ms'] / other['median_ms']:.1f}x "
                        "faster than Ray", None))
    bound = by.get((BOUND_WARM, "arrays"))
    if bound and mine:
        text = (f"(c) one-copy bound (one prefaulted memcpy of the 64 MiB, "
                f"{bound['median_ms']:.2f} ms): shoal "
                f"{mine['median_ms'] / bound['median_ms']:.2f}x of it")
        if ray:
            text += f", Ray {ray['median_ms'] / bound['median_ms']:.2f}x"
        # A figure, not a goal: both systems copy the bytes once.
        out.append((text, None))
    return out


def print_tables(rows, workers, notes):
    tasks = [r for r in rows if r["case"] != "arrays"]
    if tasks:
        t = tasks[0]
        print(f"\n# Python values: 1 client, {workers} workers; async "
              f"{t['async_tasks']} tasks, sync {t['sync_tasks']}; medians of "
              f"{t['rounds']} rounds")
    print(f"{'system':34} {'case':8} {'tasks/s':>9} {'p50 us':>9} "
          f"{'p99 us':>9}  failed")
    for r in tasks:
        print(f"{r['system']:34} {r['case']:8} {r['tasks_per_s']:>9.0f} "
              f"{r['p50_us']:>9.1f} {r['p99_us']:>9.1f}  {r['failed']}")
    print(f"\n# a dict of two 32 MiB float32 arrays as the argument: submit "
          "→ the task read both (ms, median)")
    for r in rows:
        if r["case"] == "arrays":
            per = " ".join(f"{x:.1f}" for x in r["per_rep_ms"])
            print(f"{r['system']:34} {r['median_ms']:8.2f}   per rep: {per}")
    for n in notes:
        print(n)
    print("\n# targets (values)")
    for text, met in targets(rows):
        print(text if met is None else
              f"{text} ({'met' if met else 'NOT met'})")
