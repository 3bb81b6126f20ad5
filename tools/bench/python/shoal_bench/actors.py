"""The actors section of `shoal bench python`: method
calls on one actor — sync p50 (call + result, one at a time) and async
calls/s (submit N, then wait for all) — beside Ray actor calls in the same
run when Ray is there (shoal_bench.values.load_ray)."""

import statistics
import time

SHOAL = "shoal"


class Pinger:
    """The benchmark's actor: a counter (state kept between calls)."""

    def __init__(self):
        self.n = 0

    def ping(self):
        self.n += 1
        return self.n


def _percentile(values, q):
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


class _ShoalActor:
    def __init__(self):
        import shoal
        self.name = SHOAL
        self.actor = shoal.remote(Pinger).remote()
        self.kill = lambda: shoal.kill(self.actor)

    def call(self):
        return self.actor.ping.remote()

    def result(self, f):
        return f.result()

    def all(self, fs):
        for f in fs:
            f.result()


class _RayActor:
    def __init__(self, ray_system):
        self.ray = ray_system.ray
        self.name = ray_system.name
        self.actor = self.ray.remote(Pinger).remote()
        self.kill = lambda: self.ray.kill(self.actor)

    def call(self):
        return self.actor.ping.remote()

    def result(self, ref):
        return self.ray.get(ref)

    def all(self, refs):
        self.ray.get(refs)


def _sync_round(system, n):
    lat = []
    for _ in range(n):
        t0 = time.perf_counter()
        system.result(system.call())
        lat.append(time.perf_counter() - t0)
    return lat


def _async_round(system, n):
    t0 = time.perf_counter()
    system.all([system.call() for _ in range(n)])
    return n / (time.perf_counter() - t0)


def run(ray_system, n_async, n_sync, rounds):
    """Rows, one per system: calls/s (async) and p50/p99 µs (sync), medians
    of `rounds` rounds alternating the systems. `ray_system`: the Ray peer of
    values (or None: Ray skipped)."""
    systems = [_ShoalActor()]
    if ray_system is not None:
        systems.append(_RayActor(ray_system))
    per = {}
    try:
        for s in systems:  # warm-up: the actor up, its class imported
            _sync_round(s, 100)
        for r in range(rounds):
            for s in systems if r % 2 == 0 else systems[::-1]:
                row = per.setdefault(s.name, {"cps": [], "p50": [], "p99": []})
                row["cps"].append(_async_round(s, n_async))
                lat = _sync_round(s, n_sync)
                row["p50"].append(_percentile(lat, 0.5) * 1e6)
                row["p99"].append(_percentile(lat, 0.99) * 1e6)
    finally:
        for s in systems:
            s.kill()
    return [{"workload": "python-actors", "system": name,
             "calls_per_s": statistics.median(p["cps"]),
             "p50_us": statistics.median(p["p50"]),
             "p99_us": statistics.median(p["p99"]),
             "per_round_calls_per_s": p["cps"], "per_round_p50_us": p["p50"],
             "async_calls": n_async, "sync_calls": n_sync, "rounds": rounds}
            for name, p in per.items()]


def targets(rows):
    """(text, met) for each goal of the actors section."""
    mine = next((r for r in rows if r["system"] == SHOAL), None)
    ray = next((r for r in rows if r["system"].startswith("Ray")), None)
    out = []
    if mine:
        out.append((f"(d) actor sync p50 {mine['p50_us']:.1f} us (goal <= "
                    "20 us)", mine["p50_us"] <= 20))
    if mine and ray:
        ratio = mine["calls_per_s"] / ray["calls_per_s"]
        out.append((f"(d) actor async calls/s {ratio:.1f}x Ray's (goal >= "
                    "20x)", ratio >= 20))
    elif mine:
        out.append(("(d) actor calls/s: Ray absent, no ratio", False))
    return out


def print_tables(rows):
    if not rows:
        return
    r0 = rows[0]
    print(f"\n# actor method calls: 1 client, 1 actor; async "
          f"{r0['async_calls']} calls, sync {r0['sync_calls']}; medians of "
          f"{r0['rounds']} rounds")
    print(f"{'system':34} {'calls/s':>9} {'p50 us':>9} {'p99 us':>9}")
    for r in rows:
        print(f"{r['system']:34} {r['calls_per_s']:>9.0f} "
              f"{r['p50_us']:>9.1f} {r['p99_us']:>9.1f}")
    print("\n# targets (actors)")
    for text, met in targets(rows):
        print(f"{text} ({'met' if met else 'NOT met'})")
