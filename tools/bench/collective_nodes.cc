// `shoal bench collective --nodes 2`: collectives across two "machines" —
// network namespaces joined by a veth pair, --nproc ranks in each — in one
// run, with the same sizes and iteration rules for every system:
//   1. shoal, hierarchical: two `shoal launch --nnodes 2` (one per
//      namespace) running the harness with --backend auto;
//   2. flat gloo: the same with --backend gloo (every rank in one gloo
//      context, no shared memory);
//   3. Open MPI: the MPI_Allreduce program of collective_peers.cc under
//      mpirun in the first namespace, its daemon started in the second by a
//      plm_rsh_agent script that runs `ip netns exec` (skipped with the
//      reason when it cannot start);
//   4. the bound: the veth link's raw one-stream TCP bandwidth, measured by
//      a small stream probe (kTcpProbe) in the same run.
// Needs root (namespaces); without it, says so and exits 1.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "base/subprocess.h"
#include "base/temp_dir.h"
#include "tools/bench/bench_util.h"
#include "tools/bench/collective_bench.h"

namespace shoal::bench {
namespace {

// argv: server IP PORT BYTES | client IP PORT BYTES. One TCP stream: the
// client sends BYTES from a 16 MiB buffer, the server reads them into its
// own and answers one byte; the client prints the rate in GB/s.
constexpr char kTcpProbe[] = R"PY(
import socket, sys, time
mode, ip, port, total = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
buf = bytearray(16 << 20)
if mode == "server":
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((ip, port))
    s.listen(1)
    print("listening", flush=True)
    c, _ = s.accept()
    view, got = memoryview(buf), 0
    while got < total:
        n = c.recv_into(view)
        if n == 0:
            break
        got += n
    c.sendall(b"k")
    c.close()
else:
    deadline = time.time() + 20
    while True:
        try:
            c = socket.create_connection((ip, port))
            break
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.05)
    view, sent = memoryview(buf), 0
    t0 = time.perf_counter()
    while sent < total:
        c.sendall(view[: min(len(buf), total - sent)])
        sent += min(len(buf), total - sent)
    c.recv(1)
    print("%.4f" % (total / (time.perf_counter() - t0) / 1e9), flush=True)
)PY";

// Two network namespaces joined by a veth pair (10.79.x.1, 10.79.x.2).
class NamespacePair {
 public:
  NamespacePair() {
    const int x = getpid() % 200 + 20;
    for (int k = 0; k < 2; ++k) {
      ns_[k] = absl::StrCat("shoalbench", getpid(), k);
      ip_[k] = absl::StrCat("10.79.", x, ".", k + 1);
    }
    subnet_ = absl::StrCat("10.79.", x, ".0/24");
    const std::string v0 = absl::StrCat("sb", getpid(), "a"),
                      v1 = absl::StrCat("sb", getpid(), "b");
    ok_ = Sh(absl::StrCat("ip netns add ", ns_[0])) &&
          Sh(absl::StrCat("ip netns add ", ns_[1])) &&
          Sh(absl::StrCat("ip link add ", v0, " type veth peer name ", v1)) &&
          Sh(absl::StrCat("ip link set ", v0, " netns ", ns_[0])) &&
          Sh(absl::StrCat("ip link set ", v1, " netns ", ns_[1]));
    for (int k = 0; k < 2 && ok_; ++k) {
      const std::string& v = k == 0 ? v0 : v1;
      ok_ = Sh(absl::StrCat("ip netns exec ", ns_[k], " ip addr add ", ip_[k],
                            "/24 dev ", v)) &&
            Sh(absl::StrCat("ip netns exec ", ns_[k], " ip link set ", v,
                            " up")) &&
            Sh(absl::StrCat("ip netns exec ", ns_[k], " ip link set lo up"));
    }
  }
  ~NamespacePair() {
    for (int k = 1; k >= 0; --k) {
      Sh(absl::StrCat("ip netns pids ", ns_[k], " | xargs -r kill -9"));
      Sh(absl::StrCat("ip netns del ", ns_[k]));
    }
  }
  bool ok() const { return ok_; }
  std::vector<std::string> In(int k) const {
    return {"ip", "netns", "exec", ns_[k]};
  }
  const std::string& ns(int k) const { return ns_[k]; }
  const std::string& ip(int k) const { return ip_[k]; }
  const std::string& subnet() const { return subnet_; }

 private:
  static bool Sh(const std::string& cmd) {
    return std::system((cmd + " >/dev/null 2>&1").c_str()) == 0;
  }
  std::string ns_[2], ip_[2], subnet_;
  bool ok_ = false;
};

