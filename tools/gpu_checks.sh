#!/usr/bin/env bash
# Every GPU check of a gpu-bundle (made by tools/gpu_bundle) in one command
# that finishes within a budget: the bundle's run.sh. Written for the GPU
# machine of ../shared/notes/gpu-device.md (no Bazel, no network, NCCL and
# cuBLAS only inside the Python environment's packages, 10 minutes a
# command, at most 8 files back).
#
#   gpu-bundle/run.sh        # OUT=... (default: gpu-out beside the bundle)
#
# What comes out, in OUT: gpu-out.tgz, one folder (gpu-out/) of every log,
# environment.txt and summary.txt; and summary.txt beside it. The tarball is
# rewritten after every check and at exit, also after a failure, a timeout
# or a signal (a trap), so a run cut short still leaves what it found.
#
# In order:
#   1. the environment, printed first (environment.txt): glibc (ldd
#      --version), /dev/shm, the driver, compute mode and GPUs (nvidia-smi
#      -q), CUDA_VISIBLE_DEVICES and the GPUs CUDA sees, python3, torch and
#      torch.version.cuda, and the libnccl.so.2 and libcublas this run loads;
#   2. the libraries: the glibc the bundle needs against the machine's, the
#      machine's libstdc++ where it is new enough (else the bundle's), and
#      ldd of every bundled binary (a "not found" is a loud FAIL);
#   3. whether the machine shows a GPU at all (no: exit 2 at once, "no GPU");
#      and room in /dev/shm for the stores (too little: the store checks are
#      skipped, saying so);
#   4. the checks, most evidence first: build and device facts (quick);
#      CUDA IPC across three processes (gpu_store_test) and `shoal bench
#      store --device cuda`; NCCL loading and the communicator's life cycle
#      (init, calls, a timeout that aborts); two ranks on one GPU refused
#      fast by NCCL (never a hang); device pointers routed to NCCL; the
#      NCCL collective benchmark; the data-parallel example's GPU loss curve
#      against the CPU one and its samples/s; DLPack (CUDA, then CPU); the
#      torch backend's CUDA path when the bundle has a torch 2.x extension.
# Each check runs under its own limit and all under BUDGET seconds from the
# start (a check that cannot start in time is SKIPped, named).
# summary.txt: one line per check, PASS|FAIL|SKIP, the reason, the log. A
# GPU test that skips for want of a GPU, CUDA or NCCL on a machine with a
# GPU is a FAIL.
#
# Exit status: 0 every check passed; 1 a check failed (or the libraries);
# 2 no GPU on this machine (only the environment and libraries were
# checked); 143 stopped by a signal.
#
# Environment: OUT, BUDGET (default 420 s), STEP_LIMIT (default 120 s),
# CUDA_LIB_DIRS (where a CUDA toolkit's cuBLAS may be; default
# /usr/local/cuda/lib64 and its targets/x86_64-linux/lib).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)

# run.sh --check-duplicate-gpu: two ranks on one GPU must fail fast with
# NCCL's duplicate-GPU error (run as a check, under its limit: a hang is a
# timeout).
if [ "${1:-}" = --check-duplicate-gpu ]; then
  out=$(mktemp "${TMPDIR:-/tmp}/shoal-dup-gpu.XXXXXX")
  "$HERE/shoal/tools/shoal" launch --nproc-per-node 2 --gpus 0 -- \
    "$HERE/shoal/tests/collectives/coll_probe" gpu > "$out" 2>&1
  rc=$?
  cat "$out"
  line=$(grep -m1 -i 'duplicate GPU' "$out")
  rm -f "$out"
  if [ "$rc" -eq 0 ]; then
    echo "FAILED: two ranks on one GPU ran (NCCL should refuse them)"
    exit 1
  fi
  if [ -z "$line" ]; then
    echo "FAILED: exit $rc without NCCL's duplicate-GPU error"
    exit 1
  fi
  echo "refused as expected (exit $rc): ${line:0:200}"
  exit 0
