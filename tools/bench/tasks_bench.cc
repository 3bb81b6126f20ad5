// `shoal bench tasks` (workload W2): one client and a node of 2 workers.
//   async: 20,000 no-op tasks submitted one call each, then all awaited
//          (tasks/s); also as one batched Submit call
//   sync:  2,000 sequential submit-and-wait round trips (p50/p99 µs)
// for the local fast path (task table in shared memory) and the remote path
// (the coordinator's ZeroMQ frontend; also one Submit per task pipelined on
// the wire, tasks_bench_pipelined.h), and, in the same run, Python's
// multiprocessing.Pool with 2 processes (apply_async and apply), and the
// wire's limit: a raw ZeroMQ DEALER/ROUTER echo on TCP loopback, with CURVE
// (the frontend's TCP transport) and plain (tasks_bench_zmq.h), and the
// CURVE echo again with its ROUTER in another process; and, while the node is
// up, the remote pushed sync task and both CURVE echoes timed interleaved
// (tasks_bench_sync.h), which gives the remote path's goal line.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "base/subprocess.h"
#include "coordinator/client.h"
#include "tools/bench/bench_util.h"
#include "tools/bench/tasks_bench_clients.h"
#include "tools/bench/tasks_bench_pipelined.h"
#include "tools/bench/tasks_bench_sync.h"
#include "tools/bench/tasks_bench_zmq.h"
#include "tools/cli/args.h"

