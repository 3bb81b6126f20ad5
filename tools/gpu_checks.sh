#!/usr/bin/env bash
# Every GPU check of a gpu-bundle (made by tools/gpu_bundle) in one command
# that finishes within a budget: the bundle's run.sh. Written for the GPU
# machine of ../shared/notes/gpu-device.md (no Bazel, no network, NCCL only
# inside PyTorch's site-packages, 10 minutes a command).
#
#   gpu-bundle/run.sh          # OUT=... for the log folder (default gpu-out
#                              # next to the bundle)
#
# First the bundle's own libraries (ldd: any "not found" is a loud FAIL) and
# where NCCL is, then whether the machine shows a GPU at all; then the store
# and NCCL checks, the data-parallel example and the benchmarks, each under
# STEP_LIMIT seconds and all under BUDGET seconds from the start (a check
# that cannot start in time is SKIPped, named). $OUT/summary.txt: one line per
# check, PASS|FAIL|SKIP, the reason, the log's path. A GPU test that skips
# for want of a GPU, CUDA or NCCL on a machine with a GPU is a FAIL.
#
# Exit status: 0 every check passed; 1 a check failed (or the libraries);
# 2 no GPU on this machine (only the library checks ran).
#
# Environment: OUT, BUDGET (default 480 s), STEP_LIMIT (default 100 s).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$HERE/../gpu-out}
BUDGET=${BUDGET:-480}
STEP_LIMIT=${STEP_LIMIT:-100}
DEADLINE=$(($(date +%s) + BUDGET))
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
: > "$OUT/summary.txt"
# shellcheck source=tools/gpu_checks_lib.sh
. "$HERE/gpu_checks_lib.sh"
echo "gpu checks: logs and summary.txt in $OUT (budget ${BUDGET}s, ${STEP_LIMIT}s a check)"

# ---- libraries: the bundle's, cuBLAS (linked by the data-parallel example)
# and NCCL (loaded with dlopen by the first NCCL communicator).
PY_DIRS=$(python3 -c 'import sys; print("\n".join(p for p in sys.path if p))' 2>/dev/null)
find_in_python() {  # find_in_python nvidia/nccl/lib libnccl.so.2
  local d
  while IFS= read -r d; do
    [ -e "$d/$1/$2" ] && { echo "$d/$1"; return 0; }
  done <<< "$PY_DIRS"
  return 1
}
LIBDIRS="$HERE/lib"
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -e "$d/libcublas.so.13" ] && { LIBDIRS="$LIBDIRS:$d"; break; }
done
# The toolkit's cuBLAS, else the nvidia-cublas Python package's (its
# libcublasLt beside it).
if [ "$LIBDIRS" = "$HERE/lib" ]; then
  d=$(find_in_python nvidia/cublas/lib libcublas.so.13) && LIBDIRS="$LIBDIRS:$d"
fi
NCCL_DIR=
if ! ldconfig -p 2>/dev/null | grep -q 'libnccl\.so\.2 '; then
  NCCL_DIR=$(find_in_python nvidia/nccl/lib libnccl.so.2) ||
    { [ -e /usr/local/cuda/lib64/libnccl.so.2 ] && NCCL_DIR=/usr/local/cuda/lib64; }
fi
export LD_LIBRARY_PATH="$LIBDIRS${NCCL_DIR:+:$NCCL_DIR}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH" > "$OUT/libraries.log"
if missing_libs "$HERE/shoal" >> "$OUT/libraries.log"; then
  summary PASS libraries "every binary's shared libraries resolve" "$OUT/libraries.log"
else
  summary FAIL libraries "MISSING: $(grep -c 'not found' "$OUT/libraries.log") unresolved, e.g. $(grep -m1 'not found' "$OUT/libraries.log" | sed 's|.*/||')" "$OUT/libraries.log"
  echo "!!! shared libraries missing; the checks that need them will fail:" >&2
  grep 'not found' "$OUT/libraries.log" >&2
