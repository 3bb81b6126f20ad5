# shellcheck shell=bash
# Functions of tools/gpu_bundle, sourced by it and by
# tools/gpu_bundle_lib_test.sh: what goes into the bundle is derived from
# Bazel's runfiles trees, and what the bundle needs from the GPU machine
# (glibc, libstdc++) is read from its binaries.

# copy_runfiles RUNFILES DEST: every file of a Bazel runfiles tree
# (<binary>.runfiles/, links followed) into DEST, keeping the paths below the
# tree (shoal/tools/shoal, ...); Bazel's own MANIFEST and _repo_mapping are
# left out. Files already in DEST are overwritten (two tests' runfiles name
# the same built file).
copy_runfiles() {
  local src=$1 dest=$2 rel
  [ -d "$src" ] || { echo "copy_runfiles: no runfiles tree at $src" >&2; return 1; }
  while IFS= read -r rel; do
    rel=${rel#./}
    case "$rel" in MANIFEST | _repo_mapping) continue ;; esac
    mkdir -p "$dest/$(dirname "$rel")"
    cp -fL "$src/$rel" "$dest/$rel" || return 1
    chmod u+w "$dest/$rel"
  done < <(cd "$src" && find . \( -type f -o -type l \) | sort)
}

# missing_execs BUNDLE BIN FILE...: the built programs each FILE names
# (a runfiles path such as "tools/shoal_lean" in its strings, which is how a
# test finds what it execs: testing::RunfilePath) that are not in the bundle:
# a name counts when BIN/<name> is an executable file Bazel built, and it is
# missing when BUNDLE/shoal/<name> is not there. One "FILE: NAME" line each;
# status 1 when there is one.
missing_execs() {
  local bundle=$1 bin=$2 f name bad=0
  shift 2
  for f in "$@"; do
    while IFS= read -r name; do
      [ -f "$bin/$name" ] && [ -x "$bin/$name" ] || continue
      [ -e "$bundle/shoal/$name" ] && continue
      echo "${f#"$bundle"/}: $name"
      bad=1
    done < <(strings -n 5 "$f" | grep -E '^[a-z_][A-Za-z0-9_]*(/[A-Za-z0-9_.-]+)+$' |
      sort -u)
  done
  return $bad
}

# max_symbol_version PREFIX FILE...: the highest PREFIX_x.y[.z] symbol
# version the ELF files need (the references in objdump's dynamic symbol
# table, "(GLIBC_2.34)", "(GLIBCXX_3.4.30)"), or nothing when none does.
max_symbol_version() {
  local prefix=$1
  shift
  objdump -T "$@" 2>/dev/null | grep -o -E "\(${prefix}_[0-9][0-9.]*\)" |
    tr -d '()' | sed "s/^${prefix}_//" | sort -uV | tail -n 1
}
