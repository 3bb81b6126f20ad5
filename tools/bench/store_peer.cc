#include "tools/bench/store_peer.h"

#include <unistd.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/subprocess.h"
#include "tools/bench/bench_util.h"
#include "tools/cli/args.h"

namespace shoal::bench {
namespace {

// Producer: creates a fresh SharedMemory per put (as a user sharing one
// tensor would) and copies a float32 array into it. Consumer (another
// process): attaches by name, wraps it in an ndarray, sums it. Prints
// "size put_s attach_s read_s ok" per timed iteration.
constexpr char kScript[] = R"PY(
import sys, time
import numpy as np
from multiprocessing import Process, Pipe, resource_tracker, shared_memory

def consumer(conn):
    while True:
        msg = conn.recv()
        if msg is None:
            return
        name, n, want = msg
        t0 = time.perf_counter()
        shm = shared_memory.SharedMemory(name=name)
        # Attaching registers the segment with this process's tracker too
        # (CPython issue 82300); the producer owns it.
        resource_tracker.unregister(shm._name, "shared_memory")
        view = np.ndarray((n,), dtype=np.float32, buffer=shm.buf)
        t1 = time.perf_counter()
        got = float(view.sum(dtype=np.float64))
        t2 = time.perf_counter()
        del view
        shm.close()
        conn.send((t1 - t0, t2 - t1, got == want))

def main():
    sizes = [int(s) for s in sys.argv[1].split(",")]
    warmup, iters = int(sys.argv[2]), int(sys.argv[3])
    parent, child = Pipe()
    p = Process(target=consumer, args=(child,))
    p.start()
    for size in sizes:
        n = size // 4
        src = (np.arange(n, dtype=np.float32) % 1000)
        want = float(src.sum(dtype=np.float64))
        for i in range(warmup + iters):
            t0 = time.perf_counter()
            shm = shared_memory.SharedMemory(create=True, size=size)
            dst = np.ndarray((n,), dtype=np.float32, buffer=shm.buf)
            dst[:] = src
            put = time.perf_counter() - t0
            parent.send((shm.name, n, want))
            attach, read, ok = parent.recv()
            del dst
            shm.close()
            shm.unlink()
            if i >= warmup:
                print(size, put, attach, read, int(ok), flush=True)
    parent.send(None)
    p.join()

main()
)PY";

std::string Python() {
  return access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
}

double GBps(uint64_t bytes, double s) {
  return s > 0 ? static_cast<double>(bytes) / s / 1e9 : 0;
}

}  // namespace

absl::StatusOr<std::vector<PeerRow>> RunSharedMemoryPeer(
    const std::vector<uint64_t>& sizes, int warmup, int iters) {
  SubprocessOptions o;
  o.pipe_stdout = true;
  absl::StatusOr<Subprocess> py =
      Subprocess::Start({Python(), "-c", kScript, absl::StrJoin(sizes, ","),
                         absl::StrCat(warmup), absl::StrCat(iters)},
                        o);
  if (!py.ok()) return absl::FailedPreconditionError("python3 not found");
  std::vector<PeerRow> rows;
  std::vector<double> put, attach, read;
  int wrong = 0;
  uint64_t current = 0;
  auto flush = [&] {
    if (put.empty()) return;
    rows.push_back({current, GBps(current, Median(put)), Median(attach) * 1e6,
                    GBps(current, Median(read)), wrong});
    put.clear();
    attach.clear();
    read.clear();
    wrong = 0;
  };
  while (true) {
    absl::StatusOr<std::string> line = py->ReadLine(absl::Minutes(5));
    if (!line.ok()) break;
    std::vector<std::string> w = absl::StrSplit(*line, ' ');
    uint64_t size;
    double p, a, r;
    int ok;
    if (w.size() != 5 || !absl::SimpleAtoi(w[0], &size) ||
        !absl::SimpleAtod(w[1], &p) || !absl::SimpleAtod(w[2], &a) ||
        !absl::SimpleAtod(w[3], &r) || !absl::SimpleAtoi(w[4], &ok)) {
      continue;
    }
    if (size != current) flush();
    current = size;
    put.push_back(p);
    attach.push_back(a);
    read.push_back(r);
    if (!ok) ++wrong;
  }
  flush();
  absl::StatusOr<int> status = py->Wait(absl::Seconds(30));
  if (rows.empty() || !status.ok() || *status != 0) {
    return absl::FailedPreconditionError(
        "the multiprocessing.shared_memory peer did not run (python3 with "
        "numpy needed)");
  }
  return rows;
}

std::string PeerTable(const std::vector<PeerRow>& rows) {
  Table t({"size", "put GB/s", "attach us", "read GB/s", "#wrong"});
  for (const PeerRow& r : rows) {
    t.AddRow({cli::FormatBytes(r.size), absl::StrFormat("%.2f", r.put_gbps),
              absl::StrFormat("%.1f", r.attach_us),
              absl::StrFormat("%.2f", r.read_gbps), absl::StrCat(r.wrong)});
  }
  return t.Render();
}

std::string PeerJson(const PeerRow& r) {
  JsonRow j;
  j.Add("workload", "W1")
      .Add("system", "python-shared_memory")
      .Add("size_bytes", r.size)
      .Add("put_gbps", r.put_gbps)
      .Add("get_us", r.attach_us)
      .Add("read_gbps", r.read_gbps)
      .Add("wrong", static_cast<int64_t>(r.wrong));
  return j.str();
}

}  // namespace shoal::bench
