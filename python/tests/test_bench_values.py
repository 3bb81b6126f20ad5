"""The values benchmark's sync phase (shoal/values.py): a system's
workloads interleaved in blocks, against a real node."""

from shoal_bench import tasks, values


class _Recording(values._Shoal):
    """The benchmark's shoal system, noting which function each submit ran."""

    def __init__(self, client):
        super().__init__(client)
        self.calls = []

    def submit(self, fn, *args):
        self.calls.append(fn)
        return super().submit(fn, *args)


def test_sync_interleaved_alternates_blocks_and_counts_each(client):
    system = _Recording(client)
    cases = [(w, *values._workload_fn(system, w))
             for w in ("noop", "dict", "closure")]
    out = values._sync_interleaved(system, cases, n_sync=12, blocks=4)
    assert set(out) == {"noop", "dict", "closure"}
    for w, (lat, failed) in out.items():
        assert len(lat) == 12 // 4 * 4, w
        assert failed == 0, w
        assert all(t > 0 for t in lat), w
    fns = [fn for _, fn, _ in cases]
    # Blocks of 3 calls of one function, the order reversed every other block.
    expect = []
    for b in range(4):
        for fn in (fns if b % 2 == 0 else fns[::-1]):
            expect += [fn] * 3
    assert system.calls == expect
    assert fns[0] is tasks.noop and fns[1] is tasks.take_dict


def test_run_reports_every_workload_with_interleaved_sync(client):
    rows = values.run([values._Shoal(client)], n_async=20,
                             n_sync=20, rounds=1, array_reps=1, blocks=2)
    cases = {r["case"]: r for r in rows if r["system"] == "shoal"}
    for w in ("noop", "dict", "closure"):
        assert cases[w]["failed"] == 0
        assert cases[w]["p50_us"] > 0 and cases[w]["tasks_per_s"] > 0
    assert cases["arrays"]["median_ms"] > 0
