#!/usr/bin/env bash
# tools/plot_benchmarks.py on a small made-up folder of bench output: every
# plot is written as an SVG when its data is there, and a plot whose data is
# absent is skipped with a line saying so (and not written).
set -u
HERE=${TEST_SRCDIR:-.}/${TEST_WORKSPACE:-shoal}/tools
[ -e "$HERE/plot_benchmarks.py" ] || HERE=$(dirname "$0")
T=$(mktemp -d "${TEST_TMPDIR:-/tmp}/plot_benchmarks_test.XXXXXX")
trap 'rm -rf "$T"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
if ! command -v gnuplot > /dev/null; then
  echo "FAIL: no gnuplot on this machine"
  exit 1
fi

D=$T/json
mkdir -p "$D"
cat > "$D/store.json" << 'J'
{"workload": "W1", "system": "shoal", "size_bytes": 1048576, "put_gbps": 6.2, "get_us": 2.5, "read_gbps": 39.3, "memcpy_gbps": 29.4, "wrong": 0}
{"workload": "W1", "system": "shoal", "size_bytes": 67108864, "put_gbps": 7.1, "get_us": 7.5, "read_gbps": 13.7, "memcpy_gbps": 7.0, "wrong": 0}
{"workload": "W1", "system": "python-shared_memory", "size_bytes": 1048576, "put_gbps": 2.2, "get_us": 50.2, "read_gbps": 5.1, "wrong": 0}
{"workload": "W1-startup", "system": "shoal", "store_ready_ms": 10.8}
J
cat > "$D/tasks.json" << 'J'
{"workload": "W2", "system": "shoal local (shm)", "mode": "async", "tasks_per_s": 529908, "p50_us": 0}
{"workload": "W2", "system": "shoal local (shm)", "mode": "sync", "tasks_per_s": 338572, "p50_us": 2.6}
{"workload": "W2", "system": "shoal remote (ZeroMQ)", "mode": "async, SubmitAsync (pushed)", "tasks_per_s": 238566, "p50_us": 0}
{"workload": "W2", "system": "multiprocessing.Pool(2)", "mode": "sync (apply)", "tasks_per_s": 3255, "p50_us": 167.9}
J
cat > "$D/python.json" << 'J'
{"workload": "python-values", "system": "Ray 2.60.0 (num_cpus=2)", "case": "noop", "tasks_per_s": 2017, "p50_us": 1615.0}
J
cat > "$D/collective.json" << 'J'
{"workload": "W3", "system": "shoal", "nranks": 2, "bytes": 4096, "oop_us": 1.1, "oop_busbw": 3.7, "ip_busbw": 4.7}
{"workload": "W3", "system": "Open MPI", "nranks": 2, "bytes": 4096, "oop_us": 1.7, "oop_busbw": 2.3, "ip_busbw": 2.6}
{"workload": "W3", "system": "gloo", "nranks": 2, "bytes": 4096, "oop_us": -1, "oop_busbw": -1, "ip_busbw": 0.003}
{"workload": "W3", "system": "memcpy", "bytes": 4096, "gbps": 94.2}
{"workload": "W3", "system": "shoal", "nranks": 2, "bytes": 1048576, "oop_us": 83.9, "oop_busbw": 12.5, "ip_busbw": 12.6}
{"workload": "W3", "system": "Open MPI", "nranks": 2, "bytes": 1048576, "oop_us": 165.4, "oop_busbw": 6.3, "ip_busbw": 8.3}
J
cat > "$D/collective_nodes.json" << 'J'
{"workload": "W3", "system": "shoal (hierarchical)", "nranks": 4, "bytes": 4096, "oop_busbw": 0.3}
{"workload": "W3", "system": "gloo (flat, shoal)", "nranks": 4, "bytes": 4096, "oop_busbw": 0.001}
{"workload": "W3", "system": "Open MPI", "nranks": 4, "bytes": 4096, "oop_busbw": 0.2}
{"workload": "W3", "system": "shoal (hierarchical)", "nranks": 4, "bytes": 1048576, "oop_busbw": 0.5}
{"workload": "W3", "system": "Open MPI", "nranks": 4, "bytes": 1048576, "oop_busbw": 0.4}
J
cat > "$D/torch.json" << 'J'
{"torch": {"shoal": {"backend": "shoal", "world": 2, "rows": [{"bytes": 1048576, "us": 254.2}, {"bytes": 4194304, "us": 659.9}], "ddp": {"params": 1214496, "step_ms": 109.4, "compute_ms": 105.8, "comm_share": 0.033}},
           "gloo": {"backend": "gloo", "world": 2, "rows": [{"bytes": 1048576, "us": 1748.9}, {"bytes": 4194304, "us": 4592.9}], "ddp": {"params": 1214496, "step_ms": 116.0, "compute_ms": 107.3, "comm_share": 0.074}}},
 "native_ip_us": {"1048576": 240.0}}