std::vector<std::string> Cat(std::vector<std::string> a,
                             const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::string Python() {
  return access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
}

// The link's one-stream TCP rate in GB/s (median of `reps`), or -1.
double TcpStreamGBps(const NamespacePair& net, const std::string& dir,
                     int reps) {
  const std::string probe = dir + "/tcp_probe.py";
  std::ofstream(probe) << kTcpProbe;
  const std::string bytes = absl::StrCat(uint64_t{1} << 31);
  std::vector<double> rates;
  for (int r = 0; r < reps; ++r) {
    const std::string port = absl::StrCat(29600 + r);
    SubprocessOptions so;
    so.stdout_file = "/dev/null";
    absl::StatusOr<Subprocess> server = Subprocess::Start(
        Cat(net.In(1), {Python(), probe, "server", net.ip(1), port, bytes}),
        so);
    if (!server.ok()) return -1;
    const std::string out = absl::StrCat(dir, "/tcp", r, ".txt");
    absl::Status s = RunCommandToEnd(
        Cat(net.In(0), {Python(), probe, "client", net.ip(1), port, bytes}),
        out, absl::Minutes(2));
    (void)server->Wait(absl::Seconds(10));
    std::ifstream in(out);
    std::string line;
    double gbps = 0;
    if (s.ok() && std::getline(in, line) && absl::SimpleAtod(line, &gbps))
      rates.push_back(gbps);
  }
  return rates.empty() ? -1 : Median(rates);
}

// One shoal run across the two namespaces: a launcher per namespace, the
// harness with `backend`; rank 0 appends its rows to `rows`.
absl::Status RunShoal(const NamespacePair& net, const CollectiveBenchConfig& c,
                      int64_t nproc, const std::string& backend,
                      const std::string& rows, int port) {
  CollectiveBenchConfig cb = c;
  cb.backend = backend;
  // Both "nodes" share this machine's CPUs: each CPU would take a rank of
  // each, and Open MPI's 4 ranks are not bound to cores either.
  cb.bind = false;
  auto launcher = [&](int k) {
    std::vector<std::string> argv =
        Cat(net.In(k),
            {SelfExePath(), "launch", "--nnodes", "2", "--node-rank",
             absl::StrCat(k), "--coordinator",
             absl::StrCat(net.ip(0), ":", port), "--nproc-per-node",
             absl::StrCat(nproc), "--", SelfExePath(), "bench", "collective"});
    argv = Cat(argv, ConfigArgs(cb));
    return Cat(argv, {"--rows", rows});
  };
  SubprocessOptions so;
  so.stdout_file = "/dev/null";
  absl::StatusOr<Subprocess> other = Subprocess::Start(launcher(1), so);
  if (!other.ok()) return other.status();
  absl::Status s = RunCommandToEnd(launcher(0), "/dev/null");
  absl::StatusOr<int> w = other->Wait(absl::Minutes(2));
  if (s.ok() && (!w.ok() || *w != 0)) {
    s = absl::InternalError("the second namespace's launcher failed");
  }
  return s;
}

// Open MPI across the namespaces; "" when it ran, else why not.
std::string RunMpi(const NamespacePair& net, const CollectiveBenchConfig& c,
                   int64_t nproc, const std::string& dir) {
  const bool mpi_type = c.dtype == DType::kF32 || c.dtype == DType::kF64 ||
                        c.dtype == DType::kI32 || c.dtype == DType::kI64;
  if (c.coll != Collective::kAllReduce || !mpi_type ||
      c.op == collectives::ReduceOp::kAvg) {
    return "only all_reduce of f32/f64/i32/i64 with sum/prod/min/max";
  }
  std::ofstream(dir + "/allreduce.c") << MpiAllreduceProgram();
  if (!RunCommandToEnd(
           {"mpicc", "-O2", "-o", dir + "/allreduce", dir + "/allreduce.c"},
           "/dev/null")
           .ok()) {
    return "mpicc not found or failed (install libopenmpi-dev)";
  }
  // mpirun runs in namespace 0; its daemon for the second host is started
  // in namespace 1 by this "remote shell". Each side gets its own UTS
  // namespace and host name: Open MPI tells nodes apart by host name, and
  // with one name for both it would treat all ranks as one node's.
  const std::string rsh = dir + "/netns_rsh.sh";
  std::ofstream(rsh) << "#!/bin/sh\nhost=$1; shift\n"
                     << "if [ \"$host\" = " << net.ip(1) << " ]; then exec ip "
                     << "netns exec " << net.ns(1) << " unshare --uts "
                     << "/bin/sh -c \"hostname shoal-node1; $*\"; fi\n"
                     << "exec /bin/sh -c \"$*\"\n";
  std::system(absl::StrCat("chmod +x ", rsh).c_str());
  std::vector<std::string> mpirun = {
      "mpirun",
      "-np",
      absl::StrCat(2 * nproc),
      "--host",
      absl::StrCat(net.ip(0), ":", nproc, ",", net.ip(1), ":", nproc),
      "--mca",
      "plm_rsh_agent",
      rsh,
      "--mca",
      "btl",
      "self,vader,tcp",
      "--mca",
      "btl_tcp_if_include",
      net.subnet(),
      "--mca",
      "oob_tcp_if_include",
      net.subnet(),
      "--oversubscribe",
      "--mca",
      "mpi_yield_when_idle",
      "1"};
  if (getuid() == 0) mpirun.push_back("--allow-run-as-root");
  mpirun.push_back(dir + "/allreduce");
  mpirun = Cat(mpirun, PeerProgramArgs(c));
  const std::vector<std::string> argv =
      Cat(net.In(0), {"unshare", "--uts", "/bin/sh", "-c",
                      absl::StrCat("hostname shoal-node0; exec ",
                                   absl::StrJoin(mpirun, " "))});
  absl::Status s = RunCommandToEnd(argv, dir + "/mpi.jsonl");
  return s.ok() ? "" : absl::StrCat("mpirun failed: ", s.message());
}

void PrintNodesTable(const CollectiveBenchConfig& c, int64_t nproc, int rounds,
                     const std::string& dir, double tcp_gbps,
                     const std::vector<std::string>& notes, bool json) {
  const std::map<uint64_t, CollectiveRow> hier =
      MedianRowsOf(dir + "/hier.jsonl");
  const std::map<uint64_t, CollectiveRow> flat =
      MedianRowsOf(dir + "/flat.jsonl");
  const std::map<uint64_t, CollectiveRow> mpi =
      MedianRowsOf(dir + "/mpi.jsonl");
  std::map<uint64_t, std::vector<CollectiveRow>> hier_rounds =
      RoundRowsOf(dir + "/hier.jsonl");
  std::map<uint64_t, std::vector<CollectiveRow>> flat_rounds =
      RoundRowsOf(dir + "/flat.jsonl");
  std::map<uint64_t, std::vector<CollectiveRow>> mpi_rounds =
      RoundRowsOf(dir + "/mpi.jsonl");
  const int ranks = static_cast<int>(2 * nproc);
  const double factor = BusFactor(c.coll, ranks);
  auto find = [](const std::map<uint64_t, CollectiveRow>& m,
                 uint64_t b) -> const CollectiveRow* {
    auto it = m.find(b);
    return it == m.end() || it->second.oop_us <= 0 ? nullptr : &it->second;
  };
  auto busbw = [&](const CollectiveRow* r) {
    return r == nullptr ? -1.0 : r->bytes / (r->oop_us * 1e3) * factor;
  };
  auto cell = [](double v, int decimals) {
    return v < 0 ? std::string("-") : absl::StrFormat("%.*f", decimals, v);
  };
  Table t({"size", "shoal us", "shoal busbw", "#wrong", "flat gloo us",
           "gloo busbw", "#wrong", "MPI us", "MPI busbw", "#wrong",
           "shoal/gloo", "shoal/MPI", "algbw/TCP", "shoal min-max",
           "MPI min-max", "shoal/gloo worst", "shoal/MPI worst"});
  for (const auto& [bytes, h] : hier) {
    const CollectiveRow *sh = find(hier, bytes), *gl = find(flat, bytes),
                        *mp = find(mpi, bytes);
    if (json) {
      for (const CollectiveRow* r : {sh, gl, mp}) {
        if (r == nullptr) continue;
        CollectiveRow named = *r;
        if (r == gl) named.system = "gloo (flat, shoal)";
        if (r == sh) named.system = "shoal (hierarchical)";
        std::printf("%s\n", RowToJson(named, c, ranks).c_str());
      }
      continue;
    }
    auto wrong = [](const CollectiveRow* r) {
      return r == nullptr ? std::string("-") : absl::StrCat(r->oop_wrong);
    };
    auto ratio = [&](const CollectiveRow* peer) {
      return sh == nullptr || peer == nullptr
                 ? std::string("-")
                 : absl::StrFormat("%.2fx", peer->oop_us / sh->oop_us);
    };
    const double algbw = sh == nullptr ? -1 : sh->bytes / (sh->oop_us * 1e3);
    t.AddRow(
        {absl::StrCat(bytes), cell(sh ? sh->oop_us : -1, 1), cell(busbw(sh), 3),
         wrong(sh), cell(gl ? gl->oop_us : -1, 1), cell(busbw(gl), 3),
         wrong(gl), cell(mp ? mp->oop_us : -1, 1), cell(busbw(mp), 3),
         wrong(mp), ratio(gl), ratio(mp),
         tcp_gbps > 0 && algbw > 0 ? cell(algbw / tcp_gbps, 2) : "-",
         SpreadCell(hier_rounds[bytes], false),
         SpreadCell(mpi_rounds[bytes], false),
         WorstRoundRatioCell(hier_rounds[bytes], flat_rounds[bytes], false),
         WorstRoundRatioCell(hier_rounds[bytes], mpi_rounds[bytes], false)});
  }
  if (json) return;
  std::printf(
      "\n# --nodes 2: %s %s %s, 2 network namespaces x %lld ranks (veth), "
      "out of place, median of %d round(s); busbw in GB/s (nccl-tests' "
      "definition); shoal/peer = the peer's time over shoal's; min-max: the "
      "fastest and slowest repetition of all rounds; worst: the smallest "
      "ratio of round k to round k\n",
      std::string(CollectiveName(c.coll)).c_str(), NcclTypeName(c.dtype),
      std::string(collectives::ReduceOpName(c.op)).c_str(),
      static_cast<long long>(nproc), rounds);
  std::fputs(t.Render().c_str(), stdout);
  std::printf(
      "# the bound: the veth link's one-stream TCP rate, %.3f GB/s (median of "
      "3 x 2 GiB); algbw/TCP = shoal's algbw over it\n",
      tcp_gbps);
  for (const std::string& n : notes) std::printf("# %s\n", n.c_str());
}

}  // namespace

