#!/usr/bin/env python3
"""Draws docs/BENCHMARKS.md's plots from the benches' --json output (gnuplot).

    tools/plot_benchmarks.py JSON_DIR IMAGE_DIR
    tools/plot_benchmarks.py docs/figures docs/images      # the page's plots

JSON_DIR is what tools/bench/figures.sh writes: one file per bench, each
holding that bench's --json output (one JSON object per line, or one
document). Each plot reads the files it needs and is skipped, with a line
saying so, when they are absent or empty (a bench that failed or did not
run):

  w1_store.svg      store.json: put GB/s, read GB/s after the get, and the
                    get's latency, by size; shoal beside memcpy and Python's
                    multiprocessing.shared_memory
  w2_tasks.svg      tasks.json (and python.json for the Python rows, Ray
                    where present): tasks/s and sync p50 per path
  w3_allreduce.svg  collective.json (one node) and collective_nodes.json
                    (two nodes, when present): all_reduce busbw by size,
                    shoal beside Open MPI and gloo
  torch.svg         torch.json: torch.distributed all_reduce busbw by size
                    (backend shoal, gloo, and shoal's own API), DDP step
  w5_train.svg      train.json: samples/s of each data-parallel config
  dataloader.svg    dataloader.json, drawn by tools/plot_dataloader.py

Only the standard library and the gnuplot binary are used.
"""

import json
import math
import os
import subprocess
import sys
import tempfile

TERMINAL = "svg size 1500,480 dynamic noenhanced font ',11'"
HERE = os.path.dirname(os.path.abspath(__file__))


# ---- reading ----------------------------------------------------------------

def load(folder, name):
    """The JSON of FOLDER/NAME: a list of row objects (one per line), or the
    one document the file holds; None when the file is absent or holds no
    JSON."""
    path = os.path.join(folder, name)
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None
    if not text.strip():
        return None
    try:
        return json.loads(text)
    except ValueError:
        pass
    rows = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return rows or None


def as_rows(doc):
    if doc is None:
        return []
    return doc if isinstance(doc, list) else [doc]


def find(rows, system=None, mode=None, prefix=None, **fields):
    """The first row whose system is SYSTEM (or starts with PREFIX), whose
    mode is MODE (when given) and whose other FIELDS match."""
    for r in rows:
        s = r.get("system", "")
        if system is not None and s != system:
            continue
        if prefix is not None and not s.startswith(prefix):
            continue
        if mode is not None and r.get("mode") != mode:
            continue
        if all(r.get(k) == v for k, v in fields.items()):
            return r
    return None


def num(row, key, scale=1.0):
    """ROW[KEY] × SCALE as gnuplot reads it; NaN where absent or not a
    positive measurement (the benches write -1 or 0 for "not measured")."""
    if row is None:
        return "NaN"
    v = row.get(key)
    if not isinstance(v, (int, float)) or v <= 0 or math.isnan(v):
        return "NaN"
    return f"{v * scale:.6g}"


def size_label(n):
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} B"


def size_range(sizes):
    """An x range a little wider than SIZES, so the end tics keep labels."""
    return f"[{min(sizes) / 1.4:.6g}:{max(sizes) * 1.4:.6g}]"


def size_tics(sizes):
    """gnuplot xtics for a log2 axis of byte sizes: every size present, every
    other one labelled when there are many."""
    sizes = sorted(set(sizes))
    step = 2 if len(sizes) > 10 else 1
    return ", ".join(f'"{size_label(s) if i % step == 0 else ""}" {s}'
                     for i, s in enumerate(sizes))


# ---- drawing ----------------------------------------------------------------

def gnuplot(script, files):
    """Runs SCRIPT with each FILES[name] written to a temporary file whose
    path replaces {name} in the script."""
    with tempfile.TemporaryDirectory() as tmp:
        paths = {}
        for name, text in files.items():
            paths[name] = os.path.join(tmp, name + ".dat")
            with open(paths[name], "w") as f:
                f.write(text)
        subprocess.run(["gnuplot"], input=script.format(**paths), text=True,
                       check=True)


def head(out, title, panels):
    return (f"set terminal {TERMINAL}\nset output '{out}'\n"
            f"set multiplot layout 1,{panels} title \"{title}\"\n"
            "set grid ytics\nset key below horizontal\n")


BARS = ("set style data histograms\n"
        "set style histogram clustered gap 1\n"
        "set style fill solid 0.8 border -1\n"
        "set boxwidth 0.9\nset xtics scale 0\n")


