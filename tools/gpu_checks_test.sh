#!/usr/bin/env bash
# Tests of the GPU bundle's run.sh without a GPU: the library check catches a
# binary whose shared library is missing; a check past its limit, or one that
# would start after the overall deadline, is reported, not waited for; a GPU
# test skipped for want of a GPU fails on a machine with one; cuBLAS is found
# in both layouts of NVIDIA's Python packages (CUDA 13's nvidia/cu13/lib,
# CUDA 12's nvidia/cublas/lib); the machine's libstdc++ is taken when new
# enough; long logs are cut; and run.sh itself, on this machine, ends at once
# saying there is no GPU (or, with one, gets past that point), leaving in OUT
# only gpu-out.tgz and summary.txt, also when a glibc too old stops it or a
# signal stops it mid-check.
set -u
LIB=${TEST_SRCDIR:-.}/${TEST_WORKSPACE:-shoal}/tools/gpu_checks_lib.sh
RUN=${TEST_SRCDIR:-.}/${TEST_WORKSPACE:-shoal}/tools/gpu_checks.sh
PYC=${TEST_SRCDIR:-.}/${TEST_WORKSPACE:-shoal}/tools/gpu_python_checks.sh
[ -e "$LIB" ] || LIB=$(dirname "$0")/gpu_checks_lib.sh
[ -e "$RUN" ] || RUN=$(dirname "$0")/gpu_checks.sh
[ -e "$PYC" ] || PYC=$(dirname "$0")/gpu_python_checks.sh
T=$(mktemp -d "${TEST_TMPDIR:-/tmp}/gpu_checks_test.XXXXXX")
trap 'rm -rf "$T"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
expect_line() {  # expect_line REGEX: a summary line matches
  grep -q -E "$1" "$OUT/summary.txt" || fail "no summary line matches '$1':
$(cat "$OUT/summary.txt")"
}

OUT=$T/out
mkdir -p "$OUT"
: > "$OUT/summary.txt"
# shellcheck source=tools/gpu_checks_lib.sh
. "$LIB"

# --- the library check
mkdir -p "$T/bundle/bin"
if command -v cc > /dev/null; then
  echo 'int gone(void); int main(void) { return gone(); }' > "$T/main.c"
  echo 'int gone(void) { return 0; }' > "$T/gone.c"
  cc -shared -fPIC -o "$T/libshoalgone.so" "$T/gone.c" &&
    cc -o "$T/bundle/bin/needs_gone" "$T/main.c" -L"$T" -lshoalgone ||
    fail "cannot build the test binary"
  rm -f "$T/libshoalgone.so"
  cp /bin/true "$T/bundle/bin/fine"
  if missing=$(missing_libs "$T/bundle"); then
    fail "missing_libs passed a binary whose library is gone"
  fi
  grep -q 'needs_gone: libshoalgone.so => not found' <<< "$missing" ||
    fail "missing_libs did not name the binary and library: '$missing'"
  grep -q 'fine' <<< "$missing" && fail "missing_libs named a good binary"
  rm "$T/bundle/bin/needs_gone"
  missing_libs "$T/bundle" > /dev/null || fail "missing_libs failed good binaries"
else
  echo "no C compiler: the library check's negative case is not tested"
fi

# --- per-check limit and overall deadline
HAVE_GPU=0
STEP_LIMIT=1
MIN_STEP_S=2
DEADLINE=$(($(date +%s) + 4))
t0=$(date +%s)
step sleeper sleep 30
took=$(($(date +%s) - t0))
[ "$took" -le 8 ] || fail "a check ran ${took}s past its 1 s limit"
expect_line '^FAIL +sleeper +timed out after 1s'
step quick true
expect_line '^PASS +quick '
step broken sh -c 'echo "something error-ish: boom"; exit 3'
expect_line '^FAIL +broken +exit 3 after [0-9]+s: something error-ish: boom'
step cannot sh -c 'echo "no PyTorch with CUDA here"; exit 77'
expect_line '^SKIP +cannot +no PyTorch with CUDA here'
sleep 3  # now less than MIN_STEP_S is left before DEADLINE
step late true
expect_line '^SKIP +late +not started: -?[0-9]+s left before the overall deadline'
[ "$FAILS" -eq 2 ] || fail "FAILS is $FAILS, not 2"

# --- a GPU test skipped for want of a GPU
DEADLINE=$(($(date +%s) + 60))
STEP_LIMIT=10
cat > "$T/skipper" <<'SKIPPER'
#!/bin/sh
printf '%s\n' '[ RUN      ] A.B' 'x.cc:12: Skipped' \
  'no GPU: neither /proc/driver/nvidia/gpus nor /dev/nvidia<N> shows one' \
  '[  SKIPPED ] A.B (0 ms)'
