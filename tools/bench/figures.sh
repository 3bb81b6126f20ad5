#!/bin/bash
# Runs every workload of docs/BENCHMARKS.md once, beside its peers, and keeps
# each bench's --json output in one folder; tools/plot_benchmarks.py draws the
# page's plots from that folder.
#
#   bazel build --config=opt //tools:shoal //python:site //examples/data_parallel:dp_bench
#   tools/bench/figures.sh [OUT [BIN]]    # OUT: docs/figures; BIN: bazel-out/k8-optopt/bin
#
# Run it on a quiet machine: it takes about ten minutes on 2 cores. The
# across-nodes rows need root (network namespaces); without root they are
# skipped and the script says so. The Python rows make Ray's virtualenv once
# (~/.cache/shoal-bench-venv, --install-ray) and use it as their peer.
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-docs/figures}
BIN=${2:-bazel-out/k8-optopt/bin}
B=$BIN/tools/shoal
mkdir -p "$OUT/logs"
[ -x "$B" ] || { echo "figures.sh: no $B; build with --config=opt first" >&2; exit 2; }

run() {  # run NAME CMD...: CMD's JSON rows to OUT/NAME.json; its whole stdout and its
         # stderr to OUT/logs/NAME.{out,log}
  local name=$1; shift
  echo "figures.sh: $name: $*" >&2
  local t0=$SECONDS
  if "$@" > "$OUT/logs/$name.out" 2> "$OUT/logs/$name.log"; then
    # The JSON rows only: a peer may print to stdout too (Ray's raylet).
    grep '^{' "$OUT/logs/$name.out" > "$OUT/$name.json" || true
    echo "figures.sh: $name done in $((SECONDS - t0)) s" >&2
  else
    echo "figures.sh: $name FAILED (exit $?), see $OUT/logs/$name.log" >&2
  fi
}

date -u +"%Y-%m-%dT%H:%M:%SZ commit $(git rev-parse --short HEAD 2>/dev/null) $(nproc) CPUs" > "$OUT/conditions.txt"
uptime >> "$OUT/conditions.txt"

run store      "$B" bench store -n 9 --json
run tasks      "$B" bench tasks --json
run collective "$B" bench collective --json
if [ "$(id -u)" = 0 ]; then
  run collective_nodes "$B" bench collective --nodes 2 --nproc 2 -b 4K -e 256M -f 4 --rounds 1 --reps 3 -w 2 --json
else
  echo "figures.sh: collective_nodes skipped: needs root for network namespaces" >&2
fi
run launch     "$B" bench launch --json
run python     "$B" bench python --json --install-ray
run torch      "$B" bench torch --json
run train      "$BIN/examples/data_parallel/dp_bench" --rounds 3 --json
run dataloader_table "$B" bench dataloader --json "$OUT/dataloader.json"
rm -f "$OUT/dataloader_table.json"  # a text table (logs/dataloader_table.out)