def quoted(label):
    return '"' + label.replace('"', "'") + '"'


# ---- W1 ---------------------------------------------------------------------

def plot_w1(folder, out):
    rows = [r for r in as_rows(load(folder, "store.json"))
            if r.get("workload") == "W1"]
    if not rows:
        return "no W1 rows in store.json"
    sizes = sorted({r["size_bytes"] for r in rows if "size_bytes" in r})
    lines = []
    for n in sizes:
        sh = find(rows, system="shoal", size_bytes=n)
        peer = find(rows, prefix="python-shared_memory", size_bytes=n)
        lines.append(" ".join([
            quoted(size_label(n)), num(sh, "put_gbps"), num(sh, "memcpy_gbps"),
            num(peer, "put_gbps"), num(sh, "read_gbps"),
            num(peer, "read_gbps"), num(sh, "get_us"), num(peer, "get_us")]))
    script = head(out, "W1 store: a float32 tensor put by one process, got "
                  "by another (shoal bench store; medians)", 3) + BARS + """
set yrange [0:*]
set title "put GB/s (create, copy in, seal)"
plot '{w1}' using 2:xtic(1) title 'shoal put', '' using 3 title 'memcpy (same run)', '' using 4 title 'shared_memory + numpy'
set title "read GB/s after the get (sum of every word)"
plot '{w1}' using 5:xtic(1) title 'shoal', '' using 6 title 'shared_memory + numpy'
set title "get: request to a usable view (us, log)"
set logscale y
set yrange [*:*]
plot '{w1}' using 7:xtic(1) title 'shoal get', '' using 8 title 'shared_memory attach + ndarray'
unset multiplot
"""
    gnuplot(script, {"w1": "\n".join(lines) + "\n"})


# ---- W2 ---------------------------------------------------------------------

def w2_paths(tasks, python):
    """(label, tasks/s row, tasks/s key, sync row) per path, in the plot's
    order; rows may be None."""
    paths = [
        ("shoal local (shm)",
         find(tasks, system="shoal local (shm)", mode="async"),
         find(tasks, system="shoal local (shm)", mode="sync")),
        ("shoal remote, pushed",
         find(tasks, system="shoal remote (ZeroMQ)",
              mode="async, SubmitAsync (pushed)"),
         find(tasks, system="shoal remote (ZeroMQ)",
              mode="sync, SubmitAsync+Await (pushed)")),
        ("shoal remote, Submit + Wait",
         find(tasks, system="shoal remote (ZeroMQ)", mode="async"),
         find(tasks, system="shoal remote (ZeroMQ)", mode="sync")),
        ("raw ZeroMQ CURVE echo (the wire)",
         find(tasks, system="raw ZeroMQ tcp+CURVE",
              mode="async, window 1000"),
         find(tasks, system="raw ZeroMQ tcp+CURVE", mode="sync round trip")),
        ("multiprocessing.Pool(2)",
         find(tasks, prefix="multiprocessing.Pool", mode="async (apply_async)"),
         find(tasks, prefix="multiprocessing.Pool", mode="sync (apply)")),
    ]
    py_tasks = [r for r in python if r.get("workload") == "python-tasks"]
    py_values = [r for r in python if r.get("workload") == "python-values"]
    shoal_py = ("shoal (Python client)",
                find(py_tasks, prefix="shoal", mode="async"),
                find(py_tasks, prefix="shoal", mode="sync"))
    if shoal_py[1] or shoal_py[2]:
        paths.append(shoal_py)
    ray = find(py_values, prefix="Ray", case="noop")
    if ray is not None:
        paths.append(("Ray (Python, no-op)", ray, ray))
    return [p for p in paths if p[1] or p[2]]


def plot_w2(folder, out):
    tasks = [r for r in as_rows(load(folder, "tasks.json"))
             if r.get("workload") == "W2"]
    if not tasks:
        return "no W2 rows in tasks.json"
    python = as_rows(load(folder, "python.json"))
    lines = [" ".join([quoted(label), num(a, "tasks_per_s"), num(s, "p50_us")])
             for label, a, s in w2_paths(tasks, python)]
    script = head(out, "W2 tasks: no-op tasks, 1 client, 2 workers "
                  "(shoal bench tasks; Python rows: shoal bench python)",
                  2) + BARS + """
set xtics rotate by -25
set logscale y
set key off
set title "async: tasks/s, one call per task (log)"
plot '{w2}' using 2:xtic(1) title 'tasks/s' lc rgb '#4477aa', \\
     '' using 0:2:(sprintf('%.0f', floor($2))) with labels offset 0,0.7 notitle
set title "sync: p50 of submit + result, us (log)"
plot '{w2}' using 3:xtic(1) title 'p50 us' lc rgb '#cc6677', \\
     '' using 0:3:(sprintf('%.1f', floor($3 * 10) / 10)) with labels offset 0,0.7 notitle
unset multiplot
"""
    gnuplot(script, {"w2": "\n".join(lines) + "\n"})