SKIPPER
chmod +x "$T/skipper"
HAVE_GPU=1
step skip_with_gpu "$T/skipper"
expect_line '^FAIL +skip_with_gpu +skipped on a machine with a GPU: no GPU'
HAVE_GPU=0
step skip_without_gpu "$T/skipper"
expect_line '^PASS +skip_without_gpu +[0-9]+s, some tests skipped'

# --- small functions
version_ge 2.36 2.35 || fail "version_ge 2.36 2.35"
version_ge 3.4.30 3.4.30 || fail "version_ge 3.4.30 3.4.30"
version_ge 2.9 2.36 && fail "version_ge 2.9 2.36"
mkdir -p "$T/logs"
head -c 5000 /dev/zero | tr '\0' a > "$T/logs/big.log"
echo small > "$T/logs/small.log"
cut_logs "$T/logs" 1000
[ "$(stat -c %s "$T/logs/big.log")" -lt 1100 ] || fail "cut_logs left a big log"
grep -q '4000 bytes cut' "$T/logs/big.log" || fail "cut_logs did not say what it cut"
[ "$(cat "$T/logs/small.log")" = small ] || fail "cut_logs changed a small log"

# --- cuBLAS in both layouts of NVIDIA's Python packages (and NCCL)
mkdir -p "$T/py/a/nvidia/cu13/lib" "$T/py/b/nvidia/cublas/lib" "$T/py/b/nvidia/nccl/lib"
touch "$T/py/a/nvidia/cu13/lib/libcublas.so.13" "$T/py/b/nvidia/cublas/lib/libcublas.so.12" \
  "$T/py/b/nvidia/nccl/lib/libnccl.so.2"
PY_DIRS=$(printf '%s\n' "$T/py/none" "$T/py/a" "$T/py/b")
[ "$(find_in_python libcublas.so.13 nvidia/cu13/lib nvidia/cublas/lib)" = "$T/py/a/nvidia/cu13/lib" ] ||
  fail "CUDA 13's nvidia/cu13/lib layout not found"
[ "$(find_in_python libcublas.so.12 nvidia/cu13/lib nvidia/cublas/lib)" = "$T/py/b/nvidia/cublas/lib" ] ||
  fail "CUDA 12's nvidia/cublas/lib layout not found"
[ "$(find_in_python libnccl.so.2 nvidia/nccl/lib)" = "$T/py/b/nvidia/nccl/lib" ] ||
  fail "NCCL's nvidia/nccl/lib not found"
find_in_python libabsent.so.1 nvidia/cu13/lib > /dev/null && fail "found an absent library"

# --- the machine's libstdc++ when new enough, else the bundle's
SYS_STDCXX=$(system_lib libstdc++.so.6)
if [ -n "$SYS_STDCXX" ]; then
  mkdir -p "$T/fallback"
  cp "$SYS_STDCXX" "$T/fallback/libstdc++.so.6"
  have=$(defined_version "$SYS_STDCXX" GLIBCXX)
  GLIBCXX_NEEDED=3.4.20 CXXABI_NEEDED=1.3 choose_fallback_libs "$T/fallback" "$T/chosen1" > "$T/c1"
  [ -e "$T/chosen1/libstdc++.so.6" ] && fail "took the bundle's libstdc++ over a new enough one: $(cat "$T/c1")"
  grep -q "the machine's $SYS_STDCXX (GLIBCXX $have" "$T/c1" || fail "did not say which libstdc++: $(cat "$T/c1")"
  GLIBCXX_NEEDED=3.4.999 CXXABI_NEEDED=1.3 choose_fallback_libs "$T/fallback" "$T/chosen2" > "$T/c2"
  [ -L "$T/chosen2/libstdc++.so.6" ] || fail "kept a libstdc++ too old: $(cat "$T/c2")"
  grep -q "the bundle's (the machine's .* has GLIBCXX $have" "$T/c2" || fail "did not say why: $(cat "$T/c2")"
fi

