"""torch.distributed's "shoal" backend with real processes (2 ranks): under
`shoal launch`, and torchrun-style (plain processes with RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT: torch's own TCPStore) — every op, ReduceOp and
dtype, non-contiguous tensors, subgroups, send/recv, DDP, and a dead or
stalled rank. tools/test runs it (PYTHONPATH at the package, SHOAL_BIN at
the binary)."""

import os
import socket
import subprocess
import sys

import pytest

import shoal

pytest.importorskip("torch")

PROBE = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                     "torch_probe.py")


def env_with_package():
    env = dict(os.environ)
    env["PYTHONPATH"] = shoal._paths.package_dir()
    env["OMP_NUM_THREADS"] = "1"
    return env


def under_shoal_launch(mode, nproc=2):
    return subprocess.run(
        [shoal._paths.shoal_binary(), "launch", "--nproc-per-node",
         str(nproc), "--", sys.executable, PROBE, mode],
        capture_output=True, text=True, timeout=240, env=env_with_package())


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_style(mode, nproc=2, wrap=lambda rank: []):
    """(returncode, output) of each rank, started as torchrun would;
    wrap(rank) prefixes a rank's command line."""
    port = free_port()
    procs = []
    for rank in range(nproc):
        env = env_with_package()
        env.update(RANK=str(rank), LOCAL_RANK=str(rank),
                   WORLD_SIZE=str(nproc), LOCAL_WORLD_SIZE=str(nproc),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen(
            wrap(rank) + [sys.executable, PROBE, mode], env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True))
    results = []
    for p in procs:
        out, _ = p.communicate(timeout=240)
        results.append((p.returncode, out))
    return results


def test_every_op_under_shoal_launch():
    out = under_shoal_launch("ops")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "rank 0: ok" in out.stdout and "rank 1: ok" in out.stdout


def test_every_op_torchrun_style():
    for rank, (code, out) in enumerate(torchrun_style("ops")):
        assert code == 0 and f"rank {rank}: ok" in out, out


def test_ddp_three_steps_under_shoal_launch():
    out = under_shoal_launch("ddp")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "rank 0: ok" in out.stdout and "rank 1: ok" in out.stdout


@pytest.mark.parametrize("kind", ["dead", "stall"])
def test_a_failed_rank_fails_the_others_within_the_timeout(kind):
    (code0, out0), _ = torchrun_style(kind)
    assert code0 == 0, out0
    assert "rank 0: failed after" in out0 and "rank 0: ok" in out0, out0
    if kind == "dead":
        assert "died" in out0, out0
    else:
        assert "did not arrive within the timeout" in out0, out0



def test_a_world_across_machines_works():
    # Rank 1 on "another machine": its own UTS namespace with another host
    # name (the backend tells machines apart by host name and boot id), so
    # the group takes the hierarchical backend (1 rank per node, gloo over
    # loopback). tests/nodes runs 2 network namespaces × 2 ranks.
    probe = subprocess.run(["unshare", "--uts", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("cannot create a UTS namespace here (unshare --uts: "
                    f"{probe.stderr.decode().strip()})")

    def wrap(rank):
        if rank == 0:
            return []
        return ["unshare", "--uts", "sh", "-c",
                'hostname shoal-test-other && exec "$@"', "sh"]

    for rank, (code, out) in enumerate(torchrun_style("nodes", wrap=wrap)):
        assert code == 0, out
        assert f"rank {rank}: nodes of 2 ranks ok" in out, out
