#!/usr/bin/env bash
# Checks a built GPU bundle on this machine, without a GPU (tools/gpu_bundle
# runs it last; by hand: tools/gpu_bundle_test.sh [BUNDLE], default
# gpu-bundle):
#   - the bundle is under 60 MiB (SHOAL_BUNDLE_MAX_MIB), which the device
#     tool carries;
#   - every program a bundled binary names by its runfiles path is in it
#     (BIN: the opt build's bazel-bin, asked of Bazel when unset);
#   - a dry run of its run.sh ends within 30 s saying "no GPU" (exit 2), and
#     leaves in OUT exactly gpu-out.tgz and summary.txt; the tarball holds one
#     folder, gpu-out/, with summary.txt, environment.txt (the environment,
#     printed first: glibc, /dev/shm, nvidia-smi, python3, torch, NCCL,
#     cuBLAS), libraries.log and nvidia-smi-q.txt; the libraries and glibc
#     checks pass here.
# On a machine with a GPU the dry run is not a dry run: it says so and
# checks only the size and the programs.
set -u
cd "$(dirname "$0")/.."
# shellcheck source=tools/gpu_bundle_lib.sh
. tools/gpu_bundle_lib.sh
B=${1:-gpu-bundle}
MAX_MIB=${SHOAL_BUNDLE_MAX_MIB:-60}
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
[ -x "$B/run.sh" ] || { echo "no bundle at $B (make one with tools/gpu_bundle)"; exit 1; }

bytes=$(du -sb "$B" | cut -f1)
[ "$bytes" -lt $((MAX_MIB << 20)) ] ||
  fail "the bundle is $((bytes >> 20)) MiB, not under $MAX_MIB MiB"
echo "bundle: $((bytes >> 20)) MiB ($bytes bytes)"

BIN=${BIN:-$(bazel info --curses=no --config=opt bazel-bin 2>/dev/null)}
mapfile -t ELVES < <(find "$B/shoal" "$B/python" -type f -exec sh -c \
  'head -c 4 "$1" | grep -q ELF && echo "$1"' _ {} \; | sort)
[ "${#ELVES[@]}" -ge 10 ] || fail "only ${#ELVES[@]} ELF files in the bundle"
if ! missing=$(missing_execs "$B" "$BIN" "${ELVES[@]}"); then
  fail "programs the bundled binaries run are not in the bundle: $missing"
fi
for p in tools/shoal tools/shoal_lean tests/gpu/gpu_store_helper \
  tests/collectives/coll_probe examples/data_parallel/data_parallel; do
  [ -x "$B/shoal/$p" ] || fail "$p is not in the bundle"
done

if ls /dev/nvidia[0-9]* > /dev/null 2>&1 || ls /proc/driver/nvidia/gpus/* > /dev/null 2>&1; then
  echo "this machine has a GPU: no dry run (run $B/run.sh itself)"
else
  T=$(mktemp -d "${TMPDIR:-/tmp}/gpu_bundle_test.XXXXXX")
  trap 'rm -rf "$T"' EXIT
  t0=$(date +%s)
  OUT=$T/out BUDGET=60 timeout 120 bash "$B/run.sh" > "$T/run.txt" 2>&1
  rc=$?
  took=$(($(date +%s) - t0))
  [ "$rc" -eq 2 ] || fail "the dry run exited $rc, not 2"
  [ "$took" -le 30 ] || fail "the dry run took ${took}s"
  grep -q 'no GPU' "$T/run.txt" || fail "the dry run did not say 'no GPU'"
  [ "$(head -n 1 "$T/run.txt" | cut -c1-10)" = "gpu checks" ] ||
    fail "the environment is not printed first: $(head -n 1 "$T/run.txt")"
  ls_out=$(cd "$T/out" && ls -A | sort | tr '\n' ' ')
  [ "$ls_out" = "gpu-out.tgz summary.txt " ] ||
    fail "OUT holds '$ls_out', not 'gpu-out.tgz summary.txt'"
  mkdir -p "$T/x"
  tar xzf "$T/out/gpu-out.tgz" -C "$T/x" || fail "the tarball does not unpack"
  [ "$(ls -A "$T/x")" = gpu-out ] || fail "the tarball's top: $(ls -A "$T/x")"
  for f in summary.txt environment.txt libraries.log nvidia-smi-q.txt; do
    [ -s "$T/x/gpu-out/$f" ] || fail "no $f in the tarball"
  done
  cmp -s "$T/x/gpu-out/summary.txt" "$T/out/summary.txt" ||
    fail "summary.txt beside the tarball differs from the one in it"
  for w in 'ldd --version' 'df -h /dev/shm' 'nvidia-smi' 'python3' 'torch' \
    'libnccl.so.2' 'libcublas'; do
    grep -q -F "$w" "$T/x/gpu-out/environment.txt" ||
      fail "environment.txt does not mention $w"
  done
  for l in '^PASS +glibc ' '^PASS +libraries ' '^FAIL +gpu +NO GPU'; do
    grep -q -E "$l" "$T/out/summary.txt" ||
      fail "no summary line matches '$l': $(cat "$T/out/summary.txt")"
  done
  echo "dry run: exit $rc in ${took}s; tarball: $(tar tzf "$T/out/gpu-out.tgz" | tr '\n' ' ')"
fi
if [ "$failures" -eq 0 ]; then echo PASS; else echo "$failures failure(s)"; fi
[ "$failures" -eq 0 ]
