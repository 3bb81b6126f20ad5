"""`shoal bench torch`: torch.distributed's all_reduce and a DDP step with
backend "shoal" beside "gloo", 2 ranks on this machine, in the same run —
and `shoal bench collective` (shoal's own API) at the same sizes, to show
what the torch layer costs.

    shoal bench torch [--minbytes 4K] [--maxbytes 64M] [--iters 0]
                      [--reps 7] [--nproc 2] [--no-ddp] [--no-native]

all_reduce: float32 SUM through dist.all_reduce, nccl-tests' formulas
(algbw = bytes / time, busbw = algbw * 2 (n-1) / n); each time is the
median of --reps repetitions of --iters calls (0: ~20 ms worth). DDP: a
3-layer MLP (128-1024-1024-32 with ReLU: ~1.2 M parameters), batch 64 per
rank, SGD; the step time, and the share of it spent communicating (1 -
the step time under no_sync, which skips the all_reduce, over the step
time with it). Every rank runs with one torch thread (OMP_NUM_THREADS=1).
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

from shoal import _paths

MODULE = "shoal_bench.torch_dist"


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().rstrip("B").rstrip("I")
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def sizes(lo, hi):
    out, s = [], lo
    while s <= hi:
        out.append(s)
        s *= 4
    return out


# ---- one rank ---------------------------------------------------------------

def rank_main(a):
    import torch
    import torch.distributed as dist
    if a.backend == "shoal":
        import shoal.torch  # noqa: F401
    torch.set_num_threads(1)
    dist.init_process_group(a.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    rows = []
    for nbytes in sizes(a.minbytes, a.maxbytes):
        t = torch.ones(nbytes // 4)
        for _ in range(5):
            dist.all_reduce(t)
        iters = a.iters
        if iters == 0:  # ~20 ms worth, the same on every rank
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(t)
            probe = torch.tensor([time.perf_counter() - start],
                                 dtype=torch.float64)
            dist.all_reduce(probe, op=dist.ReduceOp.MAX)
            iters = max(1, min(1000, int(0.02 / max(probe.item(), 1e-6))))
        reps = []
        for _ in range(a.reps):
            dist.barrier()
            start = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(t)
            reps.append((time.perf_counter() - start) / iters)
        rows.append({"bytes": nbytes, "us": 1e6 * statistics.median(reps)})
    ddp = ddp_steps(torch, dist, a) if a.ddp else None
    if rank == 0:
        print(json.dumps({"backend": a.backend, "world": world, "rows": rows,
                          "ddp": ddp}), flush=True)
    dist.destroy_process_group()


def ddp_steps(torch, dist, a, steps=30, warmup=5):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(128, 1024), torch.nn.ReLU(),
        torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
        torch.nn.Linear(1024, 32))
    params = sum(p.numel() for p in model.parameters())
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    x, y = torch.randn(64, 128), torch.randn(64, 32)

    def step():
        opt.zero_grad()
        torch.nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()

    def timed(no_sync):
        times = []
        for i in range(warmup + steps):
            dist.barrier()
            start = time.perf_counter()
            if no_sync:
                with ddp.no_sync():
                    step()
            else:
                step()
            if i >= warmup:
                times.append(time.perf_counter() - start)
        return 1e3 * statistics.median(times)

    with_comm = timed(False)
    compute = timed(True)
    return {"params": params, "step_ms": with_comm, "compute_ms": compute,
            "comm_share": max(0.0, 1 - compute / with_comm)}


# ---- the driver -------------------------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_backend(backend, a):
    """Starts --nproc ranks torchrun-style; rank 0's JSON, or None."""
    port = free_port()
    procs = []
    for rank in range(a.nproc):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank),
                   WORLD_SIZE=str(a.nproc), LOCAL_WORLD_SIZE=str(a.nproc),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   OMP_NUM_THREADS="1")
        cmd = [sys.executable, "-m", MODULE, "--rank-of", backend,
               "--minbytes", str(a.minbytes), "--maxbytes", str(a.maxbytes),
               "--iters", str(a.iters), "--reps", str(a.reps)]
        if not a.ddp:
            cmd.append("--no-ddp")
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    result, errors = None, []
    for p in procs:
        out, err = p.communicate()
        if p.returncode != 0:
            errors.append(err.strip().splitlines()[-1:] or ["(no output)"])
        for line in out.splitlines():
            if line.startswith("{"):
                result = json.loads(line)
    if errors:
        print(f"shoal bench torch: backend {backend} failed: {errors}",
              file=sys.stderr)
        return None
    return result


