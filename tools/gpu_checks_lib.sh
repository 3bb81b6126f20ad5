# shellcheck shell=bash
# Functions of the GPU bundle's run.sh (tools/gpu_checks.sh), sourced by it and
# by tools/gpu_checks_test.sh. Each check is one line of $OUT/summary.txt:
#   PASS|FAIL|SKIP  name  reason  [log path]
# Callers set OUT (the log folder), DEADLINE (epoch seconds by which every
# check must have finished), STEP_LIMIT (seconds one check may take) and
# HAVE_GPU (1 when this machine shows a GPU).

FAILS=0
# A check is not started with less time than this left before DEADLINE.
MIN_STEP_S=${MIN_STEP_S:-15}

# summary STATUS NAME REASON [LOG]
summary() {
  local line
  line=$(printf '%-4s  %-24s %s%s' "$1" "$2" "$3" "${4:+   [$4]}")
  echo "$line" >> "$OUT/summary.txt"
  echo "$line"
  [ "$1" = FAIL ] && FAILS=$((FAILS + 1))
  return 0
}

# Executables under the given folders whose shared libraries do not all
# resolve with the current LD_LIBRARY_PATH, one "FILE: LIB => not found" line
# each. Status 1 when there is one.
missing_libs() {
  local f bad=0 out
  while IFS= read -r f; do
    head -c 4 "$f" 2>/dev/null | grep -q 'ELF' || continue
    out=$(ldd "$f" 2>&1 | grep 'not found') || continue
    while IFS= read -r l; do echo "$f: ${l#"${l%%[![:space:]]*}"}"; done <<< "$out"
    bad=1
  done < <(find "$@" -type f -perm -u+x 2>/dev/null | sort)
  return $bad
}

# The first line of a log that says what went wrong, shortened (after the two
# lines step writes first: the command and its limit).
first_error() {
  local l
  l=$(tail -n +3 "$1" |
    grep -m1 -E 'error|Error|Failure|FAILED|not found|Aborted|Segmentation')
  [ -n "$l" ] || l=$(tail -n 1 "$1")
  echo "${l:0:160}"
}

# A gtest skip whose reason says the GPU, CUDA or NCCL was missing: on a
# machine with a GPU that is a failure, not a pass. Prints the reason.
skipped_for_missing_gpu() {
  grep -A1 -E ': Skipped$' "$1" |
    grep -m1 -i -E 'no GPU|without CUDA|no NCCL|cannot load NCCL|CudaDeviceCount|no CUDA'
}

# step NAME COMMAND...: runs COMMAND with its output in $OUT/NAME.log, under
# STEP_LIMIT and what is left before DEADLINE, and writes its summary line.
# Exit status 77 (as in Automake) means the check cannot run on this machine:
# SKIP, with the log's last line as the reason.
step() {
  local name=$1 log="$OUT/$1.log"
  shift
  local left=$((DEADLINE - $(date +%s)))
  if [ "$left" -lt "$MIN_STEP_S" ]; then
    summary SKIP "$name" "not started: ${left}s left before the overall deadline"
    return 0
  fi
  local limit=$((left < STEP_LIMIT ? left : STEP_LIMIT))
  printf '$ %s\n(limit %ss)\n' "$*" "$limit" > "$log"
  local t0 rc took why
  t0=$(date +%s)
  timeout -k 5 "$limit" "$@" >> "$log" 2>&1
  rc=$?
  took=$(($(date +%s) - t0))
  if [ "$rc" -eq 77 ]; then  # the check's own "cannot run here"
    summary SKIP "$name" "$(tail -n 1 "$log" | cut -c1-160)" "$log"
  elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    summary FAIL "$name" "timed out after ${limit}s" "$log"
  elif [ "$rc" -ne 0 ]; then
    summary FAIL "$name" "exit $rc after ${took}s: $(first_error "$log")" "$log"
  elif [ "${HAVE_GPU:-0}" = 1 ] && why=$(skipped_for_missing_gpu "$log"); then
    summary FAIL "$name" "skipped on a machine with a GPU: ${why:0:120}" "$log"
  elif grep -q '^\[  SKIPPED \]' "$log"; then
    summary PASS "$name" "${took}s, some tests skipped (see log)" "$log"
  else
    summary PASS "$name" "${took}s" "$log"
  fi
}
