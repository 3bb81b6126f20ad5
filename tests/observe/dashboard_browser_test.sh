#!/usr/bin/env bash
# `shoal dashboard` in a real browser: headless Chromium loads the page of a
# node whose workers run tasks, and of a launched job whose ranks
# all_reduce; the test reads the DOM after the page's script ran (workers'
# rows, task spans, ranks' rows, collective spans) and saves screenshots
# under the test's outputs. Requests without the right token get 403.
# Skips, saying why, where Chromium is absent.
set -euo pipefail

SHOAL="$(pwd)/tools/shoal"
RANKS="$(pwd)/tests/observe/dashboard_ranks"
CHROMIUM=""
for c in chromium chromium-browser google-chrome; do
  if command -v "$c" > /dev/null; then CHROMIUM="$c"; break; fi
done
if [ -z "$CHROMIUM" ]; then
  echo "SKIP: chromium is absent (tools/setup installs it)"
  exit 0
fi
OUT="${TEST_UNDECLARED_OUTPUTS_DIR:-$(mktemp -d /tmp/shoal-dash-out.XXXXXX)}"
WORK="$(mktemp -d "${TEST_TMPDIR:-/tmp}/dash.XXXXXX")"
JOB="dashtest$$"
LJOB="dashlaunch$$"
DASH=""
LDASH=""
LAUNCH=""
SLEEPER=""
stop_pid() {
  if [ -n "$1" ]; then kill "$1" 2> /dev/null || true; wait "$1" 2> /dev/null || true; fi
}
cleanup() {
  touch "$WORK/stop"
  stop_pid "$DASH"
  stop_pid "$LDASH"
  stop_pid "$SLEEPER"
  if [ -n "$LAUNCH" ]; then wait "$LAUNCH" 2> /dev/null || true; fi
  "$SHOAL" stop --job-id "$JOB" > /dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# The status code of GET $2 on HOST:PORT $1 (bash's /dev/tcp: no client
# program needed).
http_status() {
  local host="${1%:*}" port="${1##*:}" line
  exec 3<> "/dev/tcp/$host/$port"
  printf 'GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n' "$2" "$1" >&3
  read -r line <&3 || true
  exec 3<&-
  echo "$line" | cut -d' ' -f2
}

# Starts `shoal dashboard --job-id $1` in the background (its pid in
# DASH_PID) and waits for the URL it prints (in URL).
start_dashboard() {
  "$SHOAL" dashboard --job-id "$1" > "$WORK/$1.dash" 2>&1 &
  DASH_PID=$!
  local i
  for i in $(seq 200); do
    URL="$(grep -o 'http://[^ ]*' "$WORK/$1.dash" || true)"
    if [ -n "$URL" ]; then return 0; fi
    sleep 0.1
  done
  fail "no URL from shoal dashboard: $(cat "$WORK/$1.dash")"
}

# Chromium, headless, on its own profile. --no-sandbox: its sandbox needs
# user namespaces a container (or root) may not give; the page is ours.
browser() {
  HOME="$WORK" timeout 120 "$CHROMIUM" --headless --no-sandbox --disable-gpu \
    --user-data-dir="$WORK/profile" --window-size=1200,900 \
    --virtual-time-budget=5000 "$@" 2> "$WORK/chromium.err"
}

# Loads $1 until the DOM (in $WORK/dom.html) shows each extended regex of
# the other arguments, 10 tries.
load_until() {
  local url="$1" try ok re
  shift
  for try in $(seq 10); do
    browser --dump-dom "$url" > "$WORK/dom.html" || true
    ok=1
    for re in "$@"; do
      grep -E -q -- "$re" "$WORK/dom.html" || ok=0
    done
    if [ "$ok" = 1 ]; then return 0; fi
    sleep 1
  done
  cp "$WORK/dom.html" "$OUT/failed_dom.html"
  tail -5 "$WORK/chromium.err" >&2 || true
  fail "the page never showed all of: $* (its DOM: failed_dom.html)"
}

"$SHOAL" start -n 2 --job-id "$JOB" --store-bytes 64M --daemon --dashboard \
  > "$WORK/start.out"
# `shoal start --dashboard`: the same page beside the node, its URL (with
# its own token) at the end of the ready line.
NODE_URL="$(grep -o 'dashboard http://[^ ]*token=[0-9a-f]*' "$WORK/start.out" | cut -d' ' -f2)"
[ -n "$NODE_URL" ] || fail "no dashboard in: $(cat "$WORK/start.out")"
NODE_HP="${NODE_URL#http://}"
NODE_HP="${NODE_HP%%/*}"
[ "$(http_status "$NODE_HP" "/${NODE_URL##*/}")" = 200 ] || fail "GET $NODE_URL"
[ "$(http_status "$NODE_HP" /api/status)" = 403 ] || fail "no token, not 403"
for i in 1 2 3 4; do "$SHOAL" submit --job-id "$JOB" noop > /dev/null; done
"$SHOAL" submit --job-id "$JOB" sleep 0.2 > /dev/null
# A worker busy for the rest of the test (its client waits in the background).
"$SHOAL" submit --job-id "$JOB" --timeout 0 sleep 60.0 > /dev/null 2>&1 &
SLEEPER=$!

start_dashboard "$JOB"
DASH=$DASH_PID
BASE="${URL%%/?token=*}"
HOSTPORT="${BASE#http://}"
TOKEN="${URL##*token=}"
[ "${#TOKEN}" = 64 ] || fail "a token of ${#TOKEN} characters: $URL"
case "$HOSTPORT" in 127.0.0.1:*) ;; *) fail "not on loopback: $URL" ;; esac

# No token, a wrong one, one a character short: 403 for the page and every
# data endpoint; the right one: 200.
WRONG="$(printf '%064d' 0)"
for path in / /api/status "/api/timeline?seconds=60"; do
  sep="?"; case "$path" in *\?*) sep="&" ;; esac
  for t in "" "${sep}token=$WRONG" "${sep}token=${TOKEN:1}"; do
    got="$(http_status "$HOSTPORT" "$path$t")"
    [ "$got" = 403 ] || fail "GET $path$t: $got, not 403"
  done
  got="$(http_status "$HOSTPORT" "$path${sep}token=$TOKEN")"
  [ "$got" = 200 ] || fail "GET $path with the token: $got, not 200"
