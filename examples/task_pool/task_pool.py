"""A pool of Python workers: map a CPU-bound function over arrays in the store.

    python3 examples/task_pool/task_pool.py               # starts a node
    shoal start -n 2 --daemon --job-id pool
    python3 examples/task_pool/task_pool.py --job-id pool # uses that node

The client puts a list of numpy arrays into the node's store once, then runs
escape_counts (pure-Python loops: CPU-bound, holding the GIL throughout) on
each of them twice:

- in this process, one array after the other, reading the store views;
- as shoal tasks, one per array, passing the ObjectRefs: each worker is a
  process with its own interpreter, reads its array in place (no copy, no
  pickling) and returns its result through the store.

It checks that both give the same results and prints the times and the
speed-up, measured (1.5-1.7x with 2 workers on an idle 2-CPU machine), and
how the tasks ran: how many at once on average, and how much of a CPU each
had (which says when other work on the machine took the CPUs).
"""

import argparse
import os
import statistics
import sys
import time

import numpy as np

import shoal


def escape_counts(points, max_iter):
    """For each row (re, im) of `points`, the iterations z <- z*z + c takes
    to leave the disc of radius 2 (max_iter if it never does): the
    Mandelbrot set, one point at a time in plain Python."""
    out = np.empty(len(points), dtype=np.int32)
    for i, (re, im) in enumerate(points.tolist()):
        zr = zi = 0.0
        n = 0
        while n < max_iter and zr * zr + zi * zi <= 4.0:
            zr, zi = zr * zr - zi * zi + re, 2.0 * zr * zi + im
            n += 1
        out[i] = n
    return out


def escape_counts_timed(points, max_iter):
    """escape_counts, and how it ran: (counts, start, end, CPU seconds).
    time.monotonic() is the same clock in every process of the machine."""
    start, cpu = time.monotonic(), time.thread_time()
    counts = escape_counts(points, max_iter)
    return counts, start, time.monotonic(), time.thread_time() - cpu


def worker_pid():
    """Which worker ran this (warm-up)."""
    time.sleep(0.2)
    return os.getpid()


def make_arrays(count, points, seed):
    """`count` arrays of `points` (re, im) rows around the Mandelbrot set."""
    rng = np.random.default_rng(seed)
    return [np.column_stack([rng.uniform(-2.0, 0.6, points),
                             rng.uniform(-1.2, 1.2, points)])
            for _ in range(count)]


def warm_up(client, workers, rounds=10):
    """Has every worker start its interpreter and import this module (the
    first task on a worker does that), so the timings measure the work."""
    seen = set()
    for _ in range(rounds):
        futures = [client.submit(worker_pid) for _ in range(workers)]
        seen.update(int(f.result(120)) for f in futures)
        if len(seen) >= workers:
            break
    return sorted(seen)


def plural(workers):
    return f"{workers} worker{'' if workers == 1 else 's'}"


def run(client, workers, a):
    arrays = make_arrays(a.arrays, a.points, a.seed)
    refs = [client.put(x) for x in arrays]  # into the store, once
    del arrays
    mib = sum(r.nbytes for r in refs) / 2**20
    print(f"task_pool: {a.arrays} arrays of {a.points} points "
          f"({mib:.1f} MiB) in the store; escape_counts(max_iter="
          f"{a.max_iter}) on each; {plural(workers)}, "
          f"{os.cpu_count()} CPUs here", flush=True)
    pids = warm_up(client, workers)
    print(f"workers ready: pids {', '.join(map(str, pids))}", flush=True)

    speedups = []
    for r in range(a.rounds):
        t0, cpu0 = time.monotonic(), time.process_time()
        expected = [escape_counts(client.get(ref), a.max_iter) for ref in refs]
        t_one = time.monotonic() - t0
        one_share = (time.process_time() - cpu0) / t_one

        t0 = time.monotonic()
        futures = [client.submit(escape_counts_timed, ref, a.max_iter)
                   for ref in refs]
        results = [f.result(600) for f in futures]
        t_pool = time.monotonic() - t0

        for i, (want, got) in enumerate(zip(expected, results)):
            if not np.array_equal(want, got[0]):
                print(f"task_pool: array {i}: the task's result differs from "
                      "the one computed here", file=sys.stderr)
                return 1
        # How the tasks ran: how many at once on average, and how much of a
        # CPU each had while it ran (less when other work shares the CPUs).
        busy = sum(end - start for _, start, end, _ in results)
        at_once = busy / t_pool
        pool_share = sum(cpu for *_, cpu in results) / busy
        speedups.append(t_one / t_pool)
        print(f"round {r + 1}: one process {t_one:.3f} s "
              f"({100 * one_share:.0f}% of a CPU), {plural(workers)} "
              f"{t_pool:.3f} s ({at_once:.2f} tasks at once, "
              f"{100 * pool_share:.0f}% of a CPU each): "
              f"speed-up {t_one / t_pool:.2f}x; results identical",
              flush=True)
    print(f"speed-up: median {statistics.median(speedups):.2f}x, best "
          f"{max(speedups):.2f}x over {len(speedups)} round(s) with "
          f"{plural(workers)}; results identical in every round")
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--job-id", default="",
                   help="use this running node (`shoal start`) instead of "
                   "starting one")
    p.add_argument("-n", "--workers", type=int, default=2,
                   help="workers of the node this starts (default 2)")
    p.add_argument("--arrays", type=int, default=16, help="arrays (tasks)")
    p.add_argument("--points", type=int, default=20000,
                   help="points per array")
    p.add_argument("--max-iter", type=int, default=60,
                   help="iterations per point at most")
    p.add_argument("--rounds", type=int, default=3,
                   help="times to measure both ways")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args(argv)

    if a.job_id:
        client = shoal.connect(job_id=a.job_id)
        workers = len(client.status()["workers"])
        return run(client, workers, a)
    with shoal.start_node(a.workers, store_bytes="256M") as node:
        print(f"started a node: {node.ready_line}", flush=True)
        client = shoal.connect(job_id=node.job_id)
        try:
            return run(client, a.workers, a)
        finally:
            shoal.disconnect()


if __name__ == "__main__":
    sys.exit(main())