fi

OUT=${OUT:-$HERE/../gpu-out}
BUDGET=${BUDGET:-420}
STEP_LIMIT=${STEP_LIMIT:-120}
DEADLINE=$(($(date +%s) + BUDGET))
mkdir -p "$OUT"
RESULTS=$(cd "$OUT" && pwd)
# Logs go to a private folder (mktemp -d, mode 0700), packed into
# $RESULTS/gpu-out.tgz; OUT (the lib's name for it) is that folder.
WORK=$(mktemp -d "${TMPDIR:-/tmp}/shoal-gpu-out.XXXXXX")
OUT=$WORK/gpu-out
mkdir -p "$OUT"
: > "$OUT/summary.txt"
LOG_BASE=$WORK
TEST_TMPDIR=$(mktemp -d "${TMPDIR:-/tmp}/shoal-gpu-tests.XXXXXX")
# shellcheck source=tools/gpu_checks_lib.sh
. "$HERE/gpu_checks_lib.sh"

pack() {
  cut_logs "$OUT" $((2 << 20))
  cp "$OUT/summary.txt" "$RESULTS/summary.txt.tmp" &&
    mv "$RESULTS/summary.txt.tmp" "$RESULTS/summary.txt"
  tar czf "$RESULTS/gpu-out.tgz.tmp" -C "$WORK" gpu-out &&
    mv "$RESULTS/gpu-out.tgz.tmp" "$RESULTS/gpu-out.tgz"
}
after_step() { pack; }
finish() {
  local status=$?
  pack
  rm -rf "$WORK" "$TEST_TMPDIR"
  echo "---- summary ($RESULTS/summary.txt; every log in $RESULTS/gpu-out.tgz):"
  cat "$RESULTS/summary.txt"
  exit "$status"
}
stopped() {
  stop_step "$1"
  summary FAIL stopped "run.sh got SIG$1 after $(($(date +%s) + BUDGET - DEADLINE))s; the checks after the last line did not run"
  exit 143
}
trap finish EXIT
trap 'stopped TERM' TERM
trap 'stopped INT' INT
trap 'stopped HUP' HUP

S=$HERE/shoal/tools/shoal
DP=$HERE/shoal/examples/data_parallel

# ---- library paths: the bundle's; libstdc++ and libexpat the machine's when
# new enough; cuBLAS (linked by the data-parallel example) from the CUDA
# toolkit or the Python environment's packages (CUDA 13 wheels:
# nvidia/cu13/lib; CUDA 12's: nvidia/cublas/lib); NCCL (loaded with dlopen
# by the first NCCL communicator) from the system or nvidia/nccl/lib.
PY_DIRS=$(python3 -c 'import sys; print("\n".join(p for p in sys.path if p))' 2>/dev/null)
NEEDS_FILE=$HERE/lib/needs.env
# shellcheck disable=SC1090
[ -e "$NEEDS_FILE" ] && . "$NEEDS_FILE"
choose_fallback_libs "$HERE/lib/fallback" "$WORK/lib-chosen" > "$OUT/fallback-libs.txt"
LIBDIRS="$HERE/lib:$WORK/lib-chosen"
CUBLAS=$(readelf -d "$DP/data_parallel" 2>/dev/null | grep -o -m1 'libcublas\.so[.0-9]*')
CUBLAS=${CUBLAS:-libcublas.so.13}
CUBLAS_DIR=
if [ -z "$(system_lib "$CUBLAS")" ]; then
  for d in ${CUDA_LIB_DIRS-/usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib}; do
    [ -e "$d/$CUBLAS" ] && { CUBLAS_DIR=$d; break; }
  done
  [ -n "$CUBLAS_DIR" ] ||
    CUBLAS_DIR=$(find_in_python "$CUBLAS" nvidia/cu13/lib nvidia/cublas/lib) || CUBLAS_DIR=
  [ -n "$CUBLAS_DIR" ] && LIBDIRS="$LIBDIRS:$CUBLAS_DIR"