J
cat > "$D/train.json" << 'J'
{"workload": "W5", "config": "1 rank", "device": "cpu", "ranks": 1, "samples_per_s": 11570, "samples_per_s_per_rank": 11570}
{"workload": "W5", "config": "2 ranks, no overlap", "device": "cpu", "ranks": 2, "samples_per_s": 19096, "samples_per_s_per_rank": 9548}
J
cat > "$D/dataloader.json" << 'J'
{"settings": {"tokens_gib": 2.0, "images": 50000, "repeat": 1},
 "results": {
  "tokens/shoal": {"median": {"first_batch_s": 0.013, "batches_per_s": 967}},
  "tokens/torch-2-persistent": {"median": {"first_batch_s": 0.19, "batches_per_s": 223}},
  "tokens/torch-defaults": {"median": {"first_batch_s": 0.014, "batches_per_s": 1479}},
  "images/shoal": {"median": {"first_batch_s": 0.4, "batches_per_s": 107, "peak_rss_bytes": 1.4e9, "peak_pss_bytes": 1.1e9, "peak_store_bytes": 1.1e9}},
  "images/torch-2-persistent": {"median": {"first_batch_s": 0.43, "batches_per_s": 37, "peak_rss_bytes": 2.4e9, "peak_pss_bytes": 0.8e9}},
  "images/torch-defaults": {"median": {"first_batch_s": 0.036, "batches_per_s": 105, "peak_rss_bytes": 0.9e9, "peak_pss_bytes": 0.8e9}}}}
J

IMG=$T/images
OUT=$(python3 "$HERE/plot_benchmarks.py" "$D" "$IMG" 2>&1) || fail "exit status $?: $OUT"
for f in w1_store w2_tasks w3_allreduce torch w5_train dataloader; do
  if ! grep -q "<svg" "$IMG/$f.svg" 2> /dev/null; then
    fail "$f.svg not written"
  fi
done
echo "$OUT" | grep -q "skipped" && fail "a plot was skipped: $OUT"

# Only the store's rows: W1 drawn, every other plot skipped and named.
D2=$T/only_store
mkdir -p "$D2"
cp "$D/store.json" "$D2/"
: > "$D2/train.json"  # a bench that failed leaves an empty file
OUT=$(python3 "$HERE/plot_benchmarks.py" "$D2" "$T/images2" 2>&1) ||
  fail "exit status $? with one file: $OUT"
[ -s "$T/images2/w1_store.svg" ] || fail "w1_store.svg not written alone"
for f in w2_tasks w3_allreduce torch w5_train dataloader; do
  [ -e "$T/images2/$f.svg" ] && fail "$f.svg written without its data"
  echo "$OUT" | grep -q "^skipped $f.svg" || fail "no 'skipped $f.svg' line: $OUT"
done

# A missing folder is an error, not an empty set of plots.
python3 "$HERE/plot_benchmarks.py" "$T/nowhere" "$T/images3" > /dev/null 2>&1 &&
  fail "a missing JSON folder was accepted"

if [ "$failures" -gt 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "PASS"
