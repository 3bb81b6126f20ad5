"""Python under `shoal launch`: collectives on numpy arrays and torch
tensors across 2 processes, KV, barriers, store hand-over."""

import os
import subprocess
import sys

import shoal

HERE = os.path.dirname(os.path.abspath(__file__))


def test_collectives_across_two_launched_processes():
    env = dict(os.environ)
    env["PYTHONPATH"] = shoal._paths.package_dir()
    out = subprocess.run(
        [shoal._paths.shoal_binary(), "launch", "--nproc-per-node", "2",
         "--", sys.executable, os.path.join(HERE, "launch_probe.py")],
        capture_output=True, text=True, timeout=150, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "rank 0: ok" in out.stdout and "rank 1: ok" in out.stdout


def test_launch_finds_the_package_without_pythonpath():
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(
        [shoal._paths.shoal_binary(), "launch", "--nproc-per-node", "1",
         "--", sys.executable, "-c",
         "import shoal; print('rank', shoal.init().rank)"],
        capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "rank 0" in out.stdout
