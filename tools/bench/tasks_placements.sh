#!/bin/bash
# W2's goal line in three placements: the quiet machine (full
# runs), every thread on one vCPU (taskset -c 0), and beside one CPU hog per
# CPU (`yes`, killed at the end). Prints the goal line's figures per run.
#
# usage: tools/bench/tasks_placements.sh [path/to/shoal] [runs]
#   default binary: bazel-out/k8-optopt/bin/tools/shoal
#   (bazel build --config=opt //tools:shoal)
set -euo pipefail
B=${1:-bazel-out/k8-optopt/bin/tools/shoal}
RUNS=${2:-3}
F=(--json --peers=false --clients=0 --async 5000 --sync 4000)
[ -x "$B" ] || { echo "no shoal binary at $B" >&2; exit 2; }

goal() {  # the goal line of `shoal bench tasks --json` on stdin, summarised
  python3 -c '
import json, sys
for line in sys.stdin:
    try: j = json.loads(line)
    except ValueError: continue
    s = j.get("system", "")
    if s.startswith("goal"):
        print("  goal: shoal %.1f us, raw %.1f us, echo process %.1f us, ratio %.2f (to the echo process %.2f); switches per round trip %.2f / %.2f / %.2f" % (
            j["shoal_p50_us"], j["raw_in_process_p50_us"], j["raw_echo_process_p50_us"],
            j["ratio_in_process"], j["ratio_echo_process"], j["shoal_switches_per_op"],
            j["raw_in_process_switches_per_op"], j["raw_echo_process_switches_per_op"]))
    elif "one call" in j.get("mode", "") or "SubmitAsync (pushed)" in j.get("mode", "") or "clients" in s:
        print("  %s | %s: %.0f tasks/s, p99 %.1f us, failed %d" % (s, j["mode"], j["tasks_per_s"], j["p99_us"], j["failed"]))
'
}

for i in $(seq "$RUNS"); do
  echo "== quiet, full run $i ($(date -u +%H:%M:%S) UTC)"
  "$B" bench tasks --json | goal
done
for i in $(seq "$RUNS"); do
  echo "== one vCPU, run $i ($(date -u +%H:%M:%S) UTC)"
  taskset -c 0 "$B" bench tasks "${F[@]}" | goal
done
hogs=()
trap 'kill "${hogs[@]}" 2>/dev/null || true' EXIT
for _ in $(seq "$(nproc)"); do yes >/dev/null & hogs+=($!); done
for i in $(seq "$RUNS"); do
  echo "== beside $(nproc) CPU hogs, run $i ($(date -u +%H:%M:%S) UTC)"
  "$B" bench tasks "${F[@]}" | goal
done