fi
NCCL_DIR=
if [ -z "$(system_lib libnccl.so.2)" ]; then
  NCCL_DIR=$(find_in_python libnccl.so.2 nvidia/nccl/lib nvidia/cu13/lib) ||
    { [ -e /usr/local/cuda/lib64/libnccl.so.2 ] && NCCL_DIR=/usr/local/cuda/lib64; } ||
    NCCL_DIR=
fi
export LD_LIBRARY_PATH="$LIBDIRS${NCCL_DIR:+:$NCCL_DIR}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# ---- 1. the environment, first.
nvidia-smi -q > "$OUT/nvidia-smi-q.txt" 2>&1
SMI_RC=$?
environment() {
  echo "gpu checks: budget ${BUDGET}s, ${STEP_LIMIT}s a check; results in $RESULTS"
  echo "== date: $(date -u '+%Y-%m-%d %H:%M:%S UTC'); $(uname -srm); $(nproc) CPUs"
  echo "== ldd --version: $(ldd --version 2>&1 | head -n 1)"
  echo "== df -h /dev/shm:"
  df -h /dev/shm 2>&1
  echo "== nvidia-smi -q (exit $SMI_RC; all of it in nvidia-smi-q.txt):"
  grep -E 'Driver Version|CUDA Version|Product Name|Compute Mode|MIG Mode|Current *:|Persistence Mode|Bus Id' \
    "$OUT/nvidia-smi-q.txt" | sed 's/^ */  /' | head -n 40
  echo "== CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-<unset>}"
  echo "== python3: $(command -v python3 || echo missing) ($(python3 --version 2>&1))"
  echo "== torch:"
  timeout 120 python3 -c 'import torch, numpy
print(" ", torch.__version__, "torch.version.cuda", torch.version.cuda,
      "cuda available", torch.cuda.is_available(),
      "devices", torch.cuda.device_count(), "; numpy", numpy.__version__)' 2>&1 |
    tail -n 3
  echo "== libraries (LD_LIBRARY_PATH=$LD_LIBRARY_PATH):"
  sed 's/^/  /' "$OUT/fallback-libs.txt"
  echo "  libnccl.so.2 found in: ${NCCL_DIR:-$(system_lib libnccl.so.2)}${NCCL_DIR:+ (Python package)}"
  loaded=$(LD_DEBUG=libs "$S" info 2>&1 > /dev/null | grep -m1 'calling init: .*libnccl' | sed 's/.*calling init: //')
  echo "  libnccl.so.2 loaded: ${loaded:-NOT LOADED ($("$S" info 2>&1 | grep -i nccl | head -n 1))}"
  echo "  $CUBLAS found in: ${CUBLAS_DIR:-$(system_lib "$CUBLAS")}"
  echo "  $CUBLAS loaded by data_parallel: $(ldd "$DP/data_parallel" 2>&1 | grep -m1 'libcublas\.' | sed 's/^[[:space:]]*//')"
  echo "== shoal info --devices (CUDA's count under CUDA_VISIBLE_DEVICES):"
  timeout 60 "$S" info --devices 2>&1 | sed 's/^/  /'
}
# In the background, so that a signal stops it at once (see step).
environment > "$OUT/environment.txt" 2>&1 &
STEP_NAME=environment STEP_PID=$! STEP_LOG=$OUT/environment.txt STEP_T0=$(date +%s)
wait "$STEP_PID"
STEP_NAME= STEP_PID=
cat "$OUT/environment.txt"
after_step

