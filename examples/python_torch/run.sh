#!/usr/bin/env bash
# The torch data-parallel example end to end on this machine: builds shoal
# and its Python package optimised, trains the MLP with NPROC ranks under
# `shoal launch` and prints where the loss CSV is.
#
#   examples/python_torch/run.sh                   # CPU: 2 ranks; GPUs: one rank per GPU
#   NPROC=1 BATCH=128 examples/python_torch/run.sh --steps 300
#   PYTHON=~/venv/bin/python examples/python_torch/run.sh   # e.g. a CUDA torch
#
# Environment: NPROC (ranks; default: one per GPU when the NVIDIA driver
# lists GPUs, else 2), BATCH (per rank, default 64), PYTHON (an interpreter
# with numpy and torch; default Debian's /usr/bin/python3), OUT (default
# ./out/python_torch). Further arguments go to train.py (--help lists them).
set -euo pipefail
cd "$(dirname "$0")/../.."

OUT=${OUT:-$PWD/out/python_torch}
BATCH=${BATCH:-64}
PYTHON=${PYTHON:-/usr/bin/python3}
GPUS=0
if [ -d /proc/driver/nvidia/gpus ]; then
  GPUS=$(find /proc/driver/nvidia/gpus -mindepth 1 -maxdepth 1 | wc -l)
fi
if [ -n "${NPROC:-}" ]; then
  N=$NPROC
elif [ "$GPUS" -gt 0 ]; then
  N=gpu   # one rank per GPU, each seeing just its own
else
  N=2
fi

bazel build --curses=no --color=no --config=opt //tools:shoal //python:site
SHOAL=bazel-out/k8-optopt/bin/tools/shoal
mkdir -p "$OUT"
"$SHOAL" launch --store-bytes 256M --nproc-per-node "$N" -- \
  "$PYTHON" examples/python_torch/train.py --batch "$BATCH" \
  --csv "$OUT/loss_${N}x${BATCH}.csv" "$@"
echo
echo "loss curve: $OUT/loss_${N}x${BATCH}.csv"
