"""examples/python_torch/train.py for real, under `shoal launch`: 2 ranks
with batch B follow the loss curve of 1 rank with batch 2B, the model
learns, the ranks' parameters stay bit-identical, and a rank whose update
differs is caught. Run by tools/test (pytest, PYTHONPATH at the package,
SHOAL_BIN at the binary)."""

import os
import re
import subprocess
import sys

import pytest

import shoal

pytest.importorskip("torch")

TRAIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "train.py")
# A small model and few steps: seconds on 2 CPUs.
SMALL = ["--hidden", "128", "--samples", "8192", "--steps", "40",
         "--check-every", "10", "--log-every", "10", "--device", "cpu"]


def launch(nproc, *args):
    env = dict(os.environ)
    env["PYTHONPATH"] = shoal._paths.package_dir()
    return subprocess.run(
        [shoal._paths.shoal_binary(), "launch", "--nproc-per-node",
         str(nproc), "--store-bytes", "64M", "--", sys.executable, TRAIN,
         *SMALL, *args],
        capture_output=True, text=True, timeout=120, env=env)


def losses(csv):
    with open(csv) as f:
        lines = f.read().split("\n")
    assert lines[0] == ("step,loss,samples_per_s,step_ms,ranks,"
                        "batch_per_rank,device")
    return [float(line.split(",")[1]) for line in lines[1:] if line]


def test_two_ranks_follow_one_rank_with_twice_the_batch(tmp_path):
    one = launch(1, "--batch", "32", "--csv", str(tmp_path / "one.csv"))
    assert one.returncode == 0, one.stdout + one.stderr
    two = launch(2, "--batch", "16", "--csv", str(tmp_path / "two.csv"))
    assert two.returncode == 0, two.stdout + two.stderr

    # Rank 0 logs the loss and samples/s, checks the replicas 4 times.
    assert "python_torch: 2 ranks x batch 16 (global 32) on cpu" in two.stdout
    assert re.search(r"step     10  loss [0-9.]+ +[0-9]+ samples/s",
                     two.stdout), two.stdout
    assert "parameters bit-identical across ranks at 4 checks" in two.stdout
    assert re.search(r"summary: ranks=2 batch=16 global_batch=32 device=cpu "
                     r"steps=40 samples_per_s=[0-9.]+ ", two.stdout)
    assert f"csv:  {tmp_path / 'two.csv'}" in two.stdout

    a, b = losses(tmp_path / "one.csv"), losses(tmp_path / "two.csv")
    assert len(a) == len(b) == 40
    for step, (x, y) in enumerate(zip(a, b), 1):
        # Only the order of float additions differs (measured: < 1e-6).
        assert abs(x - y) <= 1e-4 * x, (step, x, y)
    assert a[-1] < 0.7 * a[0], "the model should learn"


def test_a_rank_that_applies_another_update_is_caught():
    out = launch(2, "--batch", "16", "--steps", "20", "--diverge-at", "7")
    assert out.returncode != 0, out.stdout + out.stderr
    assert ("parameters are no longer bit-identical after step 10"
            in out.stdout + out.stderr), out.stdout + out.stderr
