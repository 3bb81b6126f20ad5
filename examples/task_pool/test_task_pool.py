"""examples/task_pool/task_pool.py for real: it starts a node with 2
workers, maps escape_counts over arrays in the store, checks the tasks'
results against the ones it computes itself, and reports the speed-up.
Run by tools/test (pytest, PYTHONPATH at the package, SHOAL_BIN at the
binary)."""

import os
import re
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import task_pool  # noqa: E402

ROUND = re.compile(
    r"round \d+: one process ([0-9.]+) s \((\d+)% of a CPU\), 2 workers "
    r"([0-9.]+) s \(([0-9.]+) tasks at once, (\d+)% of a CPU each\): "
    r"speed-up ([0-9.]+)x; results identical")


def test_escape_counts_of_known_points():
    points = np.array([[0.0, 0.0], [-1.0, 0.0], [-2.0, 0.0], [2.0, 2.0],
                       [1.0, 0.0]])
    # 0, -1 and -2 stay bounded; 2+2i leaves at once; 1 goes 1, 2, 5.
    assert task_pool.escape_counts(points, 50).tolist() == [50, 50, 50, 1, 3]


def test_the_pool_gives_the_same_results_faster():
    out = subprocess.run(
        [sys.executable, os.path.join(HERE, "task_pool.py"), "--arrays", "8",
         "--points", "12000", "--rounds", "4"],
        capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert out.returncode == 0, out.stdout + out.stderr
    print(out.stdout)
    assert re.search(r"speed-up: median [0-9.]+x, best [0-9.]+x over 4 "
                     r"round\(s\) with 2 workers; results identical in every "
                     r"round", out.stdout), out.stdout
    rounds = [tuple(float(v) for v in m.groups())
              for m in ROUND.finditer(out.stdout)]
    assert len(rounds) == 4, out.stdout

    # The 8 tasks ran on both workers at the same time: true however busy
    # the CPUs are (the tasks then just take longer).
    assert max(r[3] for r in rounds) > 1.5, out.stdout
    # The speed-up, though, depends on the 2 CPUs being ours: other work on
    # the machine (this checkout is shared) can take them. So the bound
    # (loose: ~1.6-1.9x measured on an idle machine; tasks run one at a
    # time would give < 1x) applies to the rounds in which the process and
    # the workers had most of a CPU each — measured, not assumed.
    fair = [r[5] for r in rounds if r[1] >= 85 and r[4] >= 85]
    if fair:
        assert max(fair) > 1.2, out.stdout
    else:
        print("the CPUs were busy with other work in every round: speed-up "
              "not checked")