fi
if [ -n "$NCCL_DIR" ] || ldconfig -p 2>/dev/null | grep -q 'libnccl\.so\.2 '; then
  summary PASS nccl_library "libnccl.so.2 in ${NCCL_DIR:-the system library cache}"
else
  summary FAIL nccl_library "libnccl.so.2 not found (system cache, Python site-packages nvidia/nccl/lib, /usr/local/cuda/lib64): NCCL checks will fail"
fi

# ---- is there a GPU?
HAVE_GPU=0
WHY_NO_GPU=
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || WHY_NO_GPU="nvidia-smi failed ($(head -c 100 "$OUT/nvidia-smi.txt" | tr '\n' ' ')); "
if ls /dev/nvidia[0-9]* > /dev/null 2>&1 || ls /proc/driver/nvidia/gpus/* > /dev/null 2>&1; then
  HAVE_GPU=1
fi
if [ "$HAVE_GPU" = 0 ]; then
  summary FAIL gpu "NO GPU on this machine: ${WHY_NO_GPU}no /dev/nvidia<N>, no /proc/driver/nvidia/gpus entries" "$OUT/nvidia-smi.txt"
  echo "no GPU: the GPU checks were not run (exit 2)" | tee -a "$OUT/summary.txt"
  exit 2
fi
NODES=$(ls -d /dev/nvidia[0-9]* 2>/dev/null | wc -l)
summary PASS gpu "$NODES /dev/nvidia<N> node(s); nvidia-smi in the log" "$OUT/nvidia-smi.txt"

# The tests' temporary folder: a fresh private one (mktemp -d, mode 0700),
# never the shared /tmp itself, where their file names could be made first.
TEST_TMPDIR=$(mktemp -d "${TMPDIR:-/tmp}/shoal-gpu-tests.XXXXXX")
trap 'rm -rf "$TEST_TMPDIR"' EXIT
export TEST_SRCDIR="$HERE" TEST_WORKSPACE=shoal TEST_TMPDIR
export NCCL_DEBUG=INFO
S=$HERE/shoal/tools/shoal
DP=$HERE/shoal/examples/data_parallel

# ---- store and NCCL first: the checks this machine is most needed for.
step info "$S" info --devices
step gpu_info_test "$HERE/shoal/gpu/gpu_info_test"
step nccl_api_test "$HERE/shoal/gpu/nccl_api_test"
step nccl_communicator_test "$HERE/shoal/collectives/nccl_communicator_test"
step gpu_store_test "$HERE/shoal/tests/gpu/gpu_store_test"
step collectives_gpu "$HERE/shoal/tests/collectives/collectives_test" --gtest_filter='*Gpu*'
# The Python package with the machine's own PyTorch (SKIPs, saying why, when
# its Python or PyTorch does not fit).
if [ -x "$HERE/python_checks.sh" ]; then
  export SHOAL_BIN=$S
  step python_dlpack "$HERE/python_checks.sh"
fi
# ---- the data-parallel example: its tests (the GPU loss curve against the
# CPU's), one training run on the GPU, then the benchmarks.
step dp_test "$DP/data_parallel_test"
step dp_train_gpu "$S" launch --nproc-per-node gpu -- "$DP/data_parallel" --out-dir "$OUT/dp" --no-png
step bench_store_cuda "$S" bench store --device cuda --sizes 1M,64M,1G -n 5
step bench_collective_nccl "$S" launch --nproc-per-node 1 -- "$S" bench collective --backend nccl -b 4K -e 256M -f 4
step w5_gpu_b64 "$DP/dp_bench" --device gpu --ranks 1 --batch 64
step w5_gpu_b1024 "$DP/dp_bench" --device gpu --ranks 1 --batch 1024

echo "---- $FAILS failed; summary: $OUT/summary.txt"
[ "$FAILS" -eq 0 ]
