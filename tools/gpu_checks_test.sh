#!/usr/bin/env bash
# Tests of the GPU bundle's run.sh without a GPU: the library check catches a
# binary whose shared library is missing; a check past its limit, or one that
# would start after the overall deadline, is reported, not waited for; a GPU
# test skipped for want of a GPU fails on a machine with one; and run.sh
# itself, on this machine, ends at once saying there is no GPU (or, with one,
# gets past that point).
set -u
LIB=${TEST_SRCDIR:-.}/${TEST_WORKSPACE:-shoal}/tools/gpu_checks_lib.sh
RUN=${TEST_SRCDIR:-.}/${TEST_WORKSPACE:-shoal}/tools/gpu_checks.sh
[ -e "$LIB" ] || LIB=$(dirname "$0")/gpu_checks_lib.sh
[ -e "$RUN" ] || RUN=$(dirname "$0")/gpu_checks.sh
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

# --- run.sh on this machine: quick, and clear about a missing GPU.
B=$T/run_bundle
mkdir -p "$B/shoal" "$B/lib"
cp "$RUN" "$B/run.sh"
cp "$LIB" "$B/gpu_checks_lib.sh"
t0=$(date +%s)
OUT=$T/run_out BUDGET=30 STEP_LIMIT=5 timeout 60 bash "$B/run.sh" > "$T/run.txt" 2>&1
rc=$?
took=$(($(date +%s) - t0))
OUT=$T/run_out
if ls /dev/nvidia[0-9]* > /dev/null 2>&1 ||
  ls /proc/driver/nvidia/gpus/* > /dev/null 2>&1; then
  expect_line '^PASS +gpu '
else
  [ "$rc" -eq 2 ] || fail "run.sh without a GPU exited $rc, not 2: $(cat "$T/run.txt")"
  [ "$took" -le 20 ] || fail "run.sh without a GPU took ${took}s"
  expect_line '^PASS +libraries '
  expect_line '^FAIL +gpu +NO GPU on this machine'
fi

if [ "$failures" -eq 0 ]; then echo PASS; else echo "$failures failure(s)"; fi
[ "$failures" -eq 0 ]