# ---- 2. libraries: glibc first (nothing loads on an older one), then ldd.
{
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  echo "needs: glibc ${GLIBC_NEEDED:-?} (bundled libstdc++: ${FALLBACK_GLIBC_NEEDED:-?}), GLIBCXX ${GLIBCXX_NEEDED:-?}"
  echo "machine: glibc $(glibc_version)"
  cat "$OUT/fallback-libs.txt"
} > "$OUT/libraries.log"
GLIBC=$(glibc_version)
if [ -n "${GLIBC_NEEDED:-}" ] && ! version_ge "${GLIBC:-0}" "$GLIBC_NEEDED"; then
  summary FAIL glibc "the bundle needs glibc $GLIBC_NEEDED, this machine has ${GLIBC:-?}: nothing of it loads (build it on an older Debian)" "$OUT/libraries.log"
elif [ -L "$WORK/lib-chosen/libstdc++.so.6" ] && [ -n "${FALLBACK_GLIBC_NEEDED:-}" ] &&
  ! version_ge "${GLIBC:-0}" "$FALLBACK_GLIBC_NEEDED"; then
  summary FAIL glibc "the machine's libstdc++ is too old and the bundle's needs glibc $FALLBACK_GLIBC_NEEDED (this machine: ${GLIBC:-?})" "$OUT/libraries.log"
else
  summary PASS glibc "glibc ${GLIBC:-?} >= ${GLIBC_NEEDED:-?}; $(grep -m1 '^libstdc' "$OUT/fallback-libs.txt" | cut -c1-90)" "$OUT/libraries.log"
fi
if missing_libs "$HERE/shoal" "$HERE/python/site" >> "$OUT/libraries.log"; then
  summary PASS libraries "every binary's shared libraries resolve" "$OUT/libraries.log"
else
  summary FAIL libraries "MISSING: $(grep -c 'not found' "$OUT/libraries.log") unresolved, e.g. $(grep -m1 'not found' "$OUT/libraries.log" | sed 's|.*/||' | cut -c1-100)" "$OUT/libraries.log"
  echo "!!! shared libraries missing; the checks that need them will fail:" >&2
  grep 'not found' "$OUT/libraries.log" | head -n 20 >&2
fi
if [ -n "$NCCL_DIR" ] || [ -n "$(system_lib libnccl.so.2)" ]; then
  summary PASS nccl_library "libnccl.so.2 in ${NCCL_DIR:-$(system_lib libnccl.so.2)}"
else
  summary FAIL nccl_library "libnccl.so.2 not found (system cache, Python site-packages nvidia/nccl/lib, /usr/local/cuda/lib64): NCCL checks will fail"
fi
if [ -n "$CUBLAS_DIR" ] || [ -n "$(system_lib "$CUBLAS")" ]; then
  summary PASS cublas_library "$CUBLAS in ${CUBLAS_DIR:-$(system_lib "$CUBLAS")}"
else
  summary FAIL cublas_library "$CUBLAS not found (system cache, /usr/local/cuda, Python site-packages nvidia/cu13/lib and nvidia/cublas/lib): the data-parallel example will not start"
fi
after_step

