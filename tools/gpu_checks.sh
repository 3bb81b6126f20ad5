#!/usr/bin/env bash
# Every GPU check of a gpu-bundle (made by tools/gpu_bundle), in one run: the
# GPU tests with real processes, the NCCL communicator, device objects in the
# store, and the W1-on-GPU and NCCL-collective benchmarks. Logs go under $OUT
# (default: gpu-out next to the bundle); summary.txt lists each step's exit.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$HERE/../gpu-out}
mkdir -p "$OUT"
# NCCL: the GPU machine's comes with PyTorch (the nvidia-nccl Python package).
NCCL_DIR=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null || true)
export LD_LIBRARY_PATH="$HERE/lib${NCCL_DIR:+:$NCCL_DIR}:${LD_LIBRARY_PATH:-}"
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
cat "$OUT/summary.txt"
