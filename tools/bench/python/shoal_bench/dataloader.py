"""`shoal bench dataloader`: shoal.data.DataLoader beside
torch.utils.data.DataLoader with num_workers=2 and persistent_workers=True,
and with its defaults (num_workers=0).

Workloads (docs/BENCHMARKS.md, "DataLoader"):
  tokens  a 2 GiB int64 array (--tokens-gib), batches of 32 random windows of
          2,048 tokens: the time from making the loader to its first batch,
          batches/s over the first epoch, and batches/s over a second epoch
          (steady: shoal's loader first waits until its workers are up);
  images  50,000 uint8 3x64x64 arrays in a Python list (--images), a
          per-item augmentation in Python (random crop to 56x56, flip,
          normalise to float32), batch 128: the same times, and the peaks
          over both epochs of the RSS and PSS summed over every process of
          the loader, and of the loader's store segment's resident bytes
          (pages no process maps are in no RSS);
  kill    one worker SIGKILLed mid-epoch: whether the epoch finishes.
Each loader runs in a process of its own (torch's workers fork, and a fork of
a process holding a shoal client's threads is unsafe), sampled for memory
from this process every 50 ms. --repeat N runs every pair N times,
interleaved; the table and --json give each figure's median (and --json
every run's).
"""

import argparse
import glob
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

import numpy as np

WINDOW = 2048
TOKENS_BATCH = 32
IMAGES_BATCH = 128
LOADERS = ("shoal", "torch-2-persistent", "torch-defaults")


class TokenWindows:
    """Map-style: item i is a window of WINDOW tokens at a pseudo-random
    start (the same for every loader)."""

    def __init__(self, tokens, items):
        self.tokens = tokens
        self.items = items

    def __len__(self):
        return self.items

    def __getitem__(self, i):
        start = (i * 2654435761 + 12345) % (len(self.tokens) - WINDOW)
        return self.tokens[start:start + WINDOW]


class Images:
    """Map-style over a Python list of uint8 CHW arrays, augmented per item
    in Python: a random 56x56 crop, a random horizontal flip, float32
    normalised."""

    def __init__(self, images):
        self.images = images

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        img = self.images[i]
        y = random.randint(0, 8)
        x = random.randint(0, 8)
        out = img[:, y:y + 56, x:x + 56]
        if random.random() < 0.5:
            out = out[:, :, ::-1]
        out = out.astype(np.float32)
        out -= 127.5
        out *= 1 / 127.5
        return out, i % 10


class Slow:
    """For the kill workload: 2 ms per item."""

    def __len__(self):
        return 2000

    def __getitem__(self, i):
        time.sleep(0.002)
        return np.full(16, i, dtype=np.int64)


def _make_loader(kind, dataset, batch_size, shuffle=True):
    import torch
    g = torch.Generator().manual_seed(0)
    if kind == "shoal":
        from shoal.data import DataLoader
        return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle,
                          num_workers=2, persistent_workers=True,
                          generator=g)
    from torch.utils.data import DataLoader
    if kind == "torch-2-persistent":
        return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle,
                          num_workers=2, persistent_workers=True,
                          generator=g)
    return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle,
                      generator=g)


def _descendants(pid):
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, to_visit = [], [pid]
    while to_visit:
        p = to_visit.pop()
        out.append(p)
        to_visit.extend(children.get(p, []))
    return out


def _memory_kib(pid, field):
    try:
        path = (f"/proc/{pid}/smaps_rollup" if field == "Pss"
                else f"/proc/{pid}/status")
        with open(path) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _store_kib(pid):
    """Resident KiB of the stores of nodes the loader process `pid` started
    (shoal.start_node's job ids are py-<pid>-...)."""
    total = 0
    for path in glob.glob(f"/dev/shm/shoal-py-{pid}-*-store"):
        try:
            total += os.stat(path).st_blocks // 2
        except OSError:
            pass
    return total


