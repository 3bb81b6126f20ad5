"""The Python client benchmark (`shoal bench python`, or
`python3 -m shoal_bench`): shoal's Python client beside the Python standard
library's answers, in the same run, on the same cores.

  tasks   no-op Python tasks (shoal_bench.tasks.noop) from one client to a
          node of 2 workers: async (N submitted, then all awaited: tasks/s)
          and sync (sequential submit + result: p50/p99 µs) — beside
          multiprocessing.Pool(2)'s apply_async and apply. Rounds alternate
          the two systems (both stay started, idle while the other runs);
          the tables show medians over the rounds.
  store   put of a 64 MiB float32 numpy array (GB/s) and get in another
          process (request → usable read-only view, µs) — beside
          multiprocessing.shared_memory (create + copy in; attach + view).
          Medians over repetitions, shoal and shared_memory alternating.
  values  what Python programs pass (shoal_bench.values): a
          small dict, the same in a closure, a dict of two 32 MiB arrays —
          beside multiprocessing.Pool, ProcessPoolExecutor and Ray (from a
          virtualenv; skipped when absent).
  actors  actor method calls (shoal_bench.actors): sync
          p50 and async calls/s on one actor, beside Ray actor calls.
  nested  tasks inside tasks (shoal_bench.nested): a parent fanning out
          to 100 children (children/s) and a recursion 20 deep (ms),
          beside Ray doing the same.

--json prints one JSON object per row.
"""

import argparse
import json
import multiprocessing
import statistics
import sys
import time
from multiprocessing import shared_memory

import numpy as np

from shoal_bench import actors, nested, tasks, values

SHOAL = "shoal (Python client)"


def _percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * q))]


# ---- tasks ------------------------------------------------------------------
# Each system is a pair of callables: async_round(n) → (seconds, failed) and
# sync_round(n) → (latencies in seconds, failed).

def _shoal_system(client):
    import shoal
    noop = tasks.noop

    def async_round(n):
        t0 = time.perf_counter()
        futures = [client.submit(noop) for _ in range(n)]
        done, pending = client.wait(futures, timeout=300)
        elapsed = time.perf_counter() - t0
        failed = len(pending) + sum(f.exception() is not None for f in done)
        return elapsed, failed

    def sync_round(n):
        latencies, failed = [], 0
        for _ in range(n):
            t0 = time.perf_counter()
            try:
                client.submit(noop).result(60)
            except shoal.Error:
                failed += 1
            latencies.append(time.perf_counter() - t0)
        return latencies, failed

    # Warm-up: both workers start their interpreters and import the module.
    for f in [client.submit(tasks.sleep, 0.2) for _ in range(2)]:
        f.result(60)
    shoal.wait([client.submit(noop) for _ in range(1000)])
    return async_round, sync_round


def _pool_system(pool):
    noop = tasks.noop

    def async_round(n):
        t0 = time.perf_counter()
        results = [pool.apply_async(noop) for _ in range(n)]
        failed = 0
        for r in results:
            try:
                r.get(300)
            except Exception:  # noqa: BLE001 (counted, not raised)
                failed += 1
        return time.perf_counter() - t0, failed

    def sync_round(n):
        latencies, failed = [], 0
        for _ in range(n):
            t0 = time.perf_counter()
            try:
                pool.apply(noop)
            except Exception:  # noqa: BLE001
                failed += 1
            latencies.append(time.perf_counter() - t0)
        return latencies, failed

    for _ in range(1000):
        pool.apply(noop)
    return async_round, sync_round


