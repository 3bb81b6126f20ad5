"""Where the time of "new arrays every rep" goes (`shoal bench python`'s
values section, docs/values.md "Zero-copy arrays"): two new 32 MiB float32
arrays per rep, made after connect (store memory), passed in a dict, read
page by page by the task, dropped after it.

  PYTHONPATH=bazel-out/k8-optopt/bin/python/site \\
  SHOAL_BIN=bazel-out/k8-optopt/bin/tools/shoal \\
  /usr/bin/python3 tools/bench/zero_copy_breakdown.py [reps] [--same]

Per rep, from timestamps in the client and the task (time.perf_counter:
CLOCK_MONOTONIC, comparable across processes): making the arrays
(rng.random into store memory; outside the benchmark's timing), the snapshots (seal + the
copy-on-write re-map of both arrays, _zero_copy.snapshot), the rest of
submit (pickling, the task into the table), the task table until the task
runs, the task's read of every page, and the task's minor page faults during
the read. --same re-sends the same arrays instead (the unchanged case).
Prints every rep, then medians.
"""
import os
import resource
import statistics
import sys
import time

import numpy as np

import shoal
from shoal import _zero_copy

ELEMENTS = 8 << 20  # float32: 32 MiB
_snapshot_s = []


def _timed_snapshot(raw, _inner=_zero_copy.snapshot):
    t0 = time.perf_counter()
    try:
        return _inner(raw)
    finally:
        _snapshot_s.append(time.perf_counter() - t0)


def read_pages(d):
    """Reads every page of the arrays: (start, end, minor faults)."""
    start = time.perf_counter()
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    total = 0.0
    for a in d.values():
        total += float(a[::1024].sum())  # 4 KiB apart
    end = time.perf_counter()
    return start, end, resource.getrusage(
        resource.RUSAGE_SELF).ru_minflt - faults, total


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    reps = int(args[0]) if args else 15
    same = "--same" in sys.argv
    _zero_copy.snapshot = _timed_snapshot
    rng = np.random.default_rng(1)
    rows = []
    with shoal.start_node(2, store_bytes="1G") as node:
        client = shoal.connect(job_id=node.job_id)
        d = None
        for rep in range(reps + 3):  # 3 warm-up reps
            t_make = time.perf_counter()
            if d is None or not same:
                d = {"a": rng.random(ELEMENTS, dtype=np.float32),
                     "b": rng.random(ELEMENTS, dtype=np.float32)}
            made = time.perf_counter() - t_make
            _snapshot_s.clear()
            t0 = time.perf_counter()
            fut = client.submit(read_pages, d)
            t1 = time.perf_counter()
            start, end, faults, _ = fut.result(60)
            if rep >= 3:
                rows.append({"make arrays": made,
                             "snapshot": sum(_snapshot_s),
                             "submit rest": t1 - t0 - sum(_snapshot_s),
                             "to the task": start - t1,
                             "task read": end - start,
                             "total": end - t0, "task faults": faults})
            del fut
            if not same:
                d = None
        shoal.disconnect()
    ms = [k for k in rows[0] if k != "task faults"]
    print(" ".join(f"{k:>12}" for k in ms), "task faults")
    for r in rows:
        print(" ".join(f"{r[k] * 1e3:12.3f}" for k in ms),
              f"{r['task faults']:11}")
    print("median (ms): " + ", ".join(
        f"{k} {statistics.median(r[k] for r in rows) * 1e3:.3f}" for k in ms)
        + f"; task faults {statistics.median(r['task faults'] for r in rows)}")
    print("stats:", _zero_copy.stats(), "pid", os.getpid())


if __name__ == "__main__":
    main()
