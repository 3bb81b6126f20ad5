#!/usr/bin/env bash
# torch's own distributed suite against "shoal", gloo as the reference, with
# torch 2.x from PyPI (docs/torch.md "torch's distributed suite"):
#
#   tests/torch/suite.sh [--world-size N] [-k EXPR] [--out DIR] [--strict]
#
# 1. tests/torch/venv.sh: the venv .venv/torch2-py<X.Y> (made once; a few GB);
# 2. the shoal package built against that venv's python and torch, in a Bazel
#    output base of its own (SHOAL_TORCH2_OUTPUT_BASE, default
#    ~/.cache/shoal-bazel-torch2) so that the main one's outputs stay built
#    for Debian's interpreter; no bazel-* links are made;
# 3. tests/torch/distributed_suite.py with the venv's python (its arguments
#    are this script's).
# SHOAL_SUITE_PYTHON=/usr/bin/python3 runs it with Debian's torch 1.13 and
# the main output base instead (tools/test's subset); the suite's test
# utilities import expecttest, which Debian does not package: its wheel
# (pure Python, imported from the .whl file) is downloaded once into
# .venv/wheels.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
flags=(--curses=no --color=no --show_progress_rate_limit=60)
if [ "${SHOAL_SUITE_PYTHON:-}" = /usr/bin/python3 ]; then
  python=/usr/bin/python3
  bazel=(bazel)
  if ! "$python" -c 'import expecttest' 2>/dev/null; then
    wheel=("$root"/.venv/wheels/expecttest-*-py3-none-any.whl)
    if [ ! -f "${wheel[0]}" ]; then
      mkdir -p "$root/.venv/wheels"
      "$python" -m pip download --disable-pip-version-check --quiet \
        --no-deps --only-binary=:all: -d "$root/.venv/wheels" expecttest
      wheel=("$root"/.venv/wheels/expecttest-*-py3-none-any.whl)
    fi
    export PYTHONPATH="${wheel[0]}${PYTHONPATH:+:$PYTHONPATH}"
  fi
else
  venv="$(tests/torch/venv.sh "${SHOAL_SUITE_PYTHON:-/usr/bin/python3}")"
  python="$venv/bin/python"
  bazel=(bazel "--output_base=${SHOAL_TORCH2_OUTPUT_BASE:-$HOME/.cache/shoal-bazel-torch2}")
  flags+=("--repo_env=SHOAL_PYTHON=$python" --symlink_prefix=/)
fi
"${bazel[@]}" build "${flags[@]}" //python:site //tools:shoal
bin="$("${bazel[@]}" info "${flags[@]}" bazel-bin 2>/dev/null)"
[ -f "$bin/python/site/shoal/_shoal_torch.so" ] || {
  echo "tests/torch/suite.sh: no $bin/python/site/shoal/_shoal_torch.so" \
    "(has $python torch?)" >&2
  exit 1
}
SHOAL_BIN="$bin/tools/shoal" exec "$python" tests/torch/distributed_suite.py \
  --site "$bin/python/site" "$@"
