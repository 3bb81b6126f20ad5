#!/usr/bin/env bash
# The Python GPU path of a gpu-bundle (run by its run.sh as python_checks.sh):
# the shoal package built here (python/site), imported by the GPU machine's
# own Python and PyTorch (it has no network: nothing is installed). Exits 77,
# saying why, when it cannot run: another Python minor version than the
# extension was built for, no PyTorch, PyTorch without CUDA, no pytest.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
SITE=$HERE/python/site
[ -e "$SITE/shoal/_shoal.so" ] || { echo "no python/site in the bundle"; exit 77; }
built=$(cat "$HERE/python/PYTHON_VERSION" 2>/dev/null)
have=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
if [ "$built" != "$have" ]; then
  echo "the extension is built for Python ${built:-?}, this machine's python3 is ${have:-missing}"
  exit 77
fi
python3 - <<'PY' || exit $?
import sys
try:
    import torch
except ImportError as e:
    print("no PyTorch here:", e); sys.exit(77)
if not torch.cuda.is_available():
    print("PyTorch", torch.__version__, "sees no CUDA device"); sys.exit(77)
print("PyTorch", torch.__version__, "CUDA", torch.version.cuda, torch.cuda.get_device_name(0))
PY
python3 -c 'import pytest' 2>/dev/null || { echo "no pytest here"; exit 77; }
cd "$HERE/python" || exit 1
PYTHONPATH=$SITE:$HERE/python/tests python3 -m pytest -x -q tests/test_dlpack.py
