#!/usr/bin/env bash
# Makes (once) and prints the path of a virtualenv with torch 2.x from PyPI,
# for building and testing the "shoal" torch.distributed backend against it:
#
#   venv="$(tests/torch/venv.sh [PYTHON])"      # default: /usr/bin/python3
#
# The venv is <repo>/.venv/torch2-py<X.Y> (git ignores .venv/), made with
# PYTHON -m venv (no --system-site-packages), holding the newest torch PyPI
# serves for that interpreter (with the nvidia-* wheels it needs to import),
# numpy, pytest and expecttest (torch.testing's suite imports it). A venv
# whose last install finished (the file .shoal-ready) is reused as it is;
# SHOAL_TORCH_VENV_REFRESH=1 makes it anew. Progress goes to stderr; stdout
# is the venv's path alone.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
python="${1:-/usr/bin/python3}"
ver="$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
venv="$root/.venv/torch2-py$ver"
if [ "${SHOAL_TORCH_VENV_REFRESH:-0}" = 1 ]; then rm -rf "$venv"; fi
if [ ! -f "$venv/.shoal-ready" ]; then
  rm -rf "$venv"
  mkdir -p "$root/.venv"
  echo "tests/torch/venv.sh: making $venv (torch from PyPI: a few GB)" >&2
  "$python" -m venv "$venv" >&2
  "$venv/bin/pip" install --disable-pip-version-check --quiet \
    --upgrade pip >&2
  "$venv/bin/pip" install --disable-pip-version-check --quiet \
    torch numpy pytest expecttest >&2
  "$venv/bin/python" -c 'import torch; print("tests/torch/venv.sh: torch",
    torch.__version__, "at", torch.__file__)' >&2
  touch "$venv/.shoal-ready"
fi
echo "$venv"