def bench_tasks(systems, n_async, n_sync, rounds):
    """Runs `rounds` rounds; in each, every system's async run, then every
    system's sync run (after n_sync/10 untimed warm-up tasks), the order of
    the systems alternating from round to round. Returns the rows."""
    per = {name: {"tps": [], "p50": [], "p99": [], "failed": 0}
           for name, _ in systems}
    for r in range(rounds):
        order = systems if r % 2 == 0 else systems[::-1]
        for name, (async_round, _) in order:
            seconds, failed = async_round(n_async)
            per[name]["tps"].append(n_async / seconds)
            per[name]["failed"] += failed
        for name, (_, sync_round) in order:
            sync_round(max(1, n_sync // 10))
            latencies, failed = sync_round(n_sync)
            per[name]["p50"].append(_percentile(latencies, 0.5) * 1e6)
            per[name]["p99"].append(_percentile(latencies, 0.99) * 1e6)
            per[name]["failed"] += failed
    rows = []
    for name, _ in systems:
        p = per[name]
        pool = name != SHOAL
        rows.append({
            "workload": "python-tasks", "system": name,
            "mode": "async (apply_async)" if pool else "async",
            "tasks": n_async, "rounds": rounds,
            "tasks_per_s": statistics.median(p["tps"]),
            "per_round": p["tps"], "failed": p["failed"]})
        rows.append({
            "workload": "python-tasks", "system": name,
            "mode": "sync (apply)" if pool else "sync",
            "tasks": n_sync, "rounds": rounds,
            "p50_us": statistics.median(p["p50"]),
            "p99_us": statistics.median(p["p99"]),
            "per_round_p50_us": p["p50"], "per_round_p99_us": p["p99"],
            "failed": p["failed"]})
    return rows


# ---- store ------------------------------------------------------------------

def _sample_sum(a):
    """A checksum of every 4096th element (checked after the timed get)."""
    return float(np.asarray(a).reshape(-1)[::4096].sum(dtype=np.float64))


def _consumer(conn, job_id):
    """Another process: times get (shoal) / attach (shared_memory) of what
    the producer names, until told to stop."""
    import shoal
    shoal.connect(job_id=job_id)
    while True:
        msg = conn.recv()
        if msg is None:
            return
        kind, name, shape, expected = msg
        t0 = time.perf_counter()
        if kind == "shoal":
            view = shoal.get(name)
            dt = time.perf_counter() - t0
            ok = (view.shape == shape and not view.flags.writeable
                  and _sample_sum(view) == expected)
            del view
        else:
            shm = shared_memory.SharedMemory(name=name)
            view = np.ndarray(shape, dtype=np.float32, buffer=shm.buf)
            dt = time.perf_counter() - t0
            ok = view.shape == shape and _sample_sum(view) == expected
            del view
            shm.close()
        conn.send((dt, ok))


def bench_store(job_id, nbytes, reps):
    import shoal
    src = np.random.default_rng(0).random(nbytes // 4, dtype=np.float32)
    shape = src.shape
    expected = _sample_sum(src)
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    consumer = ctx.Process(target=_consumer, args=(child, job_id))
    consumer.start()
    times = {"shoal put": [], "shoal get": [], "shm put": [], "shm get": []}
    wrong = {"shoal": 0, "shared_memory": 0}

    def shoal_rep():
        t0 = time.perf_counter()
        ref = shoal.put(src)
        times["shoal put"].append(time.perf_counter() - t0)
        parent.send(("shoal", ref.id, shape, expected))
        dt, ok = parent.recv()
        times["shoal get"].append(dt)
        wrong["shoal"] += not ok
        del ref

    def shm_rep():
        t0 = time.perf_counter()
        shm = shared_memory.SharedMemory(create=True, size=nbytes)
        dst = np.ndarray(shape, dtype=np.float32, buffer=shm.buf)
        dst[:] = src
        times["shm put"].append(time.perf_counter() - t0)
        parent.send(("shm", shm.name, shape, expected))
        dt, ok = parent.recv()
        times["shm get"].append(dt)
        wrong["shared_memory"] += not ok
        del dst
        shm.close()
        shm.unlink()

    try:
        for i in range(reps + 1):  # the first repetition warms up
            for rep in ((shoal_rep, shm_rep) if i % 2 == 0
                        else (shm_rep, shoal_rep)):
                rep()
    finally:
        parent.send(None)
        consumer.join(30)
    rows = []
    for key, label in (("shoal put", "shoal"), ("shm put", "shared_memory")):
        t = statistics.median(times[key][1:])
        rows.append({"workload": "python-store", "system": label, "op": "put",
                     "bytes": nbytes, "median_s": t,
                     "gb_per_s": nbytes / t / 1e9, "reps": reps,
                     "per_rep_s": times[key][1:], "wrong": wrong[label]})
    for key, label in (("shoal get", "shoal"), ("shm get", "shared_memory")):
        t = statistics.median(times[key][1:])
        rows.append({"workload": "python-store", "system": label,
                     "op": "get (other process)", "bytes": nbytes,
                     "median_s": t, "us": t * 1e6, "reps": reps,
                     "per_rep_s": times[key][1:], "wrong": wrong[label]})
    return rows


# ---- main -------------------------------------------------------------------

def _ratios(task_rows, store_rows):
    """(text, value, met) for each target of the tasks and store sections."""
    out = []
    by = {(r["system"], r["mode"].split()[0]): r for r in task_rows}
    pool = next((r["system"] for r in task_rows if r["system"] != SHOAL),
                None)
    if pool:
        s, p = by[(SHOAL, "async")], by[(pool, "async")]
        ratio = s["tasks_per_s"] / p["tasks_per_s"]
        rounds = [a / b for a, b in zip(s["per_round"], p["per_round"])]
        out.append((f"async tasks/s >= Pool's: {ratio:.2f}x (per round "
                    f"{min(rounds):.2f}-{max(rounds):.2f}x)", ratio >= 1))
        s, p = by[(SHOAL, "sync")], by[(pool, "sync")]
        ratio = s["p50_us"] / p["p50_us"]
        rounds = [a / b for a, b in zip(s["per_round_p50_us"],
                                        p["per_round_p50_us"])]
        out.append((f"sync p50 <= Pool's: {ratio:.3f}x of Pool's (per round "
                    f"{min(rounds):.3f}-{max(rounds):.3f}x)", ratio <= 1))
    if store_rows:
        put = {r["system"]: r for r in store_rows if r["op"] == "put"}
        ratio = put["shoal"]["gb_per_s"] / put["shared_memory"]["gb_per_s"]
        out.append((f"put >= 5x shared_memory's: {ratio:.1f}x", ratio >= 5))
    return out


def _print_tables(task_rows, store_rows, workers):
    rounds = task_rows[0]["rounds"]
    print(f"# Python client tasks: 1 client, {workers} workers, no-op tasks; "
          f"medians of {rounds} rounds")
    print(f"{'system':26} {'mode':20} {'tasks':>6} {'tasks/s':>9} "
          f"{'p50 us':>8} {'p99 us':>8}  failed")
    for r in task_rows:
        tps = f"{r['tasks_per_s']:.0f}" if "tasks_per_s" in r else "-"
        p50 = f"{r['p50_us']:.1f}" if "p50_us" in r else "-"
        p99 = f"{r['p99_us']:.1f}" if "p99_us" in r else "-"
        print(f"{r['system']:26} {r['mode']:20} {r['tasks']:>6} {tps:>9} "
              f"{p50:>8} {p99:>8}  {r['failed']}")
    print("\n# per round: async tasks/s | sync p50 us")
    for r in task_rows:
        vals = r.get("per_round") or r["per_round_p50_us"]
        fmt = "{:.0f}" if "per_round" in r else "{:.1f}"
        print(f"{r['system']:26} {r['mode']:20} "
              + " ".join(fmt.format(v) for v in vals))
    if store_rows:
        print(f"\n# Python store: {store_rows[0]['bytes'] >> 20} MiB float32 "
              f"array, medians of {store_rows[0]['reps']} repetitions")
        for r in store_rows:
            if r["op"] == "put":
                print(f"{r['system']:14} put  {r['median_s'] * 1e3:8.2f} ms"
                      f" {r['gb_per_s']:6.2f} GB/s          "
                      f"wrong {r['wrong']}")
            else:
                print(f"{r['system']:14} get  {r['us']:8.1f} us "
                      "(in another process)  wrong "
                      f"{r['wrong']}")
    print("\n# targets")
    for text, met in _ratios(task_rows, store_rows):
        print(f"{text} ({'met' if met else 'NOT met'})")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["dataloader"]:  # `shoal bench dataloader`
        from shoal_bench import dataloader
        return dataloader.main(argv[1:])
    p = argparse.ArgumentParser(prog="shoal bench python",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--async", dest="n_async", type=int, default=20000,
                   help="no-op tasks submitted then awaited (default 20000)")
    p.add_argument("--sync", dest="n_sync", type=int, default=2000,
                   help="sequential submit + result (default 2000)")
    p.add_argument("--workers", type=int, default=2,
                   help="workers of the node and processes of the Pool "
                   "(default 2)")
    p.add_argument("--rounds", type=int, default=5,
                   help="task rounds, alternating the systems (median; "
                   "default 5)")
    p.add_argument("--store-reps", type=int, default=10,
                   help="put/get repetitions (median; default 10)")
    p.add_argument("--put-bytes", type=int, default=64 << 20,
                   help="put/get size (default 64 MiB; 0: skip)")
    p.add_argument("--no-peers", action="store_true",
                   help="skip multiprocessing.Pool")
    p.add_argument("--json", action="store_true",
                   help="one JSON object per row")
    p.add_argument("--sections", default="tasks,store,values,actors,nested",
                   help="comma-separated: tasks, store, values, actors, "
                   "nested (default all)")
    p.add_argument("--actor-async", type=int, default=5000,
                   help="actors: calls submitted then awaited per round "
                   "(default 5000)")
    p.add_argument("--actor-sync", type=int, default=2000,
                   help="actors: sequential call + result per round "
                   "(default 2000)")
    p.add_argument("--values-async", type=int, default=5000,
                   help="values: tasks submitted then awaited per round "
                   "(default 5000)")
    p.add_argument("--values-sync", type=int, default=1000,
                   help="values: sequential submit + result per round "
                   "(default 1000)")
    p.add_argument("--values-blocks", type=int, default=10,
                   help="values: blocks a round's sync round trips are "
                   "split into, a system's workloads alternating (default "
                   "10)")
    p.add_argument("--values-rounds", type=int, default=3,
                   help="values: rounds (median; default 3)")
    p.add_argument("--array-reps", type=int, default=5,
                   help="values: two-array repetitions per round "
                   "(default 5)")
    p.add_argument("--ray-venv", default=values.DEFAULT_VENV,
                   help="values: the virtualenv holding Ray (default "
                   "%(default)s)")
    p.add_argument("--install-ray", action="store_true",
                   help="values: create --ray-venv (--system-site-packages) "
                   "and pip-install ray into it first")
    args = p.parse_args(argv)
    sections = set(args.sections.split(","))

    import shoal
    # The Pools fork before this process holds any shoal connection (a
    # ZeroMQ context must not cross fork()); Ray starts before the node.
    pool = (None if args.no_peers or "tasks" not in sections else
            multiprocessing.get_context("fork").Pool(args.workers))
    value_peers, notes = [], []
    ray = None
    if "values" in sections and not args.no_peers:
        value_peers = [values._Pool(args.workers),
                       values._Executor(args.workers)]
    if sections & {"values", "actors", "nested"} and not args.no_peers:
        ray, note = values.load_ray(args.ray_venv, args.install_ray,
                                           args.workers)
        value_peers += [ray] if ray else []
        notes += [note] if note else []
    if value_peers:
        notes.append("closure: multiprocessing.Pool and ProcessPoolExecutor "
                     "skipped (the standard pickle refuses closures)")
    task_rows, store_rows, value_rows, actor_rows = [], [], [], []
    nested_rows = []
    try:
        with shoal.start_node(args.workers, store_bytes="1G") as node:
            client = shoal.connect(job_id=node.job_id)
            if "tasks" in sections:
                systems = [(SHOAL, _shoal_system(client))]
                if pool is not None:
                    systems.append((f"multiprocessing.Pool({args.workers})",
                                    _pool_system(pool)))
                task_rows = bench_tasks(systems, args.n_async, args.n_sync,
                                        args.rounds)
                del systems
            if "store" in sections and args.put_bytes > 0:
                store_rows = bench_store(node.job_id, args.put_bytes,
                                         args.store_reps)
            if "values" in sections:
                value_rows = values.run(
                    [values._Shoal(client)] + value_peers,
                    args.values_async, args.values_sync, args.values_rounds,
                    args.array_reps, args.values_blocks)
            if "actors" in sections:
                actor_rows = actors.run(ray, args.actor_async,
                                               args.actor_sync,
                                               args.values_rounds)
            if "nested" in sections:
                nested_rows = nested.run(client, ray, 100, 20,
                                                args.values_rounds + 2)
            shoal.disconnect()
            del client
    finally:
        if pool is not None:
            pool.terminate()
            pool.join()
        for peer in value_peers:
            peer.close()
    if args.json:
        for r in task_rows + store_rows + value_rows + actor_rows + \
                nested_rows:
            r["workers"] = args.workers
            print(json.dumps(r))
        return 0
    if task_rows:
        _print_tables(task_rows, store_rows, args.workers)
    if value_rows:
        values.print_tables(value_rows, args.workers, notes)
    if actor_rows:
        actors.print_tables(actor_rows)
    nested.print_tables(nested_rows, args.workers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
