"""Every ```python block of README.md and docs/*.md runs as it stands.

A block runs as a script of its own (a file in a fresh folder), with a node
like the README's (`shoal start -n 2`: two 1-CPU workers) that `shoal.connect()`
finds through $SHOAL_JOB_ID. An HTML comment on the line before a block says
otherwise:

    <!-- example: no-node -->     it starts its own node: run with none
    <!-- example: launch -->      under `shoal launch --nproc-per-node 2`
    <!-- example: torch -->       needs torch (skipped where it is absent)
    <!-- example: gpu -->         needs a GPU (not run here)

(words combine: `<!-- example: launch torch -->`)."""

import glob
import os
import re
import subprocess
import sys

import pytest

import shoal

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
_BLOCK = re.compile(
    r"(?:<!--\s*example:\s*(?P<marks>[\w\s-]+?)\s*-->\n)?"
    r"^```python\n(?P<code>.*?)^```$", re.S | re.M)
_MARKS = {"no-node", "launch", "torch", "gpu"}


def _blocks():
    out = []
    for path in [os.path.join(ROOT, "README.md")] + sorted(
            glob.glob(os.path.join(ROOT, "docs", "*.md"))):
        with open(path) as f:
            text = f.read()
        for m in _BLOCK.finditer(text):
            line = text.count("\n", 0, m.start("code"))
            marks = set((m.group("marks") or "").split())
            out.append(pytest.param(
                m.group("code"), marks,
                id=f"{os.path.relpath(path, ROOT)}:{line}"))
    return out


BLOCKS = _blocks()


def test_blocks_found():
    assert len(BLOCKS) >= 7  # README's two, actors.md's two, python.md's ...


def _has_torch():
    try:
        import torch  # noqa: F401
        return True
    except ImportError:
        return False


@pytest.fixture(scope="module")
def readme_node():
    with shoal.start_node(2) as n:  # `shoal start -n 2`
        yield n


@pytest.mark.parametrize("code,marks", BLOCKS)
def test_block_runs(code, marks, tmp_path, request):
    unknown = marks - _MARKS
    assert not unknown, f"unknown example marks {unknown}"
    if "gpu" in marks:
        pytest.skip("needs a GPU")
    if "torch" in marks and not _has_torch():
        pytest.skip("needs torch")
    script = tmp_path / "example.py"
    script.write_text(code)
    env = dict(os.environ)
    env.pop("SHOAL_JOB_ID", None)
    if "launch" in marks:
        cmd = [shoal._paths.shoal_binary(), "launch", "--nproc-per-node", "2",
               "--", sys.executable, str(script)]
    else:
        cmd = [sys.executable, str(script)]
        if "no-node" not in marks:
            env["SHOAL_JOB_ID"] = request.getfixturevalue("readme_node").job_id
    p = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, (
        f"exit {p.returncode}\n--- stdout\n{p.stdout}\n--- stderr\n{p.stderr}")