class _Sampler:
    """Peak summed RSS and PSS of a process tree, and of its stores'
    resident bytes, sampled every 50 ms."""

    def __init__(self, pid):
        self.pid = pid
        self.peak_rss = 0
        self.peak_pss = 0
        self.peak_store = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop.wait(0.05):
            pids = _descendants(self.pid)
            self.peak_rss = max(self.peak_rss,
                                sum(_memory_kib(p, "VmRSS") for p in pids))
            self.peak_pss = max(self.peak_pss,
                                sum(_memory_kib(p, "Pss") for p in pids))
            self.peak_store = max(self.peak_store, _store_kib(self.pid))

    def done(self):
        self.stop.set()
        self.thread.join()
        return {"peak_rss_bytes": self.peak_rss * 1024,
                "peak_pss_bytes": self.peak_pss * 1024,
                "peak_store_bytes": self.peak_store * 1024}


# ---- one loader, in a process of its own ------------------------------------

def _epochs(kind, ds, batch_size, first_shape):
    """First batch, first epoch and a second (steady) epoch of a fresh
    loader; shoal's waits for its workers before the second."""
    t0 = time.perf_counter()
    loader = _make_loader(kind, ds, batch_size)
    it = iter(loader)
    first = next(it)
    t1 = time.perf_counter()
    if isinstance(first, (list, tuple)):
        first = first[0]
    assert tuple(first.shape) == first_shape, first.shape
    got = sum(1 for _ in it)
    t2 = time.perf_counter()
    out = {"first_batch_s": t1 - t0, "epoch1_batches_per_s": got / (t2 - t1)}
    if kind == "shoal":
        loader.worker_pids()
        out["workers_up_s"] = time.perf_counter() - t0
    t3 = time.perf_counter()
    got = sum(1 for _ in loader)
    t4 = time.perf_counter()
    out.update(batches=got, batches_per_s=got / (t4 - t3))
    if kind == "shoal":
        loader.close()
    return out


def _run_tokens(kind, args):
    n = int(args.tokens_gib * (1 << 30)) // 8
    tokens = np.arange(n, dtype=np.int64)
    ds = TokenWindows(tokens, args.tokens_batches * TOKENS_BATCH)
    return _epochs(kind, ds, TOKENS_BATCH, (TOKENS_BATCH, WINDOW))


def _run_images(kind, args):
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (3, 64, 64), dtype=np.uint8)
              for _ in range(args.images)]
    ds = Images(images)
    return _epochs(kind, ds, IMAGES_BATCH, (IMAGES_BATCH, 3, 56, 56))


def _run_kill(kind, args):
    loader = _make_loader(kind, Slow(), 20)
    it = iter(loader)
    got = 0
    try:
        for _ in it:
            got += 1
            if got == 20:
                if kind == "shoal":
                    pid = loader.worker_pids()[0]
                else:
                    pid = it._workers[0].pid
                os.kill(pid, signal.SIGKILL)
        return {"batches": got, "of": len(loader), "finished": True}
    except Exception as e:  # noqa: BLE001 (what torch raises)
        return {"batches": got, "of": len(loader), "finished": False,
                "error": f"{type(e).__name__}: {str(e).splitlines()[0]}"}


def _one(args):
    # Each loader's modules are imported before any clock starts.
    import torch  # noqa: F401
    if args.loader == "shoal":
        import shoal.data  # noqa: F401
        shoal.data.DataLoader  # noqa: B018 (its module loads on first use)
    fn = {"tokens": _run_tokens, "images": _run_images,
          "kill": _run_kill}[args.run]
    out = fn(args.loader, args)
    print("RESULT " + json.dumps(out), flush=True)


# ---- the harness --------------------------------------------------------------

