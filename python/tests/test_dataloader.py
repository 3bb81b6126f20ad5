"""shoal.data.DataLoader against real nodes: the same batches as
torch.utils.data.DataLoader for the same seed and settings, a worker's
exception with its traceback, a killed worker, pin_memory, DistributedSampler
under `shoal launch`, and a store that does not grow over epochs.

The dataset classes are module-level so workers import them by name."""

import os
import signal
import subprocess
import sys
import tempfile
import textwrap

import numpy as np
import pytest

import shoal
from shoal.data import DataLoader, get_worker_info

torch = pytest.importorskip("torch")
tud = torch.utils.data


class Squares(tud.Dataset):
    """Map-style: (features, label, name) per item."""

    def __init__(self, n):
        self.x = np.arange(n * 6, dtype=np.float32).reshape(n, 6)
        self.y = np.arange(n, dtype=np.int64) ** 2

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return {"x": self.x[i], "y": int(self.y[i]), "name": f"item{i}"}


class Noisy(tud.Dataset):
    """Uses torch's RNG in __getitem__: equal only if workers are seeded as
    torch seeds them."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.rand(3) + i


class Shards(tud.IterableDataset):
    """Iterable: each worker yields its own share via get_worker_info
    (torch's, as datasets written for torch do)."""

    def __init__(self, start, end):
        self.start, self.end = start, end

    def __iter__(self):
        info = tud.get_worker_info()
        if info is None:
            lo, hi = self.start, self.end
        else:
            per = -(-(self.end - self.start) // info.num_workers)
            lo = self.start + info.id * per
            hi = min(lo + per, self.end)
        return iter(np.arange(lo, hi, dtype=np.int64) * 10)


class Failing(tud.Dataset):
    def __len__(self):
        return 20

    def __getitem__(self, i):
        if i == 13:
            raise ValueError(f"bad item {i}")
        return i


class KillsItsWorkerOnce(tud.Dataset):
    """Item 21's first read SIGKILLs the worker (a marker file says it
    happened), as a crash or the OOM killer would."""

    def __init__(self, n, marker):
        self.n, self.marker = n, marker

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i == 21 and not os.path.exists(self.marker):
            with open(self.marker, "w") as f:
                f.write(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)
        return np.full(4, i, dtype=np.int64)


class Big(tud.Dataset):
    """256 KiB items: batches are store objects."""

    def __init__(self, n):
        self.data = np.arange(n * 32768, dtype=np.int64).reshape(n, 32768)

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        return self.data[i]


def pairs_sum(batch):
    """A custom collate: (sum of x, list of names)."""
    return (sum(float(b["x"].sum()) for b in batch),
            [b["name"] for b in batch])


def _same(a, b):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor), (a, b)
        assert a.dtype == b.dtype and torch.equal(a, b), (a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), (a, b)
        for x, y in zip(a, b):
            _same(x, y)
    else:
        assert a == b, (a, b)


def _epochs(loader, n):
    return [list(loader) for _ in range(n)]


# The cases compared with torch's DataLoader: name → (dataset, keyword
# arguments, epochs). A seed becomes a fresh torch.Generator per loader.
def _cases(tmp):
    squares = Squares(50)
    return {
        "shuffled_persistent": (squares, dict(
            batch_size=4, shuffle=True, num_workers=2, seed=7,
            persistent_workers=True), 2),
        "not_persistent_drop_last": (Squares(30), dict(
            batch_size=4, shuffle=True, num_workers=2, seed=3,
            drop_last=True, prefetch_factor=3), 2),
        "worker_seeds": (Noisy(12), dict(batch_size=3, num_workers=2,
                                         seed=11), 1),
        "warm_handover": (Noisy(40), dict(batch_size=2, num_workers=2,
                                          seed=13, persistent_workers=True),
                          2),
        "custom_collate": (Squares(20), dict(
            batch_sampler=[[3, 1], [7, 8, 9], [0], [19, 2]],
            collate_fn=pairs_sum, num_workers=2), 1),
        "no_auto_batching": (Squares(20), dict(batch_size=None,
                                               num_workers=2), 1),
        "iterable": (Shards(0, 23), dict(batch_size=4, num_workers=3), 1),
        "iterable_drop_last": (Shards(0, 23), dict(
            batch_size=4, drop_last=True, num_workers=3), 1),
        "iterable_unbatched": (Shards(0, 23), dict(batch_size=None,
                                                   num_workers=3), 1),
        "pin_memory": (Squares(16), dict(batch_size=4, num_workers=2,
                                         pin_memory=True), 1),
        "killed": (KillsItsWorkerOnce(40, os.path.join(tmp, "unused")),
                   dict(batch_size=4, shuffle=True, seed=5), 1),
        "single_process": (Squares(10), dict(batch_size=3, shuffle=True,
                                             seed=1), 1),
        "single_process_iterable": (Shards(0, 7), dict(batch_size=2), 1),
    }


def _make(cls, dataset, kw):
    kw = dict(kw)
    seed = kw.pop("seed", None)
    if seed is not None:
        kw["generator"] = torch.Generator().manual_seed(seed)
    return cls(dataset, **kw)


def _write_references(tmp, path):
    """torch's batches of every case (run in a process of its own: torch's
    workers fork, and a fork of a process with a shoal client's threads
    may hang on a lock one of them held)."""
    open(os.path.join(tmp, "unused"), "w").close()  # no kill here
    out = {name: _epochs(_make(tud.DataLoader, ds, kw), n)
           for name, (ds, kw, n) in _cases(tmp).items()}
    torch.save(out, path)


@pytest.fixture(scope="module")
def torch_batches():
    tmp = tempfile.mkdtemp(prefix="shoal-dataloader-")  # private, 0700
    path = os.path.join(tmp, "ref.pt")
    here = os.path.dirname(os.path.abspath(__file__))
    subprocess.run(
        [sys.executable, "-c",
         f"import sys; sys.path.insert(0, {here!r}); import test_dataloader "
         f"as t; t._write_references({tmp!r}, {path!r})"],
        check=True, timeout=300, env=dict(os.environ, PYTHONPATH=os.pathsep
                                          .join(sys.path)))
    return torch.load(path)


def _compare(torch_batches, name, tmp="/nonexistent"):
    """Our batches of case `name` equal torch's, with the workers making
    every batch and with a warm start (the consumer making the first ones
    while the workers start)."""
    ds, kw, n = _cases(tmp)[name]
    for warm in (False, True):
        ours = _epochs(_make(DataLoader, ds, dict(kw, warm_start=warm)), n)
        _same(ours, torch_batches[name])
    return ours


def test_map_style_shuffled_same_as_torch(client, torch_batches):
    out = _compare(torch_batches, "shuffled_persistent")
    assert len(out[0]) == 13 and out[0][0]["name"] != out[1][0]["name"]


def test_map_style_not_persistent_and_drop_last(client, torch_batches):
    _compare(torch_batches, "not_persistent_drop_last")


def test_worker_seeds_as_torch(client, torch_batches):
    _compare(torch_batches, "worker_seeds")


def test_warm_start_hands_over_with_the_workers_rng(client, torch_batches):
    """The consumer makes batch 0 (worker 0's first); once the workers are
    up, worker 0 goes on from the RNG state the consumer left, worker 1
    from its seed: torch's values throughout, in both epochs."""
    ds, kw, _ = _cases("/nonexistent")["warm_handover"]
    loader = _make(DataLoader, ds, kw)
    it = iter(loader)
    first = next(it)
    pids = loader.worker_pids()  # waits until they take calls
    assert os.getpid() not in pids
    out = [[first] + list(it), list(loader)]
    _same(out, torch_batches["warm_handover"])
    loader.close()


def test_custom_collate_and_batch_sampler(client, torch_batches):
    _compare(torch_batches, "custom_collate")
    _compare(torch_batches, "no_auto_batching")


def test_iterable_with_worker_info_sharding(client, torch_batches):
    for name in ("iterable", "iterable_drop_last", "iterable_unbatched"):
        _compare(torch_batches, name)


@pytest.mark.parametrize("warm", [False, True])
def test_worker_exception_reaches_consumer_with_traceback(client, warm):
    loader = DataLoader(Failing(), batch_size=5, num_workers=2,
                        warm_start=warm)
    it = iter(loader)
    next(it), next(it)
    with pytest.raises(ValueError) as e:
        next(it)
    text = str(e.value)
    assert "Caught ValueError in DataLoader worker process 0" in text
    assert "bad item 13" in text and "__getitem__" in text
    assert "Traceback" in text


def test_killed_worker_batch_recomputed(client, torch_batches, tmp_path):
    marker = str(tmp_path / "killed")
    ds = KillsItsWorkerOnce(40, marker)
    loader = DataLoader(ds, batch_size=4, shuffle=True, num_workers=2,
                        generator=torch.Generator().manual_seed(5),
                        persistent_workers=True, warm_start=False)
    out = list(loader)
    with open(marker) as f:
        killed = int(f.read())
    assert killed not in loader.worker_pids()  # its worker was replaced
    assert len(loader.worker_pids()) == 2
    _same(out, torch_batches["killed"][0])
    loader.close()


def test_pin_memory(client, torch_batches):
    out = _compare(torch_batches, "pin_memory")
    if torch.cuda.is_available():
        assert out[0][0]["x"].is_pinned()


def _in_store(address):
    with open("/proc/self/maps") as f:
        for line in f:
            fields = line.split()
            lo, hi = (int(v, 16) for v in fields[0].split("-"))
            if lo <= address < hi:
                return len(fields) > 5 and "/dev/shm/shoal-" in fields[5]
    return False


def test_batches_view_the_store_and_no_store_growth(client):
    ds = Big(32)
    loader = DataLoader(ds, batch_size=4, shuffle=True, num_workers=2,
                        persistent_workers=True)
    first = next(iter(loader))
    loader.worker_pids()  # the dataset and workers are in place now
    del first
    used = []
    for _ in range(3):
        for batch in loader:
            assert batch.shape == (4, 32768)
            # A 1 MiB batch is a store object viewed in place.
            assert _in_store(batch.data_ptr())
        used.append(client.status()["store_used_bytes"])
    assert used[2] <= used[0] + (1 << 20), used
    loader.close()


def test_num_workers_zero_is_torch(client, torch_batches):
    _compare(torch_batches, "single_process")
    _compare(torch_batches, "single_process_iterable")


LAUNCHED = textwrap.dedent("""
    import json, sys
    import numpy as np
    import shoal
    from shoal.data import DataLoader, DistributedSampler
    job = shoal.init()
    data = np.arange(23 * 3, dtype=np.float64).reshape(23, 3)
    sampler = DistributedSampler(data, shuffle=True, seed=4)
    loader = DataLoader(data, batch_size=4, sampler=sampler, num_workers=1,
                        persistent_workers=True)
    out = []
    for epoch in range(2):
        sampler.set_epoch(epoch)
        out.append([b[:, 0].div(3).long().tolist() for b in loader])
    # The ranks of a machine read one copy of the dataset in one store.
    ids = sorted(r.id for r in loader._placed().shared.refs())
    with open(sys.argv[1] + f".{job.rank}", "w") as f:
        json.dump({"batches": out, "ids": ids}, f)
    loader.close()
    shoal.barrier()
""")


def test_ddp_shards_under_launch(tmp_path):
    import json
    script = tmp_path / "ddp.py"
    script.write_text(LAUNCHED)
    out = str(tmp_path / "out")
    subprocess.run([os.environ.get("SHOAL_BIN") or shoal._paths.shoal_binary(),
                    "launch", "--nproc-per-node", "2", "--",
                    sys.executable, str(script), out],
                   check=True, timeout=180)
    ranks = []
    for r in range(2):
        with open(f"{out}.{r}") as f:
            ranks.append(json.load(f))
    assert ranks[0]["ids"] and ranks[0]["ids"] == ranks[1]["ids"]
    ranks = [r["batches"] for r in ranks]
    for epoch in range(2):
        want = [list(tud.DistributedSampler(range(23), num_replicas=2,
                                            rank=r, shuffle=True, seed=4)
                     .__class__.__iter__(_at(r, epoch)))
                for r in range(2)]
        for r in range(2):
            got = [i for b in ranks[r][epoch] for i in b]
            assert got == want[r], (epoch, r, got, want[r])
    assert ranks[0][0] != ranks[0][1]  # set_epoch reshuffles


def _at(rank, epoch):
    s = tud.DistributedSampler(range(23), num_replicas=2, rank=rank,
                               shuffle=True, seed=4)
    s.set_epoch(epoch)
    return s
