#!/usr/bin/env bash
# The task-pool example end to end on this machine: builds shoal and its
# Python package optimised, starts a node with WORKERS workers
# (`shoal start --daemon`), maps a CPU-bound Python function over arrays in
# its store from a client, prints the measured speed-up over one process,
# and stops the node.
#
#   examples/task_pool/run.sh                      # 2 workers
#   WORKERS=4 examples/task_pool/run.sh --arrays 32 --rounds 5
#
# Environment: WORKERS (default 2), PYTHON (an interpreter with numpy;
# default Debian's /usr/bin/python3). Further arguments go to task_pool.py
# (--help lists them).
set -euo pipefail
cd "$(dirname "$0")/../.."

WORKERS=${WORKERS:-2}
PYTHON=${PYTHON:-/usr/bin/python3}

bazel build --curses=no --color=no --config=opt //tools:shoal //python:site
BIN=$PWD/bazel-out/k8-optopt/bin
SHOAL=$BIN/tools/shoal
JOB=task_pool-$$

"$SHOAL" start -n "$WORKERS" --store-bytes 256M --job-id "$JOB" --daemon
trap '"$SHOAL" stop --job-id "$JOB" >/dev/null' EXIT
PYTHONPATH="$BIN/python/site${PYTHONPATH:+:$PYTHONPATH}" SHOAL_BIN="$SHOAL" \
  "$PYTHON" examples/task_pool/task_pool.py --job-id "$JOB" "$@"
