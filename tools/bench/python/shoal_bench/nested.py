"""The nested section of `shoal bench python`: nested tasks, a
parent task that submits N children and gets them (children/s, from the
parent's submit to its result), and a recursion D deep, each level waiting
for the next (ms), beside Ray doing the same in the same run when Ray is
there (shoal_bench.values.load_ray). Waits inside a shoal task run queued
tasks inline (docs/actors.md, "Nested tasks"); Ray starts workers for
blocked ones."""

import statistics
import time

SHOAL = "shoal"


def child(i):
    return i


def parent(n):
    import shoal
    futures = [shoal.submit(child, i) for i in range(n)]
    return sum(f.result() for f in futures)


def recurse(depth):
    if depth == 0:
        return 0
    import shoal
    return 1 + shoal.submit(recurse, depth - 1).result()


# Ray's remote functions, made where they are used (the driver and each Ray
# worker import this module by name and wrap the plain functions once).
_RAY_FUNCTIONS: dict = {}


def _ray_functions():
    if not _RAY_FUNCTIONS:
        import ray
        _RAY_FUNCTIONS.update(child=ray.remote(child),
                              parent=ray.remote(_ray_parent),
                              recurse=ray.remote(_ray_recurse))
    return _RAY_FUNCTIONS


def _ray_parent(n):
    import ray
    c = _ray_functions()["child"]
    return sum(ray.get([c.remote(i) for i in range(n)]))


def _ray_recurse(depth):
    if depth == 0:
        return 0
    import ray
    return 1 + ray.get(_ray_functions()["recurse"].remote(depth - 1))


class _Shoal:
    name = SHOAL

    def __init__(self, client):
        self.client = client

    def fan_out(self, n):
        return self.client.submit(parent, n).result()

    def recursion(self, depth):
        return self.client.submit(recurse, depth).result()


class _Ray:
    def __init__(self, ray_system):
        self.ray = ray_system.ray
        self.name = ray_system.name

    def fan_out(self, n):
        return self.ray.get(_ray_functions()["parent"].remote(n))

    def recursion(self, depth):
        return self.ray.get(_ray_functions()["recurse"].remote(depth))


def _timed(fn, arg, want):
    t0 = time.perf_counter()
    got = fn(arg)
    elapsed = time.perf_counter() - t0
    if got != want:
        raise RuntimeError(f"wrong answer {got}, expected {want}")
    return elapsed


def run(client, ray_system, children, depth, rounds):
    """Rows, one per system: children/s of one parent fanning out to
    `children` tasks, and ms of a `depth`-deep recursion; medians of
    `rounds` rounds alternating the systems. `ray_system`: the Ray peer of
    values (or None: Ray skipped)."""
    systems = [_Shoal(client)]
    if ray_system is not None:
        systems.append(_Ray(ray_system))
    fan_want, per = sum(range(children)), {}
    for s in systems:  # warm-up: functions imported, workers started
        _timed(s.fan_out, children, fan_want)
        _timed(s.recursion, depth, depth)
    for r in range(rounds):
        for s in systems if r % 2 == 0 else systems[::-1]:
            row = per.setdefault(s.name, {"cps": [], "ms": []})
            row["cps"].append(children / _timed(s.fan_out, children, fan_want))
            row["ms"].append(_timed(s.recursion, depth, depth) * 1e3)
    return [{"workload": "python-nested", "system": name,
             "children_per_s": statistics.median(p["cps"]),
             "recursion_ms": statistics.median(p["ms"]),
             "per_round_children_per_s": p["cps"],
             "per_round_recursion_ms": p["ms"],
             "children": children, "depth": depth, "rounds": rounds}
            for name, p in per.items()]


def print_tables(rows, workers):
    if not rows:
        return
    r0 = rows[0]
    print(f"\n# nested tasks: {workers} workers; one parent task submits "
          f"{r0['children']} children and gets them (children/s); a "
          f"recursion {r0['depth']} deep, each level waiting for the next "
          f"(ms); medians of {r0['rounds']} rounds")
    print(f"{'system':34} {'children/s':>11} {'recursion ms':>13}")
    for r in rows:
        print(f"{r['system']:34} {r['children_per_s']:>11.0f} "
              f"{r['recursion_ms']:>13.2f}")
    mine = next((r for r in rows if r["system"] == SHOAL), None)
    ray = next((r for r in rows if r["system"] != SHOAL), None)
    if mine and ray:
        print(f"shoal / Ray: fan-out {mine['children_per_s'] / ray['children_per_s']:.1f}x "
              f"children/s, recursion {ray['recursion_ms'] / mine['recursion_ms']:.1f}x "
              "faster")
    elif mine:
        print("Ray absent: no ratio")
