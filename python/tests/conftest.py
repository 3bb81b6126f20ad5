"""Fixtures for the Python tests: a real node (`shoal start -n 2`) and a
client connected to it. tools/test runs them with PYTHONPATH pointing at the
package Bazel assembled (bazel-out/<config>/bin/python/site) and SHOAL_BIN at
the shoal binary beside it."""

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:  # the task modules live here
    sys.path.insert(0, HERE)

import shoal  # noqa: E402


@pytest.fixture(scope="module")
def node():
    with shoal.start_node(2, store_bytes="1G") as n:
        yield n


@pytest.fixture(scope="module")
def client(node):
    c = shoal.connect(job_id=node.job_id)
    # Both workers start their interpreters and import the task module now,
    # so no test pays for it: two sleeps at once go to different workers.
    import pytasks
    warm = [c.submit(pytasks.sleep, 0.3) for _ in range(2)]
    for f in warm:
        f.result(60)
    yield c
    shoal.disconnect()


def runtime_root():
    """Where shoal keeps job folders (base/runtime_dir.cc's rule)."""
    if os.environ.get("SHOAL_RUNTIME_DIR"):
        return os.environ["SHOAL_RUNTIME_DIR"]
    if os.environ.get("XDG_RUNTIME_DIR"):
        return os.path.join(os.environ["XDG_RUNTIME_DIR"], "shoal")
    return f"/tmp/shoal-{os.getuid()}"


def worker_log(node, worker_id):
    """The text of a worker's log (its stdout and stderr)."""
    path = os.path.join(runtime_root(), node.job_id, "logs",
                        f"worker-{worker_id}.log")
    with open(path, errors="replace") as f:
        return f.read()
