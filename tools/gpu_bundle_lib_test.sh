#!/usr/bin/env bash
# Tests of tools/gpu_bundle's functions (tools/gpu_bundle_lib.sh) on a small
# made-up build, without Bazel or a GPU: a runfiles tree is copied with its
# links followed and Bazel's MANIFEST left out; a binary that names a built
# program by its runfiles path (as a test naming tools/shoal_lean does) is
# caught when that program is missing from the bundle, and passes once it is
# there; the glibc and libstdc++ versions a binary needs are read from it.
set -u
LIB=${TEST_SRCDIR:-.}/${TEST_WORKSPACE:-shoal}/tools/gpu_bundle_lib.sh
[ -e "$LIB" ] || LIB=$(dirname "$0")/gpu_bundle_lib.sh
# shellcheck source=tools/gpu_bundle_lib.sh
. "$LIB"
T=$(mktemp -d "${TEST_TMPDIR:-/tmp}/gpu_bundle_lib_test.XXXXXX")
trap 'rm -rf "$T"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
if ! command -v cc > /dev/null; then
  echo "no C compiler: nothing tested"
  exit 0
fi

# A made-up bazel-bin: a test that runs tools/helper_prog (by its runfiles
# path), the helper, and a library file that is not a program.
BIN=$T/bin
mkdir -p "$BIN/tests/x" "$BIN/tools" "$BIN/base"
cat > "$T/test.c" << 'EOF'
#include <stdio.h>
const char* kHelper = "tools/helper_prog";
const char* kNotBuilt = "tools/never_built";
int main(void) { puts(kHelper); puts(kNotBuilt); return 0; }
EOF
cc -O0 -o "$BIN/tests/x/a_test" "$T/test.c" || fail "cannot build the test"
cp /bin/true "$BIN/tools/helper_prog"
echo 'not a program' > "$BIN/base/libthing.a"

# Its runfiles tree: links into bazel-bin, and Bazel's MANIFEST.
R=$BIN/tests/x/a_test.runfiles
mkdir -p "$R/shoal/tests/x" "$R/shoal/tools"
ln -s "$BIN/tests/x/a_test" "$R/shoal/tests/x/a_test"
ln -s "$BIN/tools/helper_prog" "$R/shoal/tools/helper_prog"
echo "shoal/tests/x/a_test $BIN/tests/x/a_test" > "$R/MANIFEST"

# --- copy_runfiles
B=$T/bundle
copy_runfiles "$R" "$B" || fail "copy_runfiles failed"
[ -f "$B/shoal/tests/x/a_test" ] && [ ! -L "$B/shoal/tests/x/a_test" ] ||
  fail "the test was not copied as a file"
[ -x "$B/shoal/tools/helper_prog" ] || fail "the helper was not copied"
[ -e "$B/MANIFEST" ] && fail "Bazel's MANIFEST was copied"
copy_runfiles "$R" "$B" || fail "copying the same tree twice failed"
copy_runfiles "$T/none.runfiles" "$B" 2> /dev/null && fail "a missing tree passed"

# --- missing_execs: present now; caught once the helper is gone.
missing_execs "$B" "$BIN" "$B/shoal/tests/x/a_test" > "$T/m1" ||
  fail "missing_execs failed a complete bundle: $(cat "$T/m1")"
rm "$B/shoal/tools/helper_prog"
if missing_execs "$B" "$BIN" "$B/shoal/tests/x/a_test" > "$T/m2"; then
  fail "missing_execs passed a bundle without the helper"
fi
grep -q -x 'shoal/tests/x/a_test: tools/helper_prog' "$T/m2" ||
  fail "missing_execs did not name the binary and the program: '$(cat "$T/m2")'"
grep -q never_built "$T/m2" && fail "missing_execs named a program Bazel never built"

# --- max_symbol_version
v=$(max_symbol_version GLIBC "$BIN/tests/x/a_test")
[[ "$v" =~ ^2\.[0-9.]+$ ]] || fail "no GLIBC version read from a binary: '$v'"
cat > "$T/cxx.cc" << 'EOF'
#include <string>
#include <iostream>
int main() { std::string s = "x"; std::cout << s << std::endl; return 0; }
EOF
if command -v c++ > /dev/null && c++ -o "$T/cxx" "$T/cxx.cc" 2> /dev/null; then
  v=$(max_symbol_version GLIBCXX "$T/cxx")
  [[ "$v" =~ ^3\.4(\.[0-9]+)?$ ]] || fail "no GLIBCXX version read: '$v'"
fi
[ -z "$(max_symbol_version GLIBCXX "$BIN/tests/x/a_test")" ] ||
  fail "a C program needs no libstdc++"

if [ "$failures" -eq 0 ]; then echo PASS; else echo "$failures failure(s)"; fi
[ "$failures" -eq 0 ]