# ---- W3 ---------------------------------------------------------------------

def busbw_lines(rows, systems):
    """Data lines: bytes, then per (system, key) the busbw (NaN if absent)."""
    sizes = sorted({r["bytes"] for r in rows
                    if isinstance(r.get("bytes"), int)})
    lines = []
    for n in sizes:
        cells = [str(n)]
        for system, key in systems:
            cells.append(num(find(rows, system=system, bytes=n), key))
        lines.append(" ".join(cells))
    return sizes, "\n".join(lines) + "\n"


def plot_w3(folder, out):
    one = [r for r in as_rows(load(folder, "collective.json"))
           if r.get("workload") == "W3"]
    nodes = [r for r in as_rows(load(folder, "collective_nodes.json"))
             if r.get("workload") == "W3"]
    if not one and not nodes:
        return "no W3 rows in collective.json or collective_nodes.json"
    files, plots, sizes = {}, [], []
    axes = """set logscale x 2
set logscale y
set xrange {xrange}
set xtics ({tics})
set key inside bottom right vertical
set xtics rotate by -35
set xlabel "bytes per rank"
set ylabel "busbw GB/s (log)"
"""
    if one:
        s, files["one"] = busbw_lines(one, [
            ("shoal", "oop_busbw"), ("shoal", "ip_busbw"),
            ("Open MPI", "oop_busbw"), ("gloo", "ip_busbw"),
            ("memcpy", "gbps")])
        sizes += s
        nranks = next((r.get("nranks") for r in one if r.get("nranks")), 2)
        plots.append(f"""set title "one node, {nranks} ranks (shoal bench collective)"
plot '{{one}}' using 1:2 with linespoints lw 2 title 'shoal, out of place', \\
     '' using 1:3 with linespoints dt 2 title 'shoal, in place', \\
     '' using 1:4 with linespoints lw 2 title 'Open MPI, out of place', \\
     '' using 1:5 with linespoints title 'gloo (torch), in place', \\
     '' using 1:6 with lines dt 3 lc rgb 'gray40' title 'memcpy GB/s, one process'
""")
    if nodes:
        s, files["nodes"] = busbw_lines(nodes, [
            ("shoal (hierarchical)", "oop_busbw"),
            ("gloo (flat, shoal)", "oop_busbw"),
            ("Open MPI", "oop_busbw")])
        sizes += s
        nranks = next((r.get("nranks") for r in nodes if r.get("nranks")), 4)
        plots.append(f"""set title "2 nodes (network namespaces), {nranks} ranks, out of place"
plot '{{nodes}}' using 1:2 with linespoints lw 2 title 'shoal (shm within, gloo pairs between)', \\
     '' using 1:3 with linespoints title 'flat gloo', \\
     '' using 1:4 with linespoints lw 2 title 'Open MPI'
""")
    script = (head(out, "W3 all_reduce, float32 sum: busbw by size "
                   "(nccl-tests' definition; medians)", len(plots)) +
              axes.format(tics=size_tics(sizes), xrange=size_range(sizes)) + "".join(plots) +
              "unset multiplot\n")
    gnuplot(script, files)


# ---- torch ------------------------------------------------------------------

