"""`shoal bench dataloader`: shoal.data.DataLoader beside
torch.utils.data.DataLoader with num_workers=2 and persistent_workers=True,
and with its defaults (num_workers=0).

Workloads (docs/BENCHMARKS.md, "DataLoader"):
  tokens  a 2 GiB int64 array (--tokens-gib), batches of 32 random windows of
          2,048 tokens: batches/s and the time from making the loader to its
          first batch;
  images  50,000 uint8 3x64x64 arrays in a Python list (--images), a
          per-item augmentation in Python (random crop to 56x56, flip,
          normalise to float32), batch 128: batches/s over one epoch and the
          peak of the RSS (and PSS) summed over every process of the loader;
  kill    one worker SIGKILLed mid-epoch: whether the epoch finishes.
Each loader runs in a process of its own (torch's workers fork, and a fork of
a process holding a shoal client's threads is unsafe), sampled for memory
from the outside every 50 ms.
"""

import argparse
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


class _Sampler:
    """Peak summed RSS and PSS of a process tree, sampled every 50 ms."""

    def __init__(self, pid):
        self.pid = pid
        self.peak_rss = 0
        self.peak_pss = 0
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

    def done(self):
        self.stop.set()
        self.thread.join()
        return self.peak_rss * 1024, self.peak_pss * 1024


# ---- one loader, in a process of its own ------------------------------------

def _run_tokens(kind, args):
    n = int(args.tokens_gib * (1 << 30)) // 8
    tokens = np.arange(n, dtype=np.int64)
    batches = args.tokens_batches
    ds = TokenWindows(tokens, (batches + 1) * TOKENS_BATCH)
    t0 = time.perf_counter()
    loader = _make_loader(kind, ds, TOKENS_BATCH)
    it = iter(loader)
    first = next(it)
    t1 = time.perf_counter()
    assert tuple(first.shape) == (TOKENS_BATCH, WINDOW)
    got = 0
    for b in it:
        got += 1
    t2 = time.perf_counter()
    return {"first_batch_s": t1 - t0, "batches": got,
            "batches_per_s": got / (t2 - t1)}


def _run_images(kind, args):
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (3, 64, 64), dtype=np.uint8)
              for _ in range(args.images)]
    ds = Images(images)
    sampler = _Sampler(os.getpid())
    loader = _make_loader(kind, ds, IMAGES_BATCH)
    t0 = time.perf_counter()
    it = iter(loader)
    next(it)
    t1 = time.perf_counter()
    got = 0
    for b in it:
        got += 1
    t2 = time.perf_counter()
    rss, pss = sampler.done()
    return {"batches": got, "batches_per_s": got / (t2 - t1),
            "epoch_s": t2 - t0, "peak_rss_bytes": rss, "peak_pss_bytes": pss}


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
    import torch  # noqa: F401 (imported before any clock starts)
    fn = {"tokens": _run_tokens, "images": _run_images,
          "kill": _run_kill}[args.run]
    out = fn(args.loader, args)
    print("RESULT " + json.dumps(out), flush=True)


# ---- the harness --------------------------------------------------------------

def _spawn(workload, kind, args):
    cmd = [sys.executable, "-m", "shoal._bench_dataloader", "--run",
           workload, "--loader", kind, "--tokens-gib", str(args.tokens_gib),
           "--tokens-batches", str(args.tokens_batches),
           "--images", str(args.images)]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=args.timeout)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    return {"error": f"exit {p.returncode}: "
                     f"{(p.stderr.strip().splitlines() or [''])[-1]}"}


def _fmt(v, unit=""):
    return "-" if v is None else f"{v:.3g}{unit}"


def main(argv=None):
    p = argparse.ArgumentParser(prog="shoal bench dataloader")
    p.add_argument("--workloads", default="tokens,images,kill")
    p.add_argument("--loaders", default=",".join(LOADERS))
    p.add_argument("--tokens-gib", type=float, default=2.0,
                   help="size of the token array (default 2 GiB)")
    p.add_argument("--tokens-batches", type=int, default=400)
    p.add_argument("--images", type=int, default=50000)
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
    results = {}
    for workload in args.workloads.split(","):
        for kind in loaders:
            if workload == "kill" and kind == "torch-defaults":
                continue  # no worker to kill
            r = _spawn(workload, kind, args)
            results[f"{workload}/{kind}"] = r
            print(f"{workload:7s} {kind:20s} {json.dumps(r)}", flush=True)
    print()
    print("workload  loader               batches/s  first batch  "
          "peak RSS sum  peak PSS sum  finished")
    for key, r in results.items():
        workload, kind = key.split("/")
        rss = r.get("peak_rss_bytes")
        pss = r.get("peak_pss_bytes")
        fin = r.get("finished")
        print(f"{workload:9s} {kind:20s} {_fmt(r.get('batches_per_s')):>9s}  "
              f"{_fmt(r.get('first_batch_s'), ' s'):>11s}  "
              f"{_fmt(rss and rss / 2**20, ' MiB'):>12s}  "
              f"{_fmt(pss and pss / 2**20, ' MiB'):>12s}  "
              f"{'' if fin is None else ('yes' if fin else 'no: ' + r.get('error', ''))}"
              f"{r.get('error', '') if 'finished' not in r else ''}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
