#!/usr/bin/env bash
# `shoal top` in a real terminal: tmux runs it against a node whose worker
# runs a task; the test reads the screen (capture-pane), sorts with a key and
# quits with q (send-keys). Skips, saying why, where tmux is absent.
set -euo pipefail

SHOAL="$(pwd)/tools/shoal"
if ! command -v tmux > /dev/null; then
  echo "SKIP: tmux is absent (tools/setup installs it)"
  exit 0
fi
JOB="toptest$$"
# A socket path short enough for sun_path (TEST_TMPDIR is not).
SOCK_DIR="$(mktemp -d /tmp/shoal-top.XXXXXX)"
T=(tmux -S "$SOCK_DIR/s")
SLEEPER=""
cleanup() {
  if [ -n "$SLEEPER" ]; then kill "$SLEEPER" 2> /dev/null || true; fi
  "${T[@]}" kill-server 2> /dev/null || true
  rm -rf "$SOCK_DIR"
  "$SHOAL" stop --job-id "$JOB" > /dev/null 2>&1 || true
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  echo "--- screen:" >&2
  "${T[@]}" capture-pane -p -t top >&2 2> /dev/null || true
  exit 1
}

# Waits up to 20 s for the screen to show the extended regex $1.
wait_screen() {
  local i
  for i in $(seq 200); do
    if "${T[@]}" capture-pane -p -t top 2> /dev/null | grep -E -q -- "$1"; then
      return 0
    fi
    sleep 0.1
  done
  fail "the screen never showed /$1/"
}

"$SHOAL" start -n 2 --job-id "$JOB" --store-bytes 64M --daemon > /dev/null
"$SHOAL" submit --job-id "$JOB" noop > /dev/null
# A worker busy for the whole test (its client waits in the background).
"$SHOAL" submit --job-id "$JOB" --timeout 0 sleep 60.0 > /dev/null 2>&1 &
SLEEPER=$!

"${T[@]}" new-session -d -s top -x 120 -y 30 \
  "$SHOAL top --job-id $JOB; echo top-exited-\$?; sleep 30"
wait_screen "shoal top .* job $JOB"
wait_screen "submitted 2 +done 1"
# The table: one worker busy with the sleep, one idle; CPU known from the
# second refresh on.
wait_screen "^ +[01] +[0-9]+ +busy +[0-9]+ "
wait_screen "^ +[01] +[0-9]+ +idle +[0-9]+ "
wait_screen "sorted by id"
"${T[@]}" send-keys -t top m
wait_screen "sorted by memory"
"${T[@]}" send-keys -t top c
wait_screen "sorted by cpu"
"${T[@]}" send-keys -t top q
wait_screen "^top-exited-0$"
echo "PASS"
