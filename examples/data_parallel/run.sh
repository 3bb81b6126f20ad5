#!/usr/bin/env bash
# The data-parallel example end to end on this machine: builds shoal and the
# example optimised, trains the MLP under `shoal launch` twice — 1 rank with
# batch N·B, then N ranks with batch B each (the same global batch, so the
# two loss curves should lie on top of each other) — and prints where the
# loss plot is.
#
#   examples/data_parallel/run.sh                    # CPU: N = 2; GPUs: one rank per GPU
#   NPROC=4 BATCH=32 examples/data_parallel/run.sh --steps 1000 --lr 0.05
#
# Environment: NPROC (ranks; default: one per GPU when the NVIDIA driver lists
# GPUs, else 2), BATCH (per rank, default 64), OUT (default
# ./data_parallel_out). Further arguments go to every rank of both runs
# (`data_parallel --help` lists them).
set -euo pipefail
cd "$(dirname "$0")/../.."

OUT=${OUT:-$PWD/data_parallel_out}
BATCH=${BATCH:-64}
GPUS=0
if [ -d /proc/driver/nvidia/gpus ]; then
  GPUS=$(find /proc/driver/nvidia/gpus -mindepth 1 -maxdepth 1 | wc -l)
fi
if [ -n "${NPROC:-}" ]; then
  N=$NPROC
  LAUNCH_N=$NPROC
elif [ "$GPUS" -gt 0 ]; then
  N=$GPUS
  LAUNCH_N=gpu   # each rank sees just its own GPU
else
  N=2
  LAUNCH_N=2
fi

bazel build --curses=no --color=no --config=opt \
  //tools:shoal //examples/data_parallel:data_parallel
BIN=bazel-out/k8-optopt/bin
SHOAL=$BIN/tools/shoal
PROG=$BIN/examples/data_parallel/data_parallel
mkdir -p "$OUT"
rm -f "$OUT/loss.png"
LAUNCH=("$SHOAL" launch --store-bytes 256M)

REF=()
if [ "$N" != 1 ]; then
  echo "== 1 rank, batch $((N * BATCH)) (the reference)"
  "${LAUNCH[@]}" --nproc-per-node 1 -- "$PROG" --batch $((N * BATCH)) \
    --out-dir "$OUT" --csv "$OUT/loss_1rank.csv" --no-png "$@"
  REF=(--compare "$OUT/loss_1rank.csv")
  echo
fi
echo "== $N ranks, batch $BATCH each"
"${LAUNCH[@]}" --nproc-per-node "$LAUNCH_N" -- "$PROG" --batch "$BATCH" \
  --out-dir "$OUT" --csv "$OUT/loss_${N}ranks.csv" --plot "$OUT/loss.png" \
  "${REF[@]}" "$@"
echo
if [ -f "$OUT/loss.png" ]; then
  echo "loss plot: $OUT/loss.png"
else
  echo "no plot (install gnuplot-nox: tools/setup); loss curves: $OUT/*.csv"
fi