def plot_torch(folder, out):
    doc = load(folder, "torch.json")
    if isinstance(doc, list):
        doc = doc[-1] if doc else None
    results = (doc or {}).get("torch") or {}
    backends = [b for b in ("shoal", "gloo") if results.get(b)]
    if not backends:
        return "no torch results in torch.json"
    world = next(results[b].get("world", 2) for b in backends)
    factor = 2 * (world - 1) / world

    def bw(nbytes, us):
        return (f"{nbytes / (us * 1e3) * factor:.6g}"
                if isinstance(us, (int, float)) and us > 0 else "NaN")

    by_size = {}
    for b in backends:
        for r in results[b].get("rows", []):
            by_size.setdefault(r["bytes"], {})[b] = r.get("us")
    native = {int(k): v for k, v in (doc.get("native_ip_us") or {}).items()}
    lines = [" ".join([str(n), bw(n, by_size[n].get("shoal")),
                       bw(n, by_size[n].get("gloo")), bw(n, native.get(n))])
             for n in sorted(by_size)]
    ddp = [(b, results[b].get("ddp")) for b in backends
           if results[b].get("ddp")]
    ddp_lines = [" ".join([quoted(b), num(d, "step_ms"),
                           num(d, "compute_ms")]) for b, d in ddp]
    panels = 2 if ddp else 1
    script = head(out, f"torch.distributed, {world} ranks: dist.all_reduce "
                  "float32 sum in place, and a DDP step (shoal bench torch)",
                  panels) + f"""
set logscale x 2
set logscale y
set xrange {size_range(by_size)}
set xtics ({size_tics(by_size)})
set key inside bottom right vertical
set xtics rotate by -35
set xlabel "bytes per rank"
set ylabel "busbw GB/s (log)"
set title "all_reduce busbw by size"
plot '{{ar}}' using 1:2 with linespoints lw 2 title 'backend "shoal"', \\
     '' using 1:3 with linespoints lw 2 title 'backend "gloo"', \\
     '' using 1:4 with linespoints dt 2 title 'shoal bench collective (in place)'
"""
    if ddp:
        script += """unset logscale x
unset logscale y
unset xlabel
set xrange [*:*]
set key below horizontal
set xtics autofreq norotate
set ylabel "ms"
set yrange [0:*]
""" + BARS + """set title "DDP step, MLP 128-1024-1024-32, batch 64 per rank (median of 30)"
plot '{ddp}' using 2:xtic(1) title 'step', '' using 3 title 'step under no_sync (no all_reduce)'
"""
    script += "unset multiplot\n"
    gnuplot(script, {"ar": "\n".join(lines) + "\n",
                     "ddp": "\n".join(ddp_lines) + "\n"})


# ---- W5 ---------------------------------------------------------------------

def plot_w5(folder, out):
    rows = [r for r in as_rows(load(folder, "train.json"))
            if r.get("workload") == "W5"]
    if not rows:
        return "no W5 rows in train.json"
    lines = [" ".join([quoted(r.get("config", "?")), num(r, "samples_per_s"),
                       num(r, "samples_per_s_per_rank")]) for r in rows]
    device = rows[0].get("device", "cpu")
    script = head(out, "W5 data-parallel training, MLP 128-1024-1024-32, "
                  f"device {device} (examples/data_parallel dp_bench; "
                  "median round)", 1) + BARS + """
set yrange [0:*]
set ylabel "samples/s"
set title "samples/s of each configuration"
plot '{w5}' using 2:xtic(1) title 'samples/s', '' using 3 title 'per process'
unset multiplot
"""
    gnuplot(script, {"w5": "\n".join(lines) + "\n"})


# ---- DataLoader -------------------------------------------------------------

def plot_dataloader(folder, out):
    path = os.path.join(folder, "dataloader.json")
    if load(folder, "dataloader.json") is None:
        return "no dataloader.json"
    subprocess.run([sys.executable, os.path.join(HERE, "plot_dataloader.py"),
                    path, out], check=True, stdout=subprocess.DEVNULL)


PLOTS = (("w1_store.svg", plot_w1), ("w2_tasks.svg", plot_w2),
         ("w3_allreduce.svg", plot_w3), ("torch.svg", plot_torch),
         ("w5_train.svg", plot_w5), ("dataloader.svg", plot_dataloader))


def main(argv):
    if len(argv) != 3:
        print(__doc__)
        return 2
    folder, images = argv[1], argv[2]
    if not os.path.isdir(folder):
        print(f"plot_benchmarks: {folder} is not a folder", file=sys.stderr)
        return 2
    os.makedirs(images, exist_ok=True)
    failed = 0
    for name, plot in PLOTS:
        out = os.path.join(images, name)
        try:
            why = plot(folder, out)
        except (subprocess.CalledProcessError, KeyError, TypeError,
                ValueError) as e:
            print(f"failed {name}: {e}", file=sys.stderr)
            failed += 1
            continue
        if why:
            print(f"skipped {name}: {why} in {folder}")
        else:
            print(f"wrote {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
