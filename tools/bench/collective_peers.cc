// `shoal bench collective` outside `shoal launch`: the W3 orchestrator. It
// runs, in one go and with the same sizes and iteration rules,
//   1. shoal:    shoal launch --nproc-per-node N -- shoal bench collective ...
//   2. Open MPI: a small MPI_Allreduce program (kMpiProgram), built here with
//                mpicc and run with mpirun -np N, when Open MPI is installed;
//   3. gloo:     torch.distributed's gloo all_reduce (kGlooProgram) started by
//                shoal launch (which sets torch's env:// variables), when
//                PyTorch is installed;
//   4. memcpy:   this process copying `size` bytes, the memory-bandwidth bound;
// then prints them side by side with the ratios.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/subprocess.h"
#include "base/temp_dir.h"
#include "tools/bench/bench_util.h"
#include "tools/bench/collective_bench.h"
#include "tools/cli/args.h"

namespace shoal::bench {
namespace {

// argv: minbytes maxbytes factor iters warmup reps check dtype op
// Prints one JSON row per size from rank 0, the keys RowFromJson reads.
constexpr char kMpiProgram[] = R"C(
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}
static double pattern(int prod, int r, long i) {
  return prod ? 1 + ((i + r) % 2) : (double)((i * 7 + r * 3) % 5) + 1;
}
static void put(int t, void* p, long i, double v) {
  if (t == 0) ((float*)p)[i] = (float)v;
  if (t == 1) ((double*)p)[i] = v;
  if (t == 2) ((int*)p)[i] = (int)v;
  if (t == 3) ((long long*)p)[i] = (long long)v;
}
static double get(int t, const void* p, long i) {
  if (t == 0) return ((const float*)p)[i];
  if (t == 1) return ((const double*)p)[i];
  if (t == 2) return ((const int*)p)[i];
  return (double)((const long long*)p)[i];
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  if (argc != 10) MPI_Abort(MPI_COMM_WORLD, 2);
  unsigned long long minb = strtoull(argv[1], 0, 10), maxb = strtoull(argv[2], 0, 10),
                     factor = strtoull(argv[3], 0, 10);
  long iters = atol(argv[4]), warm = atol(argv[5]), reps = atol(argv[6]);
  int check = atoi(argv[7]);
  const char* names[] = {"f32", "f64", "i32", "i64"};
  MPI_Datatype types[] = {MPI_FLOAT, MPI_DOUBLE, MPI_INT, MPI_LONG_LONG};
  int sizes[] = {4, 8, 4, 8}, t = 0;
  for (int k = 0; k < 4; ++k) if (!strcmp(argv[8], names[k])) t = k;
  MPI_Op op = MPI_SUM;
  int prod = !strcmp(argv[9], "prod"), mn = !strcmp(argv[9], "min"), mx = !strcmp(argv[9], "max");
  if (prod) op = MPI_PROD;
  if (mn) op = MPI_MIN;
  if (mx) op = MPI_MAX;
  size_t cap = (maxb + 4095) / 4096 * 4096;
  char* in = aligned_alloc(4096, cap);
  char* out = aligned_alloc(4096, cap);
  memset(in, 0, cap);
  memset(out, 0, cap);
  double* times = malloc(sizeof(double) * reps);
  for (unsigned long long size = minb; size <= maxb; size *= factor) {
    long count = (long)(size / sizes[t]);
    double us[2], lo[2], hi[2];
    long wrong[2];
    for (int ip = 0; ip < 2; ++ip) {
      void* sb = ip ? MPI_IN_PLACE : (void*)in;
      void* rb = ip ? (void*)in : (void*)out;
      for (long i = 0; i < warm; ++i) MPI_Allreduce(sb, rb, count, types[t], op, MPI_COMM_WORLD);
      long it = iters;
      for (long batch = 1; it <= 0; batch *= 8) {  /* the harness's calibration */
        MPI_Barrier(MPI_COMM_WORLD);  /* then one untimed call, as the harness */
        MPI_Allreduce(sb, rb, count, types[t], op, MPI_COMM_WORLD);
        double s = MPI_Wtime();
        for (long i = 0; i < batch; ++i) MPI_Allreduce(sb, rb, count, types[t], op, MPI_COMM_WORLD);
        double took = MPI_Wtime() - s;
        MPI_Allreduce(MPI_IN_PLACE, &took, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (took >= 0.002 || batch >= 100000) {
          double k = ceil(0.02 / (took / batch));
          it = (long)(k < 5 ? 5 : k > 100000 ? 100000 : k);
        }
      }
      for (long r = 0; r < reps; ++r) {
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Allreduce(sb, rb, count, types[t], op, MPI_COMM_WORLD);
        double s = MPI_Wtime();
        for (long i = 0; i < it; ++i) MPI_Allreduce(sb, rb, count, types[t], op, MPI_COMM_WORLD);
        times[r] = (MPI_Wtime() - s) / it;
      }
      MPI_Allreduce(MPI_IN_PLACE, times, reps, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      qsort(times, reps, sizeof(double), cmp);
      us[ip] = times[(reps + 1) / 2 - 1] * 1e6;
      lo[ip] = times[0] * 1e6;
      hi[ip] = times[reps - 1] * 1e6;
      wrong[ip] = -1;
      if (check) {
        for (long i = 0; i < count; ++i) put(t, in, i, pattern(prod, rank, i));
        MPI_Allreduce(sb, rb, count, types[t], op, MPI_COMM_WORLD);
        long w = 0;
        for (long i = 0; i < count; ++i) {
          double want = pattern(prod, 0, i);
          for (int r = 1; r < n; ++r) {
            double v = pattern(prod, r, i);
            want = prod ? want * v : mn ? (v < want ? v : want) : mx ? (v > want ? v : want) : want + v;
          }
          if (get(t, rb, i) != want) ++w;
        }
        MPI_Allreduce(&w, &wrong[ip], 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
      }
    }
    if (rank == 0) {
      printf("{\"system\": \"Open MPI\", \"bytes\": %llu, \"count\": %ld, \"oop_us\": %.3f, "
             "\"oop_wrong\": %ld, \"ip_us\": %.3f, \"ip_wrong\": %ld, \"oop_lo_us\": %.3f, "
             "\"oop_hi_us\": %.3f, \"ip_lo_us\": %.3f, \"ip_hi_us\": %.3f}\n",
             (unsigned long long)(count * sizes[t]), count, us[0], wrong[0], us[1], wrong[1],
             lo[0], hi[0], lo[1], hi[1]);
      fflush(stdout);
    }
  }
  MPI_Finalize();
  return 0;
}
)C";

// argv: minbytes maxbytes factor iters warmup reps check dtype op. In place
// only (torch.distributed.all_reduce reduces into its argument).
constexpr char kGlooProgram[] = R"PY(
import json, math, sys, time
import torch
import torch.distributed as dist

minb, maxb, factor, iters, warm, reps, check = (int(a) for a in sys.argv[1:8])
dtype = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32,
         "f64": torch.float64, "i32": torch.int32, "i64": torch.int64}[sys.argv[8]]
opname = sys.argv[9]
op = {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT,
      "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX}[opname]
dist.init_process_group("gloo")
rank, n = dist.get_rank(), dist.get_world_size()
es = torch.tensor([], dtype=dtype).element_size()

def pattern(r, count):
    i = torch.arange(count, dtype=torch.int64)
    if opname == "prod":
        return (1 + (i + r) % 2).to(dtype)
    return ((i * 7 + r * 3) % 5 + 1).to(dtype)

def slowest(values):
    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()

size = minb
while size <= maxb:
    count = size // es
    x = torch.zeros(count, dtype=dtype)
    for _ in range(warm):
        dist.all_reduce(x, op=op)
    it, batch = iters, 1
    while it <= 0:  # the harness's calibration
        dist.barrier()
        dist.all_reduce(x, op=op)  # untimed, as the harness
        s = time.perf_counter()
        for _ in range(batch):
            dist.all_reduce(x, op=op)
        took = slowest([time.perf_counter() - s])[0]
        if took >= 0.002 or batch >= 100000:
            it = int(min(100000, max(5, math.ceil(0.02 / (took / batch)))))
        batch *= 8
    times = []
    for _ in range(reps):
        dist.barrier()
        dist.all_reduce(x, op=op)
        s = time.perf_counter()
        for _ in range(it):
            dist.all_reduce(x, op=op)
        times.append((time.perf_counter() - s) / it)
    times = sorted(slowest(times))
    wrong = -1
    if check:
        x = pattern(rank, count)
        dist.all_reduce(x, op=op)
        want = pattern(0, count).to(torch.float64)
        for r in range(1, n):
            v = pattern(r, count).to(torch.float64)
            want = {"sum": want + v, "prod": want * v, "min": torch.minimum(want, v),
                    "max": torch.maximum(want, v)}[opname]
        w = torch.tensor([int((x.to(torch.float64) != want.to(dtype).to(torch.float64)).sum())])
        dist.all_reduce(w)
        wrong = int(w[0])
    if rank == 0:
        print(json.dumps({"system": "gloo", "bytes": count * es, "count": count,
                          "oop_us": -1, "oop_wrong": 0,
                          "ip_us": times[(reps + 1) // 2 - 1] * 1e6, "ip_wrong": wrong,
                          "ip_lo_us": times[0] * 1e6, "ip_hi_us": times[-1] * 1e6}),
              flush=True)
    size *= factor
dist.destroy_process_group()
)PY";

// Debian's interpreter (where python3-torch lives) before whatever `python3`
// is first on PATH.
std::string SystemPython() {
  return access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
}

// Runs argv to completion with stdout to `stdout_file` ("" inherits).
absl::Status RunToEnd(const std::vector<std::string>& argv,
                      const std::string& stdout_file,
                      absl::Duration limit = absl::Hours(1)) {
  SubprocessOptions o;
  o.stdout_file = stdout_file;
  absl::StatusOr<Subprocess> p = Subprocess::Start(argv, o);
  if (!p.ok()) return p.status();
  absl::StatusOr<int> status = p->Wait(limit);
  if (!status.ok()) return status.status();
  if (!WIFEXITED(*status) || WEXITSTATUS(*status) != 0) {
    return absl::InternalError(
        absl::StrCat(argv[0], " failed (status ", *status, ")"));
  }
  return absl::OkStatus();
}

// Every row of `file`, grouped by size (several rounds append to one file).
std::map<uint64_t, std::vector<CollectiveRow>> ReadRows(
    const std::string& file) {
  std::map<uint64_t, std::vector<CollectiveRow>> rows;
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    absl::StatusOr<CollectiveRow> r = RowFromJson(line);
    if (r.ok()) rows[r->bytes].push_back(*r);
  }
  return rows;
}

// One row per size: the median time over the rounds, the worst #wrong.
CollectiveRow MedianOverRounds(const std::vector<CollectiveRow>& rounds) {
  CollectiveRow m = rounds.front();
  std::vector<double> oop, ip;
  for (const CollectiveRow& r : rounds) {
    oop.push_back(r.oop_us);
    ip.push_back(r.ip_us);
    m.oop_wrong = std::max(m.oop_wrong, r.oop_wrong);
    m.ip_wrong = std::max(m.ip_wrong, r.ip_wrong);
  }
  m.oop_us = Median(oop);
  m.ip_us = Median(ip);
  return m;
}

// Copy bandwidth (bytes copied per second) of `bytes`-sized memcpys.
double MemcpyGBps(uint64_t bytes, int64_t reps) {
  std::vector<uint8_t> a(bytes, 1), b(bytes, 2);
  std::vector<double> per;
  int64_t iters = 1;
  {
    const double t0 = NowSeconds();
    std::memcpy(b.data(), a.data(), bytes);
    iters = AutoIters(NowSeconds() - t0);
  }
  for (int64_t r = 0; r < reps; ++r) {
    const double t0 = NowSeconds();
    for (int64_t i = 0; i < iters; ++i) {
      std::memcpy((i % 2 ? a : b).data(), (i % 2 ? b : a).data(), bytes);
    }
    per.push_back((NowSeconds() - t0) / iters);
  }
  return bytes / (Median(per) * 1e9);
}

std::string Bw(const CollectiveRow* r, bool in_place, double factor) {
  if (r == nullptr) return "-";
  const double us = in_place ? r->ip_us : r->oop_us;
  if (us <= 0) return "-";
  return absl::StrFormat("%.2f", r->bytes / (us * 1e3) * factor);
}
std::string Us(const CollectiveRow* r, bool in_place) {
  if (r == nullptr) return "-";
  const double us = in_place ? r->ip_us : r->oop_us;
  return us <= 0 ? "-" : absl::StrFormat("%.1f", us);
}
std::string Ratio(const CollectiveRow* a, bool a_ip, const CollectiveRow* b,
                  bool b_ip) {
  if (a == nullptr || b == nullptr) return "-";
  const double ta = a_ip ? a->ip_us : a->oop_us,
               tb = b_ip ? b->ip_us : b->oop_us;
  if (ta <= 0 || tb <= 0) return "-";
  return absl::StrFormat("%.2fx", tb / ta);  // busbw ratio = inverse time ratio
}

// The commands of one system's run; empty when it cannot run (then `note`
// says why).
struct PeerRun {
  std::vector<std::string> argv;
  std::string rows_file;
  std::string note;
};

std::vector<std::string> PeerArgs(const CollectiveBenchConfig& c) {
  return {absl::StrCat(c.min_bytes),
          absl::StrCat(c.max_bytes),
          absl::StrCat(c.factor),
          absl::StrCat(c.iters),
          absl::StrCat(c.warmup),
          absl::StrCat(c.reps),
          c.check ? "1" : "0",
          std::string(DTypeName(c.dtype)),
          std::string(collectives::ReduceOpName(c.op))};
}

PeerRun PrepareMpi(const CollectiveBenchConfig& c, const std::string& dir,
                   const std::string& n) {
  PeerRun run;
  const bool mpi_type = c.dtype == DType::kF32 || c.dtype == DType::kF64 ||
                        c.dtype == DType::kI32 || c.dtype == DType::kI64;
  if (c.coll != Collective::kAllReduce || !mpi_type ||
      c.op == collectives::ReduceOp::kAvg) {
    run.note =
        "Open MPI: only all_reduce of f32/f64/i32/i64 with sum/prod/min/max";
    return run;
  }
  std::ofstream(dir + "/allreduce.c") << kMpiProgram;
  if (!RunToEnd(
           {"mpicc", "-O2", "-o", dir + "/allreduce", dir + "/allreduce.c"},
           "/dev/null")
           .ok()) {
    run.note =
        "Open MPI skipped: mpicc not found or failed (install libopenmpi-dev)";
    return run;
  }
  run.argv = {"mpirun", "-np", n, "--oversubscribe"};
  if (getuid() == 0) run.argv.push_back("--allow-run-as-root");
  run.argv.push_back(dir + "/allreduce");
  for (const std::string& a : PeerArgs(c)) run.argv.push_back(a);
  run.rows_file = dir + "/mpi.jsonl";
  run.note =
      absl::StrCat("Open MPI: mpirun -np ", n,
                   " --oversubscribe <MPI_Allreduce program, mpicc -O2>");
  return run;
}

PeerRun PrepareGloo(const CollectiveBenchConfig& c, const std::string& dir,
                    const std::string& n) {
  PeerRun run;
  if (c.coll != Collective::kAllReduce || c.op == collectives::ReduceOp::kAvg) {
    run.note = "gloo: only all_reduce with sum/prod/min/max";
    return run;
  }
  if (!RunToEnd({SystemPython(), "-c",
                 "import torch.distributed as d; assert d.is_gloo_available()"},
                "/dev/null")
           .ok()) {
    run.note =
        "gloo skipped: python3 with torch.distributed is not installed "
        "(python3-torch)";
    return run;
  }
  std::ofstream(dir + "/gloo_allreduce.py") << kGlooProgram;
  run.argv = {SelfExePath(), "launch",       "--nproc-per-node",        n,
              "--",          SystemPython(), dir + "/gloo_allreduce.py"};
  for (const std::string& a : PeerArgs(c)) run.argv.push_back(a);
  run.rows_file = dir + "/gloo.jsonl";
  run.note = absl::StrCat(
      "gloo: torch.distributed all_reduce (in place; PyTorch's "
      "gloo backend), started by shoal launch --nproc-per-node ",
      n, ", first round only");
  return run;
}

void PrintSideBySide(const CollectiveBenchConfig& c, int64_t nproc, int rounds,
                     const std::string& dir, bool json,
                     const std::vector<std::string>& notes) {
  std::map<uint64_t, std::map<std::string, CollectiveRow>> by_size;
  std::map<uint64_t, std::map<std::string, std::vector<CollectiveRow>>>
      rounds_by_size;
  for (const char* f : {"shoal", "mpi", "gloo"}) {
    for (const auto& [bytes, rows] :
         ReadRows(absl::StrCat(dir, "/", f, ".jsonl"))) {
      CollectiveRow m = MedianOverRounds(rows);
      by_size[bytes][m.system] = m;
      rounds_by_size[bytes][m.system] = rows;
    }
  }
  const double factor = BusFactor(c.coll, static_cast<int>(nproc));
  Table t({"size", "shoal oop us", "shoal busbw", "MPI oop us", "MPI busbw",
           "shoal/MPI", "shoal ip us", "shoal ip busbw", "MPI ip busbw",
           "shoal/MPI ip", "gloo ip us", "gloo busbw", "shoal/gloo",
           "memcpy GB/s", "busbw/memcpy", "shoal oop min-max",
           "MPI oop min-max", "shoal/MPI worst round"});
  for (auto& [bytes, systems] : by_size) {
    // An explicit capture: clang 14 cannot capture a structured binding.
    auto find = [&systems = systems](const char* s) -> const CollectiveRow* {
      auto it = systems.find(s);
      return it == systems.end() ? nullptr : &it->second;
    };
    const CollectiveRow *sh = find("shoal"), *mpi = find("Open MPI"),
                        *gloo = find("gloo");
    const std::vector<CollectiveRow>& sh_rounds =
        rounds_by_size[bytes]["shoal"];
    const std::vector<CollectiveRow>& mpi_rounds =
        rounds_by_size[bytes]["Open MPI"];
    const double memcpy_gbps = MemcpyGBps(bytes, c.reps);
    std::string bound = "-";
    if (sh != nullptr && sh->oop_us > 0) {
      bound = absl::StrFormat(
          "%.2f", sh->bytes / (sh->oop_us * 1e3) * factor / memcpy_gbps);
    }
    if (json) {
      for (const auto& [name, r] : systems)
        std::printf("%s\n", RowToJson(r, c, nproc).c_str());
      JsonRow j;
      j.Add("workload", "W3")
          .Add("system", "memcpy")
          .Add("bytes", bytes)
          .Add("gbps", memcpy_gbps);
      std::printf("%s\n", j.str().c_str());
      continue;
    }
    t.AddRow({absl::StrCat(bytes), Us(sh, false), Bw(sh, false, factor),
              Us(mpi, false), Bw(mpi, false, factor),
              Ratio(sh, false, mpi, false), Us(sh, true), Bw(sh, true, factor),
              Bw(mpi, true, factor), Ratio(sh, true, mpi, true), Us(gloo, true),
              Bw(gloo, true, factor), Ratio(sh, true, gloo, true),
              absl::StrFormat("%.2f", memcpy_gbps), bound,
              SpreadCell(sh_rounds, false), SpreadCell(mpi_rounds, false),
              WorstRoundRatioCell(sh_rounds, mpi_rounds, false)});
  }
  if (json) return;
  std::printf(
      "\n# W3 side by side: %s %s %s, %lld ranks, median of %d rounds; busbw "
      "in "
      "GB/s (nccl-tests' definition); ratios are shoal's busbw over the "
      "peer's; min-max: the fastest and slowest repetition of all rounds; "
      "worst round: the smallest ratio of round k to round k\n",
      std::string(CollectiveName(c.coll)).c_str(), NcclTypeName(c.dtype),
      std::string(collectives::ReduceOpName(c.op)).c_str(),
      static_cast<long long>(nproc), rounds);
  std::fputs(t.Render().c_str(), stdout);
  for (const std::string& n : notes) std::printf("# %s\n", n.c_str());
}

int Orchestrate(const CollectiveBenchConfig& c, int64_t nproc, int rounds,
                const std::string& peers, bool json) {
  // A private folder (mkdtemp, 0700): the MPI and gloo programs written here
  // are run, so no one else may have put anything in it first.
  absl::StatusOr<TempDir> tmp = TempDir::Create("shoal-bench-coll-");
  if (!tmp.ok()) {
    std::fprintf(stderr, "shoal bench collective: %s\n",
                 std::string(tmp.status().message()).c_str());
    return 1;
  }
  const std::string dir = tmp->path();
  const std::string self = SelfExePath(), n = absl::StrCat(nproc);
  const std::vector<std::string> args = ConfigArgs(c);
  std::vector<std::string> shoal = {self, "launch", "--nproc-per-node", n, "--",
                                    self, "bench",  "collective"};
  shoal.insert(shoal.end(), args.begin(), args.end());
  shoal.insert(shoal.end(), {"--rows", dir + "/shoal.jsonl"});
  std::vector<PeerRun> others;
  if (absl::StrContains(peers, "mpi")) others.push_back(PrepareMpi(c, dir, n));
  if (absl::StrContains(peers, "gloo"))
    others.push_back(PrepareGloo(c, dir, n));
  // Rounds alternate shoal and the peers, so that a slow spell of this
  // (shared, virtual) machine does not fall on one system only.
  for (int round = 0; round < rounds; ++round) {
    if (!json) {
      std::printf(
          "# round %d/%d: shoal launch --nproc-per-node %s -- shoal bench "
          "collective %s\n",
          round + 1, rounds, n.c_str(), absl::StrJoin(args, " ").c_str());
      std::fflush(stdout);
    }
    if (absl::Status s = RunToEnd(shoal, json ? "/dev/null" : ""); !s.ok()) {
      std::fprintf(stderr, "shoal bench collective: the shoal run failed: %s\n",
                   std::string(s.message()).c_str());
      return 1;
    }
    for (PeerRun& p : others) {
      if (p.argv.empty() ||
          (round > 0 && absl::StrContains(p.rows_file, "gloo")))
        continue;
      if (absl::Status s = RunToEnd(p.argv, p.rows_file); !s.ok()) {
        p.note = absl::StrCat(p.argv[0], " failed: ", s.message());
        p.argv.clear();
      }
    }
  }
  std::vector<std::string> notes;
  for (const PeerRun& p : others) notes.push_back(p.note);
  PrintSideBySide(c, nproc, rounds, dir, json, notes);
  return 0;  // `tmp` removes the folder
}

}  // namespace

// ---- shared with the --nodes orchestrator (collective_nodes.cc) ----------

const char* MpiAllreduceProgram() { return kMpiProgram; }

std::vector<std::string> PeerProgramArgs(const CollectiveBenchConfig& c) {
  return PeerArgs(c);
}

absl::Status RunCommandToEnd(const std::vector<std::string>& argv,
                             const std::string& stdout_file,
                             absl::Duration limit) {
  return RunToEnd(argv, stdout_file, limit);
}

std::map<uint64_t, CollectiveRow> MedianRowsOf(const std::string& file) {
  std::map<uint64_t, CollectiveRow> rows;
  for (const auto& [bytes, rounds] : ReadRows(file))
    rows[bytes] = MedianOverRounds(rounds);
  return rows;
}

std::map<uint64_t, std::vector<CollectiveRow>> RoundRowsOf(
    const std::string& file) {
  return ReadRows(file);
}

std::string SpreadCell(const std::vector<CollectiveRow>& rounds,
                       bool in_place) {
  double lo = -1, hi = -1;
  for (const CollectiveRow& r : rounds) {
    const double median = in_place ? r.ip_us : r.oop_us;
    if (median <= 0) continue;
    double a = in_place ? r.ip_lo_us : r.oop_lo_us;
    double b = in_place ? r.ip_hi_us : r.oop_hi_us;
    if (a <= 0 || b <= 0) a = b = median;
    lo = lo < 0 ? a : std::min(lo, a);
    hi = std::max(hi, b);
  }
  if (lo < 0) return "-";
  return absl::StrFormat("%.1f-%.1f", lo, hi);
}

std::string WorstRoundRatioCell(const std::vector<CollectiveRow>& shoal,
                                const std::vector<CollectiveRow>& peer,
                                bool in_place) {
  double worst = -1;
  for (size_t k = 0; k < shoal.size() && k < peer.size(); ++k) {
    const double ts = in_place ? shoal[k].ip_us : shoal[k].oop_us;
    const double tp = in_place ? peer[k].ip_us : peer[k].oop_us;
    if (ts <= 0 || tp <= 0) continue;
    worst = worst < 0 ? tp / ts : std::min(worst, tp / ts);
  }
  return worst < 0 ? "-" : absl::StrFormat("%.2fx", worst);
}

int CollectiveBench(int argc, char** argv) {
  cli::ArgParser p(
      "shoal bench collective [flags]",
      "Workload W3, shaped like nccl-tests. Under `shoal launch` every rank\n"
      "runs the harness and rank 0 prints size, count, type, redop, root and,\n"
      "out of place and in place, time, algbw, busbw and #wrong. Started\n"
      "directly it launches itself with --nproc ranks and runs Open MPI's\n"
      "MPI_Allreduce and gloo beside it in the same run, then compares.");
  CollectiveFlags f = DeclareCollectiveFlags(p);
  bool& json = p.Bool("json", false, "JSON rows instead of tables");
  std::string& rows =
      p.String("rows", "", "(harness) append JSON rows to this file");
  int64_t& nproc = p.Int("nproc", 2, "(direct run) ranks to launch");
  int64_t& rounds = p.Int("rounds", 3,
                          "(direct run) alternating rounds of shoal and the "
                          "peers; the tables show the median");
  std::string& peers = p.String("peers", "mpi,gloo",
                                "(direct run) peers to run: mpi, gloo, none");
  int64_t& nodes = p.Int("nodes", 1,
                         "(direct run) 2: two network namespaces x --nproc "
                         "ranks: hierarchical shoal, flat gloo and Open MPI "
                         "across them, and the link's raw TCP bandwidth");
  if (absl::Status s = p.Parse(argc, argv); !s.ok()) return cli::Fail(s);
  absl::StatusOr<CollectiveBenchConfig> c = ConfigFromFlags(f);
  if (!c.ok()) return cli::Fail(c.status());
  if (std::getenv("SHOAL_KV_ENDPOINT") != nullptr) {
    return CollectiveBenchRank(*c, json, rows);
  }
  if (rounds < 1)
    return cli::Fail(absl::InvalidArgumentError("--rounds must be >= 1"));
  if (nproc < 1)
    return cli::Fail(absl::InvalidArgumentError("--nproc must be >= 1"));
  if (nodes == 2) {
    return OrchestrateNodes(*c, nproc, static_cast<int>(rounds), peers, json);
  }
  if (nodes != 1)
    return cli::Fail(absl::InvalidArgumentError("--nodes must be 1 or 2"));
  return Orchestrate(*c, nproc, static_cast<int>(rounds), peers, json);
}

}  // namespace shoal::bench