namespace shoal::bench {
namespace {

struct Row {
  std::string system;
  std::string mode;
  double tasks_per_s = 0;
  double p50_us = 0;
  double p99_us = 0;
  int64_t tasks = 0;
  int wrong = 0;
};

absl::StatusOr<Row> Async(coordinator::Client& c, int n, bool batched,
                          const std::string& name) {
  ipc::TaskSpec noop;
  noop.function = "noop";
  std::vector<coordinator::TaskRef> refs;
  refs.reserve(n);
  const double t0 = NowSeconds();
  if (batched) {
    SHOAL_ASSIGN_OR_RETURN(refs, c.Submit(std::vector<ipc::TaskSpec>(n, noop)));
  } else {
    for (int i = 0; i < n; ++i) {
      SHOAL_ASSIGN_OR_RETURN(coordinator::TaskRef r, c.Submit(noop));
      refs.push_back(r);
    }
  }
  SHOAL_ASSIGN_OR_RETURN(std::vector<ipc::TaskResult> results,
                         c.Wait(refs, absl::Minutes(5), 0, /*release=*/true));
  const double elapsed = NowSeconds() - t0;
  Row row{name, batched ? "async, one batch" : "async", n / elapsed, 0, 0, n,
          0};
  for (const ipc::TaskResult& r : results) row.wrong += !r.status.ok();
  row.wrong += n - static_cast<int>(results.size());
  return row;
}

// A sync row: `one` runs a single no-op task start to finish; its latency
// is timed n times after n/10 warm-up runs.
absl::StatusOr<Row> SyncRow(
    int n, const std::string& name, const std::string& mode,
    const std::function<absl::StatusOr<ipc::TaskResult>()>& one) {
  std::vector<double> lat;
  lat.reserve(n);
  Row row{name, mode, 0, 0, 0, n, 0};
  for (int i = 0; i < n + n / 10; ++i) {  // the first 10% warm up
    const double t0 = NowSeconds();
    SHOAL_ASSIGN_OR_RETURN(ipc::TaskResult res, one());
    const double dt = NowSeconds() - t0;
    if (i >= n / 10) {
      lat.push_back(dt);
      row.wrong += !res.status.ok();
    }
  }
  double total = 0;
  for (double d : lat) total += d;
  row.tasks_per_s = n / total;
  row.p50_us = Median(lat) * 1e6;
  row.p99_us = Quantile(lat, 0.99) * 1e6;
  return row;
}

absl::StatusOr<Row> Sync(coordinator::Client& c, int n,
                         const std::string& name) {
  ipc::TaskSpec noop;
  noop.function = "noop";
  return SyncRow(n, name, "sync", [&]() -> absl::StatusOr<ipc::TaskResult> {
    SHOAL_ASSIGN_OR_RETURN(coordinator::TaskRef r, c.Submit(noop));
    return c.Wait(r, absl::Minutes(1));
  });
}

// Remote: one SubmitAsync per task (pipelined, results pushed), then every
// result taken.
absl::StatusOr<Row> AsyncPipelined(coordinator::Client& c, int n,
                                   const std::string& name) {
  ipc::TaskSpec noop;
  noop.function = "noop";
  std::vector<coordinator::PendingTask> pending;
  pending.reserve(n);
  const double t0 = NowSeconds();
  for (int i = 0; i < n; ++i) {
    SHOAL_ASSIGN_OR_RETURN(coordinator::PendingTask p, c.SubmitAsync(noop));
    pending.push_back(p);
  }
  Row row{name, "async, SubmitAsync (pushed)", 0, 0, 0, n, 0};
  for (const coordinator::PendingTask& p : pending) {
    absl::StatusOr<ipc::TaskResult> r = c.Await(p, absl::Minutes(5));
    row.wrong += !r.ok() || !r->status.ok();
  }
  row.tasks_per_s = n / (NowSeconds() - t0);
  return row;
}

// Remote: SubmitAsync + Await per task, one request and one pushed reply.
absl::StatusOr<Row> SyncPushed(coordinator::Client& c, int n,
                               const std::string& name) {
  ipc::TaskSpec noop;
  noop.function = "noop";
  return SyncRow(n, name, "sync, SubmitAsync+Await (pushed)",
                 [&]() -> absl::StatusOr<ipc::TaskResult> {
                   SHOAL_ASSIGN_OR_RETURN(coordinator::PendingTask p,
                                          c.SubmitAsync(noop));
                   return c.Await(p, absl::Minutes(1));
                 });
}

constexpr char kPoolScript[] = R"PY(
import sys, time
from multiprocessing import Pool

def noop():
    return None

def main():
    n_async, n_sync = int(sys.argv[1]), int(sys.argv[2])
    with Pool(2) as pool:
        pool.apply(noop)
        t0 = time.perf_counter()
        rs = [pool.apply_async(noop) for _ in range(n_async)]
        for r in rs:
            r.get()
        el = time.perf_counter() - t0
        print("async", n_async / el, 0, 0, flush=True)
        lat = []
        for i in range(n_sync + n_sync // 10):
            t0 = time.perf_counter()
            pool.apply(noop)
            if i >= n_sync // 10:
                lat.append(time.perf_counter() - t0)
        lat.sort()
        p50 = lat[len(lat) // 2] * 1e6
        p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e6
        print("sync", len(lat) / sum(lat), p50, p99, flush=True)

main()
)PY";

std::vector<Row> RunPool(int n_async, int n_sync) {
  SubprocessOptions o;
  o.pipe_stdout = true;
  const std::string py =
      access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
  absl::StatusOr<Subprocess> p = Subprocess::Start(
      {py, "-c", kPoolScript, absl::StrCat(n_async), absl::StrCat(n_sync)}, o);
  std::vector<Row> rows;
  if (!p.ok()) return rows;
  while (true) {
    absl::StatusOr<std::string> line = p->ReadLine(absl::Minutes(5));
    if (!line.ok()) break;
    std::vector<std::string> w = absl::StrSplit(*line, ' ');
    Row r;
    r.system = "multiprocessing.Pool(2)";
    if (w.size() != 4 || !absl::SimpleAtod(w[1], &r.tasks_per_s) ||
        !absl::SimpleAtod(w[2], &r.p50_us) ||
        !absl::SimpleAtod(w[3], &r.p99_us)) {
      continue;
    }
    r.mode = w[0] == "async" ? "async (apply_async)" : "sync (apply)";
    r.tasks = w[0] == "async" ? n_async : n_sync;
    rows.push_back(r);
  }
  (void)p->Wait(absl::Seconds(30));
  return rows;
}

// The raw ZeroMQ echo's two rows (sync round trip, async with a window).
void AddWireRows(const std::string& name, const ZmqRoundTrip& z, int n_async,
                 int n_sync, int window, std::vector<Row>* rows) {
  rows->push_back(Row{name, absl::StrCat("async, window ", window),
                      z.async_per_s, 0, 0, n_async, 0});
  rows->push_back(Row{name, "sync round trip", z.sync_per_s, z.sync_p50_us,
                      z.sync_p99_us, n_sync, 0});
}

absl::Status MeasureWire(bool curve, int n_async, int n_sync, int window,
                         std::vector<Row>* rows) {
  SHOAL_ASSIGN_OR_RETURN(ZmqRoundTrip z,
                         MeasureZmqRoundTrip(curve, n_async, n_sync, window,
                                             /*payload_bytes=*/64));
  AddWireRows(curve ? "raw ZeroMQ tcp+CURVE" : "raw ZeroMQ tcp plain", z,
              n_async, n_sync, window, rows);
  return absl::OkStatus();
}

// The CURVE echo with its ROUTER in a process of its own (this binary,
// `bench tasks --zmq-echo-server curve`): two contexts, two I/O threads, as
// between a remote client and the coordinator. Beside the row above, which
// stays the wire's limit; this one shows what the process boundary adds.
absl::Status MeasureWireAcrossProcesses(int n_async, int n_sync, int window,
                                        std::vector<Row>* rows) {
  SHOAL_ASSIGN_OR_RETURN(EchoProcess echo, StartEchoProcess());
  absl::StatusOr<ZmqRoundTrip> z =
      MeasureZmqRoundTripTo(echo.endpoint, echo.server_key, echo.client_keys,
                            n_async, n_sync, window, /*payload_bytes=*/64);
  StopEchoProcess(echo);
  if (!z.ok()) return z.status();
  AddWireRows("raw ZeroMQ tcp+CURVE, echo process", *z, n_async, n_sync, window,
              rows);
  return absl::OkStatus();
}

// The local or the remote path's three rows (async, async in one batch,
// sync), through a client of node `job`.
absl::Status MeasureClient(const std::string& job, bool force_remote,
                           int n_async, int n_sync, std::vector<Row>* rows) {
  coordinator::ClientOptions co;
  co.job_id = job;
  co.force_remote = force_remote;
  SHOAL_ASSIGN_OR_RETURN(std::unique_ptr<coordinator::Client> c,
                         coordinator::Client::Connect(co));

  const std::string name =
      force_remote ? "shoal remote (ZeroMQ)" : "shoal local (shm)";
  SHOAL_ASSIGN_OR_RETURN(Row a, Async(*c, n_async, false, name));
  SHOAL_ASSIGN_OR_RETURN(Row b, Async(*c, n_async, true, name));
  SHOAL_ASSIGN_OR_RETURN(Row s, Sync(*c, n_sync, name));
  rows->push_back(a);
  rows->push_back(b);
  rows->push_back(s);
  if (force_remote) {
    SHOAL_ASSIGN_OR_RETURN(Row p, AsyncPipelined(*c, n_async, name));
    SHOAL_ASSIGN_OR_RETURN(Row q, SyncPushed(*c, n_sync, name));
    rows->push_back(p);
    rows->push_back(q);
  }
  return absl::OkStatus();
}

struct NodeBench {
  int64_t workers = 2;
  bool remote = true;
  int n_async = 0;
  int n_sync = 0;
  int window = 0;
  int clients = 0;
  int per_client = 0;
  int blocks = 0;  // the interleaved sync rows' blocks; 0: none
  // Runs of the pipelined row (at least 1); it reports their median.
  int pipelined_reps = 1;
  std::string node_binary;  // the node's shoal binary; empty: this one
};

// The interleaved sync rows (tasks_bench_sync.h), while the node is up.
void AddInterleavedRows(const InterleavedSync& m, std::vector<Row>* rows) {
  for (const InterleavedLatency& l : m.systems) {
    double total = 0;
    for (double d : l.samples) total += d;
    rows->push_back(Row{l.name, "sync, interleaved", l.samples.size() / total,
                        l.p50_us, l.p99_us,
                        static_cast<int64_t>(l.samples.size()), 0});
  }
}

// Starts a node of `o.workers` workers, measures the local path (and the
// remote one, with `o.remote`) and stops the node. The interleaved sync
// measurement goes to `interleaved` (an error there is printed, not fatal).
absl::StatusOr<std::vector<Row>> MeasureNode(
    const NodeBench& o, std::optional<InterleavedSync>* interleaved) {
  const int64_t workers = o.workers;
  const bool remote = o.remote;
  const int n_async = o.n_async, n_sync = o.n_sync, window = o.window;
  const int clients = o.clients, per_client = o.per_client;
  const std::string job = absl::StrCat("bench-tasks-", getpid());
  SubprocessOptions so;
  so.pipe_stdout = true;
  so.parent_death_signal = SIGTERM;
  const bool own_node = o.node_binary.empty();
  absl::StatusOr<Subprocess> node = Subprocess::Start(
      {own_node ? SelfExePath() : o.node_binary, "start", "-n",
       absl::StrCat(workers), "--job-id", job, "--store-bytes", "256M"},
      so);
  if (!node.ok()) return node.status();
  absl::StatusOr<std::string> ready = node->ReadLine(absl::Seconds(30));
  if (!ready.ok()) return ready.status();
  std::vector<Row> rows;
  // The local path shares the task table's layout with the node: only a
  // node of this build serves it.
  absl::Status s = own_node ? MeasureClient(job, false, n_async, n_sync, &rows)
                            : absl::OkStatus();
  if (s.ok() && remote) s = MeasureClient(job, true, n_async, n_sync, &rows);
  if (s.ok() && remote && o.blocks > 0) {
    absl::StatusOr<InterleavedSync> m =
        MeasureSyncInterleaved(job, n_sync, o.blocks);
    if (m.ok()) {
      AddInterleavedRows(*m, &rows);
      *interleaved = *std::move(m);
    } else {
      std::fprintf(stderr, "interleaved sync rows skipped: %s\n",
                   m.status().ToString().c_str());
    }
  }
  if (s.ok() && remote) {
    // One run's rate moves by up to 2x from run to run (where the two
    // processes run): the row is the median of o.pipelined_reps runs.
    std::vector<double> rates;
    int64_t wrong = 0;
    for (int i = 0; i < o.pipelined_reps; ++i) {
      absl::StatusOr<PipelinedSubmit> p =
          MeasurePipelinedSubmit(job, n_async, window);
      if (!p.ok()) return p.status();
      rates.push_back(p->tasks_per_s);
      wrong += p->wrong;
    }
    rows.push_back(Row{
        "shoal remote, pipelined wire",
        absl::StrCat("async, window ", window,
                     rates.size() > 1
                         ? absl::StrCat(", median of ", rates.size(), " runs")
                         : ""),
        Median(rates), 0, 0, n_async, static_cast<int>(wrong)});
  }
  if (s.ok() && remote && clients > 0) {
    absl::StatusOr<ManyClients> m =
        MeasureManyClients(job, clients, per_client, /*window=*/64);
    if (!m.ok()) return m.status();
    rows.push_back(Row{absl::StrCat("shoal remote, ", clients, " clients"),
                       "async, SubmitAsync, window 64 each", m->tasks_per_s,
                       m->p50_us, m->p99_us, m->tasks,
                       static_cast<int>(m->wrong)});
  }
  node->Signal(SIGTERM);
  (void)node->Wait(absl::Seconds(20));
  if (!s.ok()) return s;
  return rows;
}

// "a,b,c" of `r` (each times `scale`), with `digits` decimals.
std::string Joined(const std::vector<double>& r, double scale = 1,
                   int digits = 2) {
  std::string out;
  for (double x : r) {
    absl::StrAppend(&out, out.empty() ? "" : ",",
                    absl::StrFormat("%.*f", digits, x * scale));
  }
  return out;
}

// The remote path's goal line: shoal's pushed sync p50 over the raw CURVE round
// trip's, both from the interleaved measurement.
void PrintGoal(const InterleavedSync& m, bool json) {
  constexpr double kGoal = 1.3;
  if (json) {
    JsonRow j;
    j.Add("workload", "W2")
        .Add("system", "goal: shoal pushed sync p50 / raw CURVE p50")
        .Add("mode", "sync, interleaved")
        .Add("shoal_p50_us", m.systems[0].p50_us)
        .Add("raw_in_process_p50_us", m.systems[1].p50_us)
        .Add("raw_echo_process_p50_us", m.systems[2].p50_us)
        .Add("ratio_in_process", m.ratio_in_process)
        .Add("ratio_echo_process", m.ratio_echo_process)
        .Add("block_ratios_in_process", Joined(m.block_ratios_in_process))
        .Add("block_ratios_echo_process", Joined(m.block_ratios_echo_process))
        .Add("shoal_block_p50_us", Joined(m.systems[0].block_p50, 1e6, 1))
        .Add("raw_in_process_block_p50_us",
             Joined(m.systems[1].block_p50, 1e6, 1))
        .Add("raw_echo_process_block_p50_us",
             Joined(m.systems[2].block_p50, 1e6, 1))
        .Add("shoal_switches_per_op", m.systems[0].switches_per_op)
        .Add("raw_in_process_switches_per_op", m.systems[1].switches_per_op)
        .Add("raw_echo_process_switches_per_op", m.systems[2].switches_per_op)
        .Add("goal_met",
             static_cast<int64_t>(m.ratio_in_process <= kGoal ? 1 : 0));
    std::printf("%s\n", j.str().c_str());
    return;
  }
  std::printf(
      "# goal, interleaved in %zu blocks: shoal pushed sync p50 "
      "%.1f us / raw CURVE p50 %.1f us = %.2fx (goal <= %.1fx: %s); per "
      "block %s\n"
      "#   vs the CURVE echo process (p50 %.1f us): %.2fx; per block %s\n"
      "#   context switches per round trip (machine-wide): shoal %.1f, raw "
      "%.1f, echo process %.1f\n",
      m.block_ratios_in_process.size(), m.systems[0].p50_us,
      m.systems[1].p50_us, m.ratio_in_process, kGoal,
      m.ratio_in_process <= kGoal ? "met" : "NOT met",
      Joined(m.block_ratios_in_process).c_str(), m.systems[2].p50_us,
      m.ratio_echo_process, Joined(m.block_ratios_echo_process).c_str(),
      m.systems[0].switches_per_op, m.systems[1].switches_per_op,
      m.systems[2].switches_per_op);
}

// One JSON object per row, or a table under a header line.
void PrintRows(const std::vector<Row>& rows, bool json, int64_t workers) {
  Table t(
      {"system", "mode", "tasks", "tasks/s", "p50 us", "p99 us", "#failed"});
  for (const Row& r : rows) {
    if (json) {
      JsonRow j;
      j.Add("workload", "W2")
          .Add("system", r.system)
          .Add("mode", r.mode)
          .Add("tasks", r.tasks)
          .Add("tasks_per_s", r.tasks_per_s)
          .Add("p50_us", r.p50_us)
          .Add("p99_us", r.p99_us)
          .Add("failed", static_cast<int64_t>(r.wrong))
          .Add("workers", workers);
      std::printf("%s\n", j.str().c_str());
    }
    t.AddRow({r.system, r.mode, absl::StrCat(r.tasks),
              absl::StrFormat("%.0f", r.tasks_per_s),
              r.p50_us > 0 ? absl::StrFormat("%.1f", r.p50_us) : "-",
              r.p99_us > 0 ? absl::StrFormat("%.1f", r.p99_us) : "-",
              absl::StrCat(r.wrong)});
  }
  if (!json) {
    std::printf("# W2 tasks: 1 client, %lld workers, no-op tasks\n",
                static_cast<long long>(workers));
    std::fputs(t.Render().c_str(), stdout);
  }
}

}  // namespace

int TasksBench(int argc, char** argv) {
  // The echo process of MeasureWireAcrossProcesses (not a user flag).
  if (argc == 3 && std::string(argv[1]) == "--zmq-echo-server")
    return RunZmqEchoServer(std::string(argv[2]) == "curve");
  cli::ArgParser p(
      "shoal bench tasks [flags]",
      "Workload W2: no-op task throughput and latency with one client and a\n"
      "node of 2 workers, beside multiprocessing.Pool(2) in the same run.");
  int64_t& n_async =
      p.Int("async", 20000, "no-op tasks submitted then awaited");
  int64_t& n_sync =
      p.Int("sync", 2000, "sequential submit-and-wait round trips");
  int64_t& workers = p.Int("workers", 2, "worker processes");
  bool& remote =
      p.Bool("remote", true, "also measure the remote (ZeroMQ frontend) path");
  bool& peers =
      p.Bool("peers", true, "also measure multiprocessing.Pool (python3)");
  bool& wire = p.Bool("wire", true,
                      "also measure a raw ZeroMQ DEALER/ROUTER echo on tcp "
                      "loopback (CURVE and plain): the wire's limit; and the "
                      "CURVE echo in another process");
  int64_t& window = p.Int("window", 1000,
                          "requests in flight in the raw ZeroMQ and the "
                          "pipelined remote async rows");
  int64_t& clients =
      p.Int("clients", 64,
            "remote clients at once in the many-clients row (0: none)");
  int64_t& per_client =
      p.Int("per-client", 10000, "echo tasks per client in that row");
  int64_t& blocks =
      p.Int("blocks", 10,
            "blocks of the interleaved sync rows (shoal pushed sync and the "
            "raw CURVE echoes, alternating while the node is up; the goal "
            "line); 0: none");
  int64_t& pipelined_reps =
      p.Int("pipelined-reps", 5,
            "runs of the pipelined remote row; it reports their median");
  std::string& node_binary =
      p.String("node", "",
               "the shoal binary that runs the node (default: this one), to "
               "compare two builds' nodes with the same client; the local "
               "(shm) rows are then skipped");
  bool& json = p.Bool("json", false, "one JSON object per row");
  if (absl::Status s = p.Parse(argc, argv); !s.ok()) return cli::Fail(s);
  if (pipelined_reps < 1) {
    return cli::Fail(absl::InvalidArgumentError(absl::StrCat(
        "--pipelined-reps must be at least 1, got ", pipelined_reps)));
  }

  NodeBench nb;
  nb.workers = workers;
  nb.remote = remote;
  nb.n_async = static_cast<int>(n_async);
  nb.n_sync = static_cast<int>(n_sync);
  nb.window = static_cast<int>(window);
  nb.clients = static_cast<int>(clients);
  nb.per_client = static_cast<int>(per_client);
  nb.blocks = wire && n_sync >= blocks ? static_cast<int>(blocks) : 0;
  nb.pipelined_reps = static_cast<int>(pipelined_reps);
  nb.node_binary = node_binary;
  std::optional<InterleavedSync> interleaved;
  absl::StatusOr<std::vector<Row>> rows = MeasureNode(nb, &interleaved);
  if (!rows.ok()) return cli::Fail(rows.status());
  if (wire) {
    for (bool curve : {true, false}) {
      if (absl::Status s = MeasureWire(curve, static_cast<int>(n_async),
                                       static_cast<int>(n_sync),
                                       static_cast<int>(window), &*rows);
          !s.ok()) {
        std::fprintf(stderr, "raw ZeroMQ (%s) skipped: %s\n",
                     curve ? "CURVE" : "plain", s.ToString().c_str());
      }
    }
    if (absl::Status s = MeasureWireAcrossProcesses(
            static_cast<int>(n_async), static_cast<int>(n_sync),
            static_cast<int>(window), &*rows);
        !s.ok()) {
      std::fprintf(stderr, "raw ZeroMQ (CURVE, echo process) skipped: %s\n",
                   s.ToString().c_str());
    }
  }
  if (peers) {
    for (Row& r : RunPool(static_cast<int>(n_async), static_cast<int>(n_sync)))
      rows->push_back(r);
  }
  PrintRows(*rows, json, workers);
  if (interleaved) PrintGoal(*interleaved, json);
  return 0;
}

}  // namespace shoal::bench