# --- run.sh on this machine: quick, and clear about a missing GPU.
# A made-up bundle: run.sh, its lib, one program whose library is there.
B=$T/run_bundle
mkdir -p "$B/shoal/tools" "$B/lib/fallback"
cp "$RUN" "$B/run.sh"
cp "$LIB" "$B/gpu_checks_lib.sh"
cp /bin/true "$B/shoal/tools/shoal"
printf 'GLIBC_NEEDED=2.2.5\nGLIBCXX_NEEDED=\nCXXABI_NEEDED=\nFALLBACK_GLIBC_NEEDED=\n' > "$B/lib/needs.env"
HAS_GPU=0
if ls /dev/nvidia[0-9]* > /dev/null 2>&1 ||
  ls /proc/driver/nvidia/gpus/* > /dev/null 2>&1; then
  HAS_GPU=1
fi
t0=$(date +%s)
OUT=$T/run_out BUDGET=30 STEP_LIMIT=5 timeout 60 bash "$B/run.sh" > "$T/run.txt" 2>&1
rc=$?
took=$(($(date +%s) - t0))
OUT=$T/run_out
if [ "$HAS_GPU" = 1 ]; then
  expect_line '^PASS +gpu '
else
  [ "$rc" -eq 2 ] || fail "run.sh without a GPU exited $rc, not 2: $(cat "$T/run.txt")"
  [ "$took" -le 20 ] || fail "run.sh without a GPU took ${took}s"
  expect_line '^PASS +glibc '
  expect_line '^PASS +libraries '
  expect_line '^FAIL +gpu +NO GPU on this machine'
  grep -q '^no GPU' "$T/run.txt" || fail "run.sh did not say 'no GPU'"
fi
[ "$(head -n 1 "$T/run.txt" | cut -c1-10)" = "gpu checks" ] ||
  fail "run.sh did not print the environment first: $(head -n 2 "$T/run.txt")"
[ "$(cd "$OUT" && ls -A | sort | tr '\n' ' ')" = "gpu-out.tgz summary.txt " ] ||
  fail "OUT holds $(ls -A "$OUT" | tr '\n' ' ')"
tar tzf "$OUT/gpu-out.tgz" > "$T/tgz.txt" || fail "no tarball"
for f in summary.txt environment.txt libraries.log nvidia-smi-q.txt; do
  grep -q -x "gpu-out/$f" "$T/tgz.txt" || fail "gpu-out/$f not in the tarball: $(cat "$T/tgz.txt")"
done

# --- a glibc older than the bundle needs: said first, plainly.
printf 'GLIBC_NEEDED=9.99\n' > "$B/lib/needs.env"
OUT=$T/old_glibc BUDGET=30 timeout 60 bash "$B/run.sh" > "$T/old.txt" 2>&1
OUT=$T/old_glibc
expect_line '^FAIL +glibc +the bundle needs glibc 9.99, this machine has [0-9.]+: nothing of it loads'
[ -s "$OUT/gpu-out.tgz" ] || fail "no tarball after a glibc failure"

# --- stopped by a signal in the middle of a check: the tarball and the
# summary say so. (A made-up GPU and a first check that hangs.)
printf 'GLIBC_NEEDED=2.2.5\n' > "$B/lib/needs.env"
mkdir -p "$B/shoal/gpu"
printf '#!/bin/sh\necho started; exec sleep 60\n' > "$B/shoal/gpu/gpu_info_test"
chmod +x "$B/shoal/gpu/gpu_info_test"
OUT=$T/stopped SHOAL_GPU_CHECKS_PRETEND_GPU=1 BUDGET=100 \
  setsid bash "$B/run.sh" > "$T/stopped.txt" 2>&1 &
pid=$!
for _ in $(seq 200); do  # the first check started
  grep -q -E '^(PASS|FAIL) +shm ' "$T/stopped.txt" 2> /dev/null && break
  sleep 0.1
done
sleep 1
t0=$(date +%s)
kill -TERM -- -"$pid" 2> /dev/null
wait "$pid"
rc=$?
took=$(($(date +%s) - t0))
OUT=$T/stopped
[ "$rc" -eq 143 ] || fail "run.sh stopped by SIGTERM exited $rc, not 143: $(tail -n 5 "$T/stopped.txt")"
[ "$took" -le 10 ] || fail "run.sh took ${took}s to stop"
expect_line '^FAIL +stopped +run.sh got SIGTERM'
expect_line '^FAIL +gpu_info_test '
tar xzOf "$OUT/gpu-out.tgz" gpu-out/summary.txt 2> /dev/null | grep -q -E '^FAIL +stopped' ||
  fail "the tarball's summary does not say run.sh was stopped"
tar xzOf "$OUT/gpu-out.tgz" gpu-out/gpu_info_test.log 2> /dev/null | grep -q started ||
  fail "the stopped check's log is not in the tarball"

# --- python_checks.sh: a SKIP (77) that says why, when it cannot run here.
P=$T/py_bundle
mkdir -p "$P/python/site/shoal"
cp "$PYC" "$P/python_checks.sh"
touch "$P/python/site/shoal/_shoal.so"
echo 0.1 > "$P/python/PYTHON_VERSION"
out=$(bash "$P/python_checks.sh" cuda 2>&1)
rc=$?
[ "$rc" -eq 77 ] || fail "python_checks.sh for another Python exited $rc, not 77: $out"
grep -q 'the extension is built for Python 0.1, this machine' <<< "$out" ||
  fail "python_checks.sh did not say why: $out"
if command -v python3 > /dev/null; then
  python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])' > "$P/python/PYTHON_VERSION"
  out=$(bash "$P/python_checks.sh" torch 2>&1)
  rc=$?
  [ "$rc" -eq 77 ] || fail "python_checks.sh torch without a torch 2.x extension exited $rc: $out"
  grep -q 'no torch backend extension built against torch 2.x in the bundle' <<< "$out" ||
    fail "python_checks.sh torch did not say why: $out"
fi

if [ "$failures" -eq 0 ]; then echo PASS; else echo "$failures failure(s)"; fi
[ "$failures" -eq 0 ]