int OrchestrateNodes(const CollectiveBenchConfig& c, int64_t nproc, int rounds,
                     const std::string& peers, bool json) {
  NamespacePair net;
  if (!net.ok()) {
    std::fprintf(stderr,
                 "shoal bench collective --nodes 2: cannot create network "
                 "namespaces here (needs root and iproute2)\n");
    return 1;
  }
  // A private folder (mkdtemp, 0700): the programs and the remote-shell
  // script written here are run as this user, so no one else may have put
  // anything in it first.
  absl::StatusOr<TempDir> tmp = TempDir::Create("shoal-bench-nodes-");
  if (!tmp.ok()) {
    std::fprintf(stderr, "shoal bench collective --nodes 2: %s\n",
                 std::string(tmp.status().message()).c_str());
    return 1;
  }
  const std::string dir = tmp->path();
  std::vector<std::string> notes;
  const double tcp = TcpStreamGBps(net, dir, 3);
  if (tcp < 0) notes.push_back("the TCP probe failed: no bound measured");
  bool run_mpi = absl::StrContains(peers, "mpi");
  for (int round = 0; round < rounds; ++round) {
    for (const char* backend : {"auto", "gloo"}) {
      if (!json) {
        std::printf(
            "# round %d/%d: %s across the namespaces\n", round + 1, rounds,
            std::strcmp(backend, "auto") == 0 ? "shoal (hierarchical)"
                                              : "flat gloo (--backend gloo)");
        std::fflush(stdout);
      }
      const std::string rows = absl::StrCat(
          dir, std::strcmp(backend, "auto") == 0 ? "/hier" : "/flat", ".jsonl");
      absl::Status s = RunShoal(net, c, nproc, backend, rows,
                                29500 + round * 2 + (backend[0] == 'g'));
      if (!s.ok()) {
        std::fprintf(stderr, "the %s run failed: %s\n", backend,
                     std::string(s.message()).c_str());
        return 1;
      }
    }
    if (run_mpi) {
      if (!json) {
        std::printf("# round %d/%d: Open MPI across the namespaces\n",
                    round + 1, rounds);
        std::fflush(stdout);
      }
      const std::string why = RunMpi(net, c, nproc, dir);
      if (!why.empty()) {
        notes.push_back(absl::StrCat("Open MPI skipped: ", why));
        run_mpi = false;
      }
    }
  }
  if (absl::StrContains(peers, "mpi") && run_mpi) {
    notes.push_back(absl::StrCat(
        "Open MPI: mpirun -np ", 2 * nproc, " --host ", net.ip(0), ":", nproc,
        ",", net.ip(1), ":", nproc,
        " (plm_rsh_agent: ip netns exec + its own UTS namespace per node; btl "
        "self,vader,tcp; mpi_yield_when_idle 1, as ranks share 2 cores) "
        "<MPI_Allreduce "
        "program, mpicc -O2>"));
  }
  notes.push_back(
      "flat gloo: shoal's harness with --backend gloo (every rank in one gloo "
      "context over TCP, shoal's reduction kernels)");
  PrintNodesTable(c, nproc, rounds, dir, tcp, notes, json);
  return 0;  // `tmp` removes the folder
}

}  // namespace shoal::bench
