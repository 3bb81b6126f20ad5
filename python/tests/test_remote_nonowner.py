"""A remote client that is not the node's owner runs Python functions.

The node refuses a python_path from anyone but its owner (a search path is
code: its workers run as the owner), so the Python client sends none when
the welcome says owner=false: the function is imported from the node's own
paths. Before, the client always sent its sys.path, and a non-owner's every
py: submit was refused with PERMISSION_DENIED."""

import ctypes
import ctypes.util
import os
import re
import subprocess
import sys

import pytest

import shoal

HERE = os.path.dirname(os.path.abspath(__file__))


def curve_key_pair():
    """(public, secret), Z85, from the system's libzmq."""
    name = ctypes.util.find_library("zmq") or "libzmq.so.5"
    try:
        zmq = ctypes.CDLL(name)
    except OSError as e:
        pytest.skip(f"no libzmq to make a CURVE key with: {e}")
    public = ctypes.create_string_buffer(41)
    secret = ctypes.create_string_buffer(41)
    if zmq.zmq_curve_keypair(public, secret) != 0:
        pytest.skip("libzmq without CURVE")
    return public.value.decode(), secret.value.decode()


CLIENT = r"""
import sys
import shoal
import pytasks
c = shoal.connect(sys.argv[1], job_id=sys.argv[2], force_remote=True)
assert not c.local, "a remote client"
assert not c._handle.owner, "the node must not count this key as its owner"
assert c._python_path() == "", "a non-owner must send no python_path"
assert pytasks.add.__module__ == "pytasks"
f = c.submit(pytasks.add, 2, 40)
assert f.result(60) == 42, f.result(60)
print("served", flush=True)
"""


def test_a_non_owner_runs_a_python_function(tmp_path):
    public, secret = curve_key_pair()
    keys = tmp_path / "guest.key"
    fd = os.open(keys, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f"public={public}\nsecret={secret}\n")
    admitted = tmp_path / "guests.txt"
    admitted.write_text(public + "\n")
    # The task module is on the node's own path, not sent by the client.
    with shoal.start_node(1, store_bytes="64M", pythonpath=HERE,
                          extra_args=["--client-keys", str(admitted)]) as n:
        tcp = re.search(r"tcp (tcp://[0-9.]+:[0-9]+)", n.ready_line)
        assert tcp, n.ready_line
        env = dict(os.environ)
        env["SHOAL_CLIENT_KEY_FILE"] = str(keys)
        env["PYTHONPATH"] = os.pathsep.join(
            [HERE] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                      if p])
        run = subprocess.run(
            [sys.executable, "-c", CLIENT, tcp.group(1), n.job_id],
            env=env, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stdout + run.stderr
        assert "served" in run.stdout
