"""tools/knobs.py --check as a test: docs/env.md is made from base/knobs.inc,
every SHOAL_* variable the code reads is declared there, and every declared
one is read. Run from the repository root (tools/test does)."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_knobs_are_declared_once_and_documented():
    p = subprocess.run([sys.executable, "tools/knobs.py", "--check"], cwd=ROOT,
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
