"""A remote Python client's no-op round: sync p50 and async
tasks/s of `shoal.connect(force_remote=True)` against a 2-worker node, with
the pipelined path (default) or, with SHOAL_PY_REMOTE_PIPELINE=0, one
submit and one wait request per task. Not part of `shoal bench`; run as

  bazel build --config=opt //tools:shoal //python:site
  PYTHONPATH=bazel-out/k8-optopt/bin/python/site \\
  SHOAL_BIN=bazel-out/k8-optopt/bin/tools/shoal \\
  /usr/bin/python3 tools/bench/tasks_bench_python_remote.py [ROUNDS SYNC ASYNC]

Prints each round and the medians."""
import statistics
import sys
import time

import shoal


def main(rounds=5, n_sync=1000, n_async=10000):
    with shoal.start_node(2) as node:
        c = shoal.connect(job_id=node.job_id, force_remote=True)
        assert not c.local
        assert c.submit("echo", 7).result(30) == 7
        p50s, rates = [], []
        for r in range(rounds):
            lat = []
            for _ in range(n_sync):
                t0 = time.perf_counter()
                c.submit("noop").result(30)
                lat.append(time.perf_counter() - t0)
            p50s.append(statistics.median(lat) * 1e6)
            t0 = time.perf_counter()
            futures = [c.submit("noop") for _ in range(n_async)]
            for f in futures:
                f.result(60)
            rates.append(n_async / (time.perf_counter() - t0))
            print(f"round {r}: sync p50 {p50s[-1]:.1f} us, "
                  f"async {rates[-1]:,.0f} tasks/s", flush=True)
        print(f"median: sync p50 {statistics.median(p50s):.1f} us, "
              f"async {statistics.median(rates):,.0f} tasks/s")
        shoal.disconnect()


if __name__ == "__main__":
    main(*map(int, sys.argv[1:]))