done

# The page in the browser: a row per worker, the busy one busy, and the
# tasks' spans on the stream.
load_until "$URL" \
  '<tr class="worker" data-worker-id="0"' \
  '<tr class="worker" data-worker-id="1"' \
  'class="state-busy">busy<' \
  '<rect [^>]*class="task-span"[^>]*data-name="noop"' \
  '<rect [^>]*class="task-span"[^>]*data-name="sleep"' \
  'id="store-chart"'
if grep -q 'id="banner" style="display: block' "$WORK/dom.html"; then
  fail "the page shows a problem: $(grep -o 'id="banner"[^<]*' "$WORK/dom.html")"
fi
cp "$WORK/dom.html" "$OUT/dashboard_dom.html"
browser --screenshot="$OUT/dashboard.png" "$URL" > /dev/null || true
[ -s "$OUT/dashboard.png" ] || fail "no screenshot"
# A wrong token in the browser: the server's 403 text, no dashboard.
browser --dump-dom "$BASE/?token=$WRONG" > "$WORK/wrong.html" || true
grep -q "wrong or missing token" "$WORK/wrong.html" ||
  fail "a wrong token's page: $(head -c 300 "$WORK/wrong.html")"
grep -q 'class="worker"' "$WORK/wrong.html" && fail "a wrong token saw workers"

# A launched job: its ranks and their collectives.
"$SHOAL" launch --nproc-per-node 2 --job-id "$LJOB" -- "$RANKS" "$WORK/stop" \
  > "$WORK/launch.out" 2>&1 &
LAUNCH=$!
start_dashboard "$LJOB"
LDASH=$DASH_PID
load_until "$URL" '<tr class="rank"><td>0<' '<tr class="rank"><td>1<' \
  '<rect [^>]*class="collective-span"[^>]*data-name="all_reduce"'
cp "$WORK/dom.html" "$OUT/dashboard_ranks_dom.html"
browser --screenshot="$OUT/dashboard_ranks.png" "$URL" > /dev/null || true
[ -s "$OUT/dashboard_ranks.png" ] || fail "no screenshot of the ranks"
touch "$WORK/stop"
wait "$LAUNCH" || fail "the launched job failed: $(cat "$WORK/launch.out")"
LAUNCH=""

# Ctrl-C's signal ends the dashboard cleanly.
kill -TERM "$DASH"
wait "$DASH" || fail "shoal dashboard exited $? after SIGTERM"
DASH=""
echo "PASS (screenshots in $OUT)"
