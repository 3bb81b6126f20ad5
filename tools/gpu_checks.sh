#!/usr/bin/env bash
# Every GPU check of a gpu-bundle (made by tools/gpu_bundle), in one run: the
# GPU tests with real processes, the NCCL communicator, device objects in the
# store, the data-parallel example on the GPU (its tests, one training run,
# W5), and the W1-on-GPU and NCCL-collective benchmarks. Logs go under $OUT
# (default: gpu-out next to the bundle); summary.txt lists each step's exit.
# That is more than the 8 files the device tool brings back: run it with
# OUT=/tmp/gpu-out and tar the folder into the tool's $OUT.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$HERE/../gpu-out}
mkdir -p "$OUT"
# NCCL and cuBLAS: the GPU machine's come with PyTorch (the nvidia-nccl and
# nvidia-cublas Python packages) or with its CUDA toolkit.
NCCL_DIR=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null || true)
CUBLAS_DIR=
if [ ! -e /usr/local/cuda/lib64/libcublas.so.13 ]; then
  NV=$(python3 -c 'import nvidia; print(list(nvidia.__path__)[0])' 2>/dev/null || true)
  CUBLAS=$( [ -n "$NV" ] && find "$NV" -name 'libcublas.so.13*' 2>/dev/null | head -1)
  CUBLAS_DIR=${CUBLAS:+$(dirname "$CUBLAS")}
fi
export LD_LIBRARY_PATH="$HERE/lib${NCCL_DIR:+:$NCCL_DIR}${CUBLAS_DIR:+:$CUBLAS_DIR}:${LD_LIBRARY_PATH:-}"
export TEST_SRCDIR="$HERE" TEST_WORKSPACE=shoal TEST_TMPDIR=${TMPDIR:-/tmp}
S=$HERE/shoal/tools/shoal

run() {
  local name=$1
  shift
  echo "== $name: $*" >> "$OUT/summary.txt"
  local t0=$(date +%s)
  timeout 300 "$@" > "$OUT/$name.log" 2>&1
  echo "   exit $? after $(( $(date +%s) - t0 )) s" >> "$OUT/summary.txt"
}

nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
run info "$S" info --devices
run gpu_info_test "$HERE/shoal/gpu/gpu_info_test"
run nccl_communicator_test "$HERE/shoal/gpu/nccl_communicator_test"
run gpu_store_test "$HERE/shoal/tests/gpu/gpu_store_test"
run collectives_gpu "$HERE/shoal/tests/collectives/collectives_test" --gtest_filter='*Gpu*'
run bench_store_cuda "$S" bench store --device cuda --sizes 1M,64M,1G -n 9
run bench_collective_nccl "$S" launch --nproc-per-node 1 -- "$S" bench collective --backend nccl -b 4K -e 1G -f 4
# examples/data_parallel: its tests (the GPU path's loss curve against the
# CPU's; --device auto picks the GPU), one training run on the GPU the way
# run.sh does it, and W5 per GPU (one GPU: one rank; no scaling figure).
DP=$HERE/shoal/examples/data_parallel
run dp_test "$DP/data_parallel_test"
run dp_train_gpu "$S" launch --nproc-per-node gpu -- "$DP/data_parallel" --out-dir "$OUT/dp" --no-png
run w5_gpu_b64 "$DP/dp_bench" --device gpu --ranks 1 --batch 64
run w5_gpu_b1024 "$DP/dp_bench" --device gpu --ranks 1 --batch 1024
cat "$OUT/summary.txt"