# ---- 3. is there a GPU? Room for the stores?
HAVE_GPU=0
WHY_NO_GPU=
[ "$SMI_RC" = 0 ] || WHY_NO_GPU="nvidia-smi failed ($(head -c 100 "$OUT/nvidia-smi-q.txt" | tr '\n' ' ')); "
if ls /dev/nvidia[0-9]* > /dev/null 2>&1 || ls /proc/driver/nvidia/gpus/* > /dev/null 2>&1; then
  HAVE_GPU=1
fi
# Tests only (tools/gpu_checks_test.sh): the checks' run, traps and packing
# on a machine without a GPU, with a made-up bundle.
[ "${SHOAL_GPU_CHECKS_PRETEND_GPU:-0}" = 1 ] && HAVE_GPU=1
if [ "$HAVE_GPU" = 0 ]; then
  summary FAIL gpu "NO GPU on this machine: ${WHY_NO_GPU}no /dev/nvidia<N>, no /proc/driver/nvidia/gpus entries" "$OUT/nvidia-smi-q.txt"
  echo "no GPU: the GPU checks were not run (exit 2)"
  exit 2
fi
NODES=$(ls -d /dev/nvidia[0-9]* 2>/dev/null | wc -l)
summary PASS gpu "$NODES /dev/nvidia<N> node(s); nvidia-smi -q in the log" "$OUT/nvidia-smi-q.txt"
SHM_FREE=$(shm_free_bytes)
SHM_FREE=${SHM_FREE:-0}
SHM_MIB=$((SHM_FREE >> 20))
STORE_SKIP=
if [ "$SHM_MIB" -lt 96 ]; then
  STORE_SKIP="only ${SHM_MIB} MiB free in /dev/shm; each store check needs a 64 MiB segment (docker: --shm-size=1g; or mount -o remount,size=1G /dev/shm)"
  summary FAIL shm "$STORE_SKIP"
else
  summary PASS shm "${SHM_MIB} MiB free in /dev/shm"
fi

# The tests' temporary folder: a fresh private one (mktemp -d, mode 0700),
# never the shared /tmp itself, where their file names could be made first.
export TEST_SRCDIR="$HERE" TEST_WORKSPACE=shoal TEST_TMPDIR
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
export SHOAL_BIN=$S
store_step() {  # store_step NAME COMMAND...: a step that needs a store
  if [ -n "$STORE_SKIP" ]; then
    summary SKIP "$1" "$STORE_SKIP"
    return 0
  fi
  step "$@"
}

# ---- 4. the checks, most evidence first.
STEP_LIMIT=30 step gpu_info_test "$HERE/shoal/gpu/gpu_info_test"
STEP_LIMIT=30 step device_pointer_test "$HERE/shoal/gpu/device_pointer_test"
# CUDA IPC across processes (a store, a producer, a consumer) and W1.
STEP_LIMIT=150 store_step gpu_store_test "$HERE/shoal/tests/gpu/gpu_store_test"
STEP_LIMIT=120 store_step bench_store_cuda "$S" bench store --device cuda --sizes 1M,64M,1G -n 5
# NCCL: loading, then the communicator's life cycle.
STEP_LIMIT=30 step nccl_api_test "$HERE/shoal/gpu/nccl_api_test"
STEP_LIMIT=90 step nccl_communicator_test "$HERE/shoal/collectives/nccl_communicator_test"
STEP_LIMIT=60 step nccl_duplicate_gpu "$HERE/run.sh" --check-duplicate-gpu
# Device pointers routed to NCCL by the Communicator; the NCCL benchmark.
STEP_LIMIT=90 step collectives_gpu "$HERE/shoal/tests/collectives/collectives_test" --gtest_filter='*Gpu*'
STEP_LIMIT=90 step bench_collective_nccl "$S" launch --nproc-per-node 1 -- "$S" bench collective --backend nccl -b 4K -e 256M -f 4
# The data-parallel example: the GPU loss curve against the CPU's, then
# samples/s.
STEP_LIMIT=150 step dp_test "$DP/data_parallel_test" --gtest_filter='DataParallelDeviceTest.*'
STEP_LIMIT=90 step w5_gpu_b64 "$DP/dp_bench" --device gpu --ranks 1 --batch 64
STEP_LIMIT=90 step w5_gpu_b1024 "$DP/dp_bench" --device gpu --ranks 1 --batch 1024
# DLPack: a CUDA object into torch on the consumer's stream; CPU objects.
STEP_LIMIT=120 store_step dlpack_cuda "$HERE/python_checks.sh" cuda
STEP_LIMIT=90 store_step dlpack_cpu "$HERE/python_checks.sh" cpu
STEP_LIMIT=120 step torch_backend_cuda "$HERE/python_checks.sh" torch

echo "---- $FAILS failed"
[ "$FAILS" -eq 0 ]