def run_native(a):
    """`shoal bench collective` at the same sizes: {bytes: us}."""
    cmd = [_paths.shoal_binary(), "bench", "collective",
           "-b", str(a.minbytes), "-e", str(a.maxbytes), "-f", "4",
           "--nproc", str(a.nproc), "--peers", "none", "--rounds", "1",
           "--reps", str(a.reps), "-c", "0", "--json"]
    if a.iters:
        cmd += ["-n", str(a.iters)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    rows = {}
    for line in out.stdout.splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            if row.get("system") == "shoal":
                rows[row["bytes"]] = row["ip_us"]  # in place, as torch's
    if not rows:
        print("shoal bench torch: `shoal bench collective` gave no rows: "
              + out.stderr.strip()[-500:], file=sys.stderr)
    return rows


def human(n):
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:g} {unit}"
    return f"{n} B"


def busbw(nbytes, us, world):
    return nbytes / (us * 1e-6) / 1e9 * 2 * (world - 1) / world


def report(results, native, world):
    shoal, gloo = results.get("shoal"), results.get("gloo")
    print(f"# dist.all_reduce, float32 sum, {world} ranks, in place; "
          "time in us (median), busbw in GB/s")
    head = (f"{'size':>10} {'shoal us':>10} {'busbw':>7} {'gloo us':>10} "
            f"{'busbw':>7} {'x gloo':>7} {'native us':>10} {'busbw':>7} "
            f"{'/native':>8}")
    print(head)
    rows = (shoal or gloo)["rows"]
    for i, r in enumerate(rows):
        n = r["bytes"]
        cells = [f"{human(n):>10}"]
        s_bw = g_bw = None
        for res in (shoal, gloo):
            if res is None:
                cells += [f"{'-':>10}", f"{'-':>7}"]
                continue
            us = res["rows"][i]["us"]
            bw = busbw(n, us, world)
            cells += [f"{us:10.1f}", f"{bw:7.2f}"]
            if res is shoal:
                s_bw = bw
            else:
                g_bw = bw
        cells.append(f"{s_bw / g_bw:7.2f}" if s_bw and g_bw else f"{'-':>7}")
        if n in native and s_bw:
            n_bw = busbw(n, native[n], world)
            cells += [f"{native[n]:10.1f}", f"{n_bw:7.2f}",
                      f"{s_bw / n_bw:8.2f}"]
        else:
            cells += [f"{'-':>10}", f"{'-':>7}", f"{'-':>8}"]
        print(" ".join(cells))
    ddps = {b: r["ddp"] for b, r in results.items() if r and r.get("ddp")}
    if ddps:
        some = next(iter(ddps.values()))
        print(f"\n# DDP step: MLP 128-1024-1024-32 ({some['params']} "
              f"parameters), batch 64 per rank, SGD; median of 30 steps")
        print(f"{'backend':>8} {'step ms':>9} {'no_sync ms':>11} "
              f"{'comm share':>11}")
        for b, d in ddps.items():
            print(f"{b:>8} {d['step_ms']:9.2f} {d['compute_ms']:11.2f} "
                  f"{100 * d['comm_share']:10.1f}%")


def main(argv=None):
    p = argparse.ArgumentParser(prog="shoal bench torch",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--minbytes", "-b", type=parse_size, default=4 << 10)
    p.add_argument("--maxbytes", "-e", type=parse_size, default=64 << 20)
    p.add_argument("--iters", "-n", type=int, default=0,
                   help="calls per repetition (0: ~20 ms worth)")
    p.add_argument("--reps", type=int, default=7,
                   help="repetitions; the time is their median")
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--no-ddp", dest="ddp", action="store_false",
                   help="skip the DDP step")
    p.add_argument("--no-native", dest="native", action="store_false",
                   help="skip `shoal bench collective`")
    p.add_argument("--json", action="store_true", help="raw JSON results")
    p.add_argument("--rank-of", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.rank_of:
        a.backend = a.rank_of
        rank_main(a)
        return 0
    try:
        import torch.distributed as dist
    except ImportError:
        print("shoal bench torch: torch is not importable by "
              f"{sys.executable}", file=sys.stderr)
        return 1
    results = {}
    for backend in ("shoal", "gloo"):
        if backend == "gloo" and not dist.is_gloo_available():
            print("shoal bench torch: this torch has no gloo: skipped",
                  file=sys.stderr)
            continue
        results[backend] = run_backend(backend, a)
    native = run_native(a) if a.native else {}
    if a.json:
        print(json.dumps({"torch": results, "native_ip_us": native}))
        return 0
    if not any(results.values()):
        return 1
    report(results, native, a.nproc)
    return 0 if all(results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
