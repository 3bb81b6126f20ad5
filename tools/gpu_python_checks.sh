#!/usr/bin/env bash
# The Python GPU paths of a gpu-bundle (its python_checks.sh, run by run.sh):
# the shoal package built for the GPU machine's Python (python/site),
# imported by that machine's own Python and PyTorch (it has no network:
# nothing is installed). One mode per call:
#
#   python_checks.sh cuda    a CUDA object through the store into torch with
#                            no copy, on the consumer's stream
#                            (dlpack_cuda_check.py, one rank of shoal launch)
#   python_checks.sh cpu     python/tests/test_dlpack.py (CPU objects into
#                            torch and numpy), with pytest, as one rank of
#                            shoal launch (its task tests left out)
#   python_checks.sh torch   torch.distributed's "shoal" backend on CUDA
#                            tensors (torch_cuda_check.py), when the bundle
#                            has a torch extension built against torch 2.x
#
# Exits 77 (a SKIP for run.sh), saying why, when the mode cannot run here:
# another Python minor version than the extension's, no PyTorch, PyTorch
# without CUDA, no pytest (cpu), no torch 2.x extension in the bundle (torch).
# Environment: SHOAL_BIN (the bundle's shoal), LD_LIBRARY_PATH with the
# bundle's libraries (run.sh sets both), NPROC for torch (default 1).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
MODE=${1:-cuda}
SITE=$HERE/python/site
[ -e "$SITE/shoal/_shoal.so" ] || { echo "no python/site in the bundle"; exit 77; }
built=$(cat "$HERE/python/PYTHON_VERSION" 2>/dev/null)
have=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
if [ "$built" != "$have" ]; then
  echo "the extension is built for Python ${built:-?}, this machine's python3 is ${have:-missing}"
  exit 77
fi
if [ "$MODE" = torch ] && [ ! -e "$SITE/shoal/_shoal_torch.so" ]; then
  echo "no torch backend extension built against torch 2.x in the bundle" \
    "(the torch 2.x backend is in progress elsewhere): its CUDA path was not run"
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
print("PyTorch", torch.__version__, "CUDA", torch.version.cuda,
      torch.cuda.get_device_name(0))
PY
export PYTHONPATH=$SITE:$HERE/python/tests
case "$MODE" in
  cuda)
    exec "$SHOAL_BIN" launch --nproc-per-node 1 --store-bytes 64M -- \
      python3 "$HERE/python/dlpack_cuda_check.py" \
      "$HERE/shoal/tests/gpu/gpu_store_helper"
    ;;
  cpu)
    # As one rank of a job (the bundle's conftest.py): put/get/borrow use
    # the job's store; the tests that submit tasks are left out (a worker
    # embeds the Python of the machine that built the bundle).
    python3 -c 'import pytest' 2>/dev/null || { echo "no pytest here"; exit 77; }
    cd "$HERE/python" || exit 1
    exec "$SHOAL_BIN" launch --nproc-per-node 1 --store-bytes 64M -- \
      python3 -m pytest -x -q -p no:cacheprovider -k 'not task_results' \
      tests/test_dlpack.py
    ;;
  torch)
    exec "$SHOAL_BIN" launch --nproc-per-node "${NPROC:-1}" --store-bytes 64M -- \
      python3 "$HERE/python/torch_cuda_check.py"
    ;;
  *)
    echo "python_checks.sh: unknown mode '$MODE' (cuda, cpu or torch)" >&2
    exit 2
    ;;
esac
