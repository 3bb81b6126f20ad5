#!/usr/bin/env python3
"""Plots `shoal bench dataloader --json` output with gnuplot.

    tools/plot_dataloader.py results.json docs/images/dataloader.svg

Three panels, one bar per loader (the medians the bench wrote): batches/s
(steady, second epoch) of the tokens and images workloads, the time to the
first batch (log scale), and the images workload's peak memory summed over
the loader's processes (RSS, PSS) with the loader's store segment resident.
The output's extension picks the terminal: .svg or .png.
"""

import json
import os
import subprocess
import sys
import tempfile

LOADERS = ("shoal", "torch-2-persistent", "torch-defaults")
LABELS = {"shoal": "shoal", "torch-2-persistent": "torch, 2 workers",
          "torch-defaults": "torch defaults"}


def _median(results, key):
    return results.get(key, {}).get("median", {})


def _value(results, workload, loader, field, scale=1.0):
    v = _median(results, f"{workload}/{loader}").get(field)
    return "NaN" if v is None else f"{v * scale:.6g}"


def _data(results):
    """One row per loader: label, tokens b/s, images b/s, tokens first
    batch, images first batch, RSS, PSS, store (MiB)."""
    mib = 1 / 2 ** 20
    rows = []
    for loader in LOADERS:
        rows.append(" ".join([
            f'"{LABELS[loader]}"',
            _value(results, "tokens", loader, "batches_per_s"),
            _value(results, "images", loader, "batches_per_s"),
            _value(results, "tokens", loader, "first_batch_s"),
            _value(results, "images", loader, "first_batch_s"),
            _value(results, "images", loader, "peak_rss_bytes", mib),
            _value(results, "images", loader, "peak_pss_bytes", mib),
            _value(results, "images", loader, "peak_store_bytes", mib)]))
    return "\n".join(rows) + "\n"


def _script(data_path, out, settings):
    terminal = ("pngcairo size 1500,480 font ',10'" if out.endswith(".png")
                else "svg size 1500,480 dynamic font ',11'")
    title = (f"shoal bench dataloader: tokens {settings.get('tokens_gib')} "
             f"GiB, images {settings.get('images')}; medians of "
             f"{settings.get('repeat')} runs")
    return f"""
set terminal {terminal}
set output '{out}'
set multiplot layout 1,3 title "{title}"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set grid ytics
set key below horizontal
set yrange [0:*]
set xtics scale 0
set title "batches/s (steady epoch)"
plot '{data_path}' using 2:xtic(1) title 'tokens', '' using 3 title 'images'
set title "time to the first batch (s)"
set logscale y
set yrange [*:*]
plot '{data_path}' using 4:xtic(1) title 'tokens', '' using 5 title 'images'
unset logscale y
set yrange [0:*]
set title "images: peak memory (MiB)"
plot '{data_path}' using 6:xtic(1) title 'RSS summed', \\
     '' using 7 title 'PSS summed', '' using 8 title 'store resident'
unset multiplot
"""


def main(argv):
    if len(argv) != 3:
        print(__doc__)
        return 2
    with open(argv[1]) as f:
        doc = json.load(f)
    results = doc.get("results", doc)
    out = argv[2]
    with tempfile.TemporaryDirectory() as tmp:
        data_path = os.path.join(tmp, "data.txt")
        with open(data_path, "w") as f:
            f.write(_data(results))
        subprocess.run(["gnuplot"], input=_script(data_path, out,
                                                  doc.get("settings", {})),
                       text=True, check=True)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