def _spawn(workload, kind, args):
    cmd = [sys.executable, "-m", "shoal_bench.dataloader", "--run",
           workload, "--loader", kind, "--tokens-gib", str(args.tokens_gib),
           "--tokens-batches", str(args.tokens_batches),
           "--images", str(args.images)]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    sampler = _Sampler(p.pid) if workload == "images" else None
    try:
        out, err = p.communicate(timeout=args.timeout)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        memory = sampler.done() if sampler is not None else {}
    for line in out.splitlines():
        if line.startswith("RESULT "):
            return dict(json.loads(line[7:]), **memory)
    return {"error": f"exit {p.returncode}: "
                     f"{(err.strip().splitlines() or [''])[-1]}"}


def _fmt(v, unit=""):
    return "-" if v is None else f"{v:.3g}{unit}"


def _median(runs):
    """Per key, the median of the runs' numbers (the first run's other
    values; an error if any run failed)."""
    out = {}
    errors = [r["error"] for r in runs if "error" in r]
    if errors:
        return {"error": errors[0]}
    for key in runs[0]:
        values = [r[key] for r in runs if key in r]
        if all(isinstance(v, (int, float)) and not isinstance(v, bool)
               for v in values):
            values = sorted(values)
            mid = len(values) // 2
            out[key] = (values[mid] if len(values) % 2 else
                        (values[mid - 1] + values[mid]) / 2)
        else:
            out[key] = values[0]
    return out


def _table(results):
    mib = 2 ** 20
    print("workload  loader               first batch  epoch 1 b/s  "
          "steady b/s  peak RSS sum  peak PSS sum  store peak  finished")
    for key, r in results.items():
        workload, kind = key.split("/")
        r = r["median"]
        fin = r.get("finished")
        mem = [r.get(k) for k in ("peak_rss_bytes", "peak_pss_bytes",
                                  "peak_store_bytes")]
        print(f"{workload:9s} {kind:20s} "
              f"{_fmt(r.get('first_batch_s'), ' s'):>11s}  "
              f"{_fmt(r.get('epoch1_batches_per_s')):>11s}  "
              f"{_fmt(r.get('batches_per_s')):>10s}  "
              + "  ".join(f"{_fmt(m and m / mib, ' MiB'):>12s}"
                          for m in mem) + "  "
              f"{'' if fin is None else ('yes' if fin else 'no: ' + r.get('error', ''))}"
              f"{r.get('error', '') if 'finished' not in r else ''}")


def main(argv=None):
    p = argparse.ArgumentParser(prog="shoal bench dataloader")
    p.add_argument("--workloads", default="tokens,images,kill")
    p.add_argument("--loaders", default=",".join(LOADERS))
    p.add_argument("--tokens-gib", type=float, default=2.0,
                   help="size of the token array (default 2 GiB)")
    p.add_argument("--tokens-batches", type=int, default=400,
                   help="batches per tokens epoch (default 400)")
    p.add_argument("--images", type=int, default=50000)
    p.add_argument("--repeat", type=int, default=1,
                   help="runs of every workload and loader, interleaved; "
                        "figures are medians (default 1)")
    p.add_argument("--timeout", type=int, default=900)
    p.add_argument("--json", help="write the results here")
    p.add_argument("--run", help=argparse.SUPPRESS)
    p.add_argument("--loader", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.run:
        return _one(args)
    try:
        import torch  # noqa: F401
    except ImportError:
        print("torch is not importable: the peers are skipped")
        loaders = ["shoal"]
    else:
        loaders = args.loaders.split(",")
    runs = {}
    for rep in range(args.repeat):
        for workload in args.workloads.split(","):
            for kind in loaders:
                if workload == "kill" and kind == "torch-defaults":
                    continue  # no worker to kill
                r = _spawn(workload, kind, args)
                runs.setdefault(f"{workload}/{kind}", []).append(r)
                print(f"{rep}: {workload:7s} {kind:20s} {json.dumps(r)}",
                      flush=True)
    results = {key: {"median": _median(r), "runs": r}
               for key, r in runs.items()}
    print()
    _table(results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"settings": {k: getattr(args, k) for k in (
                "tokens_gib", "tokens_batches", "images", "repeat")},
                "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
