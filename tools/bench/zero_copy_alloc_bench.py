"""What the zero-copy array handler costs numpy code that is not sending
arrays anywhere: np.empty and `a + b` (a temporary per call) of 1, 4 and
32 MiB float32 arrays, with the handler on (store memory) and paused
(numpy's malloc), in the same run, on a node of 2 workers.

  PYTHONPATH=bazel-out/k8-optopt/bin/python/site \
  SHOAL_BIN=bazel-out/k8-optopt/bin/tools/shoal \
  /usr/bin/python3 tools/bench/zero_copy_alloc_bench.py [reps]

Prints one row per size and operation: medians of 5 rounds of `reps` calls.
"""
import statistics
import sys
import time

import numpy as np

import shoal
from shoal import _zero_copy


def per_call_us(fn, reps):
    fn()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps * 1e6


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    node = shoal.start_node(2)
    try:
        shoal.connect()
        print("| size | op | handler on (us) | paused: malloc (us) | on / paused |")
        print("| --- | --- | --- | --- | --- |")
        for mib in (1, 4, 32):
            n = mib << 18
            a = np.ones(n, np.float32)
            b = np.ones(n, np.float32)
            ops = {"np.empty": lambda: np.empty(n, np.float32),
                   "a + b": lambda: a + b}
            for name, fn in ops.items():
                on, off = [], []
                for _ in range(5):
                    on.append(per_call_us(fn, reps))
                    with _zero_copy.paused():
                        off.append(per_call_us(fn, reps))
                m_on, m_off = statistics.median(on), statistics.median(off)
                print(f"| {mib} MiB | {name} | {m_on:.1f} | {m_off:.1f} | "
                      f"{m_on / m_off:.2f} |")
        print("stats:", _zero_copy.stats())
    finally:
        shoal.disconnect()
        node.stop()


if __name__ == "__main__":
    main()
