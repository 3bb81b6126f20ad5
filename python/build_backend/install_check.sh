#!/usr/bin/env bash
# README's `pip install .`, checked as a user would meet it (tools/test runs
# this after the Bazel build, which the backend then reuses):
#
#   python/build_backend/install_check.sh [PYTHON]    # default /usr/bin/python3
#
#   1. a fresh venv of PYTHON (no --system-site-packages) in a temp folder,
#      numpy into it from a wheel cached under .venv/wheels (git-ignored;
#      downloaded from PyPI once per Python version), and
#      `pip install --no-index .` into it: offline, through the in-tree
#      PEP 517 backend, which builds for that venv's python;
#   2. from that temp folder, with no PYTHONPATH and no SHOAL_BIN:
#      `shoal --version` and `python -m shoal --version` print VERSION;
#      `import shoal` finds the venv's package (and `import shoal.torch`
#      loads the torch backend's extension, if the wheel has it);
#   3. `shoal start --daemon`, one Python task on it (the worker must import
#      shoal from the venv), `shoal stop`;
#   4. a 2-rank `shoal launch` of the venv's python doing an all_reduce.
# SHOAL_INSTALL_CHECK_PIP_ARGS: more `pip install` arguments (e.g.
# --config-settings bazel-startup-args=--output_base=...).
# Exits non-zero with "install_check: FAILED: ..." on the first failure;
# leaves no node running and no files behind (but the wheel cache).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
version="$(tr -d ' \n' < "$root/VERSION")"
work="$(mktemp -d /tmp/shoal-install-check.XXXXXX)"
venv="$work/venv"
job="install-check-$$"
node_started=0

cleanup() {
  if [ "$node_started" = 1 ]; then
    "$venv/bin/shoal" stop --job-id "$job" >/dev/null 2>&1 || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

fail() {
  echo "install_check: FAILED: $*" >&2
  exit 1
}

# Runs "$@" in $work as a user who only has the venv.
as_user() {
  (cd "$work" && env -u PYTHONPATH -u SHOAL_BIN PYTHONDONTWRITEBYTECODE=1 "$@")
}

python="${1:-/usr/bin/python3}"
pyver="$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" ||
  fail "cannot run $python"
wheels="$root/.venv/wheels"
echo "install_check: [${SECONDS}s] venv of $python ($pyver) in $venv," \
  "pip install --no-index $root"
"$python" -m venv "$venv" ||
  fail "$python -m venv (Debian's python3-venv is needed for /usr/bin/python3)"
pip=("$venv/bin/pip" --disable-pip-version-check --quiet)
if ! env -u PYTHONPATH "${pip[@]}" install --no-index --find-links "$wheels" \
    numpy 2>/dev/null; then
  mkdir -p "$wheels"
  echo "install_check: [${SECONDS}s] numpy's wheel for $pyver from PyPI into $wheels"
  env -u PYTHONPATH "${pip[@]}" download --only-binary=:all: --dest "$wheels" \
    numpy || fail "pip download numpy (PyPI) for Python $pyver"
  env -u PYTHONPATH "${pip[@]}" install --no-index --find-links "$wheels" \
    numpy || fail "pip install numpy from $wheels"
fi
# shellcheck disable=SC2086  # more arguments, split like a shell's words
(cd "$root" && env -u PYTHONPATH "${pip[@]}" install --no-index \
  ${SHOAL_INSTALL_CHECK_PIP_ARGS:-} .) ||
  fail "pip install --no-index . (rerun with -v for the backend's output)"

[ -x "$venv/bin/shoal" ] || fail "no shoal console script in $venv/bin"
got="$(as_user "$venv/bin/shoal" --version)" || fail "shoal --version"
[ "$got" = "shoal $version" ] || fail "shoal --version printed '$got'"
got="$(as_user "$venv/bin/python" -m shoal --version)" ||
  fail "python -m shoal --version"
[ "$got" = "shoal $version" ] || fail "python -m shoal --version printed '$got'"
got="$(as_user "$venv/bin/python" -c \
  'import shoal; print(shoal.__version__, shoal.__file__)')" ||
  fail "import shoal"
case "$got" in
  "$version $venv/lib/python3"*/site-packages/shoal/__init__.py) ;;
  *) fail "import shoal gave '$got', not the venv's package" ;;
esac
# The torch.distributed backend's extension, where //python:site builds it.
torch_ext=("$venv"/lib/python3*/site-packages/shoal/_shoal_torch.so)
if [ -f "${torch_ext[0]}" ]; then
  as_user "$venv/bin/python" -c 'import shoal.torch' ||
    fail "import shoal.torch (the wheel's torch.distributed backend)"
fi

cat > "$work/task_check.py" <<'EOF'
import sys

import shoal


def where():
    """Runs in a worker: which shoal its embedded Python imported."""
    import shoal
    return shoal.__file__


if __name__ == "__main__":
    shoal.connect(job_id=sys.argv[1])
    print(shoal.submit(where).result(timeout=120))
EOF
cat > "$work/launch_check.py" <<'EOF'
import sys

import numpy as np

import shoal

job = shoal.init()
x = np.full(1000, job.rank + 1, dtype=np.float32)
shoal.all_reduce(x)
expected = job.world_size * (job.world_size + 1) / 2
assert (x == expected).all(), (job.rank, x[:4])
# One write, so that the two ranks' lines (one stdout) cannot mix mid-line.
sys.stdout.write(f"rank {job.rank}/{job.world_size}: ok {shoal.__file__}\n")
EOF

echo "install_check: [${SECONDS}s] shoal start, one task"
as_user "$venv/bin/shoal" start -n 1 --daemon --job-id "$job" ||
  fail "shoal start --daemon"
node_started=1
got="$(as_user "$venv/bin/python" task_check.py "$job")" ||
  fail "a task on the venv's node"
case "$got" in
  "$venv/lib/python3"*/site-packages/shoal/__init__.py) ;;
  *) fail "the worker imported shoal from '$got', not from the venv" ;;
esac
as_user "$venv/bin/shoal" stop --job-id "$job" >/dev/null || fail "shoal stop"
node_started=0

echo "install_check: [${SECONDS}s] shoal launch, 2 ranks"
got="$(as_user timeout 120 "$venv/bin/shoal" launch --nproc-per-node 2 -- \
  "$venv/bin/python" launch_check.py)" || fail "shoal launch: $got"
for rank in 0 1; do
  grep -q "rank $rank/2: ok $venv/lib/python3.*/site-packages/shoal/" \
    <<< "$got" || fail "shoal launch printed: $got"
done
echo "install_check: [${SECONDS}s] ok (shoal $version for Python $pyver: pip install --no-index, a task, a 2-rank launch)"
