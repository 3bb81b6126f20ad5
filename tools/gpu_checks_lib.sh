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

# summary STATUS NAME REASON [LOG]: LOG is shown relative to LOG_BASE when
# it is below it (run.sh's logs live in a temporary folder until packed).
summary() {
  local line log=${4:-}
  [ -n "${LOG_BASE:-}" ] && log=${log#"$LOG_BASE"/}
  line=$(printf '%-4s  %-24s %s%s' "$1" "$2" "$3" "${log:+   [$log]}")
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
# SKIP, with the log's last line as the reason. Then calls after_step, when
# the caller defines one (run.sh packs the logs there).
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
  # In the background, then `wait`: a signal's trap runs at once (a
  # foreground command would delay it to the command's end), and it finds
  # the check in STEP_NAME, STEP_PID, STEP_LOG and STEP_T0 (stop_step).
  timeout -k 5 "$limit" "$@" >> "$log" 2>&1 &
  STEP_NAME=$name STEP_PID=$! STEP_LOG=$log STEP_T0=$t0
  wait "$STEP_PID"
  rc=$?
  STEP_NAME= STEP_PID=
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
  if declare -F after_step > /dev/null; then after_step; fi
  return 0
}

# stop_step SIGNAL: for a trap: ends the check in progress, if any (its
# timeout passes the signal on to it), and writes its summary line.
stop_step() {
  [ -n "${STEP_PID:-}" ] || return 0
  kill -TERM "$STEP_PID" 2> /dev/null
  wait "$STEP_PID" 2> /dev/null
  summary FAIL "$STEP_NAME" "stopped by SIG$1 after $(($(date +%s) - STEP_T0))s" "$STEP_LOG"
  STEP_NAME= STEP_PID=
}

# version_ge A B: whether version A >= version B (sort -V order).
version_ge() {
  [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | tail -n 1)" = "$1" ]
}

# The folder holding LIB (a file name such as libcublas.so.13) under one of
# the SUBDIRs (nvidia/cu13/lib ...) of a Python import path, in order: every
# SUBDIR in the first path entry, then the next entry. PY_DIRS: the entries,
# one a line.
#   find_in_python libcublas.so.13 nvidia/cu13/lib nvidia/cublas/lib
find_in_python() {
  local lib=$1 d sub
  shift
  while IFS= read -r d; do
    [ -n "$d" ] || continue
    for sub in "$@"; do
      [ -e "$d/$sub/$lib" ] && { echo "$d/$sub"; return 0; }
    done
  done <<< "${PY_DIRS:-}"
  return 1
}

# The path of SONAME in the system's library cache (ldconfig -p), x86-64.
system_lib() {
  local lc
  lc=$(command -v ldconfig || command -v /sbin/ldconfig || echo /usr/sbin/ldconfig)
  "$lc" -p 2>/dev/null | awk -v n="$1" '$1 == n && /x86-64/ {print $NF; exit}'
}

# The highest PREFIX_x.y.z version a shared library defines (GLIBCXX 3.4.30
# for GCC 12's libstdc++), or nothing.
defined_version() {
  strings "$1" 2>/dev/null | grep -E "^$2_[0-9][0-9.]*$" | sed "s/^$2_//" |
    sort -V | tail -n 1
}

# choose_fallback_libs FALLBACK CHOSEN: for each library in FALLBACK (the
# bundle's libstdc++ and libexpat), the machine's own copy when it has one
# that is new enough (libstdc++: defining GLIBCXX_NEEDED and CXXABI_NEEDED),
# else a link to the bundle's in CHOSEN (a folder for LD_LIBRARY_PATH). One
# line per library says which was chosen and why.
choose_fallback_libs() {
  local fallback=$1 chosen=$2 f name sys have abi
  mkdir -p "$chosen"
  for f in "$fallback"/*.so*; do
    [ -e "$f" ] || continue
    name=$(basename "$f")
    sys=$(system_lib "$name")
    if [ -z "$sys" ]; then
      ln -sf "$f" "$chosen/$name"
      echo "$name: the bundle's (the machine has none)"
      continue
    fi
    case "$name" in
      libstdc++.so.*)
        have=$(defined_version "$sys" GLIBCXX)
        abi=$(defined_version "$sys" CXXABI)
        if version_ge "${have:-0}" "${GLIBCXX_NEEDED:-0}" &&
          version_ge "${abi:-0}" "${CXXABI_NEEDED:-0}"; then
          echo "$name: the machine's $sys (GLIBCXX $have, CXXABI $abi; needed ${GLIBCXX_NEEDED:-none}, ${CXXABI_NEEDED:-none})"
        else
          ln -sf "$f" "$chosen/$name"
          echo "$name: the bundle's (the machine's $sys has GLIBCXX ${have:-?}, CXXABI ${abi:-?}; needed ${GLIBCXX_NEEDED:-none}, ${CXXABI_NEEDED:-none})"
        fi
        ;;
      *) echo "$name: the machine's $sys" ;;
    esac
  done
}

# The glibc version of this machine ("2.36"), from ldd --version.
glibc_version() {
  ldd --version 2>&1 | head -n 1 | grep -o -E '[0-9]+\.[0-9]+$'
}

# Bytes free in /dev/shm (where every store's segment lives).
shm_free_bytes() {
  df -B1 --output=avail /dev/shm 2>/dev/null | tail -n 1 | tr -d ' '
}

# cut_logs DIR MAX: every file in DIR larger than MAX bytes keeps its first
# and last MAX/2 bytes, with a line saying how much was cut between.
cut_logs() {
  local f size half
  for f in "$1"/*; do
    [ -f "$f" ] || continue
    size=$(stat -c %s "$f")
    [ "$size" -gt "$2" ] || continue
    half=$(($2 / 2))
    { head -c "$half" "$f"
      printf '\n[... %d bytes cut by run.sh ...]\n' $((size - 2 * half))
      tail -c "$half" "$f"; } > "$f.cut" && mv "$f.cut" "$f"
  done
}
