// `shoal bench collective` (workload W3): the pieces shared by the rank
// harness (collective_bench.cc, run under `shoal launch`) and the
// orchestrator that runs it beside Open MPI and gloo (collective_peers.cc).
#ifndef SHOAL_TOOLS_BENCH_COLLECTIVE_BENCH_H_
#define SHOAL_TOOLS_BENCH_COLLECTIVE_BENCH_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "collectives/reduce_op.h"
#include "ipc/tensor_meta.h"
#include "tools/cli/args.h"

namespace shoal::bench {

enum class Collective {
  kAllReduce,
  kBroadcast,
  kReduce,
  kAllGather,
  kReduceScatter,
  kAllToAll,
  kSendRecv,
};

// "all_reduce", ... (nccl-tests' names without "_perf").
absl::string_view CollectiveName(Collective c);
absl::StatusOr<Collective> ParseCollective(absl::string_view name);

// nccl-tests' spelling of a dtype: "float", "half", "bfloat16", ...
const char* NcclTypeName(DType t);

// nccl-tests' bus bandwidth factor (doc/PERFORMANCE.md): busbw = algbw ×
// factor, which makes the figure comparable to the hardware's peak whatever
// the rank count:
//   all_reduce                          2(n-1)/n
//   all_gather, reduce_scatter, alltoall (n-1)/n   (size = the whole buffer)
//   broadcast, reduce, sendrecv         1
double BusFactor(Collective c, int nranks);

// Everything a run is configured with (the nccl-tests flags and ours).
struct CollectiveBenchConfig {
  Collective coll = Collective::kAllReduce;
  uint64_t min_bytes = 4 << 10;
  uint64_t max_bytes = 256ull << 20;
  uint64_t factor = 4;
  int64_t iters = 0;  // 0: as many as fill ~20 ms per repetition
  int64_t warmup = 5;
  int64_t reps = 7;
  bool check = true;
  DType dtype = DType::kF32;
  collectives::ReduceOp op = collectives::ReduceOp::kSum;
  int root = 0;
  std::string backend = "auto";
  // Each rank on a CPU of its own when the node's ranks fit on the CPUs
  // this process may use, as mpirun binds 2 ranks (to a core each). Off by
  // default: beside other processes' load, a bound rank cannot leave a busy
  // CPU, and runs were slower bound than unbound.
  bool bind = false;
};

// How many timed iterations make one repetition last about `target_seconds`
// given one operation takes `op_seconds` (clamped to 5 … 100000), for -n 0.
int64_t AutoIters(double op_seconds, double target_seconds = 0.02);

// One measured size, as the rank harness reports it (--rows) and the
// orchestrator reads it back.
struct CollectiveRow {
  std::string system;  // "shoal", "Open MPI", "gloo"
  uint64_t bytes = 0;
  int64_t count = 0;
  double oop_us = -1, ip_us = -1;  // -1: not measured
  int64_t oop_wrong = 0, ip_wrong = 0;
  // The fastest and slowest repetition (each the slowest rank's mean), so
  // that a run whose repetitions split into a fast and a slow mode shows it
  // beside the median. -1: not reported.
  double oop_lo_us = -1, oop_hi_us = -1, ip_lo_us = -1, ip_hi_us = -1;
};

// One JSON object per line ({"system": ..., "bytes": ..., ...}).
std::string RowToJson(const CollectiveRow& row, const CollectiveBenchConfig& c,
                      int nranks);
// Reads the fields RowToJson writes (and the peers' programs print).
absl::StatusOr<CollectiveRow> RowFromJson(absl::string_view line);

// The flags of `shoal bench collective` (nccl-tests' -b -e -f -n -w -c -o -d
// -r, and --coll, --reps, --backend), declared on a parser.
struct CollectiveFlags {
  uint64_t *min_bytes, *max_bytes;
  int64_t *factor, *iters, *warmup, *reps, *check, *root, *bind;
  std::string *op, *dtype, *coll, *backend;
};
CollectiveFlags DeclareCollectiveFlags(cli::ArgParser& p);
// Errors: InvalidArgument naming the bad flag.
absl::StatusOr<CollectiveBenchConfig> ConfigFromFlags(const CollectiveFlags& f);
// The flags that reproduce `c` (to start the harness under `shoal launch`).
std::vector<std::string> ConfigArgs(const CollectiveBenchConfig& c);

// The CPU of the allowed ones `allowed` (sorted) that local rank
// `local_rank` of `local_ranks` takes: the local_rank-th; -1 when the ranks
// outnumber the CPUs (then nothing is bound).
int CpuForLocalRank(const std::vector<int>& allowed, int local_rank,
                    int local_ranks);

// The harness, in a process started by `shoal launch`: rank 0 prints the
// table (or JSON rows with `json`) and appends JSON rows to `rows_file`.
// Returns the exit code (1 if any result was wrong).
int CollectiveBenchRank(const CollectiveBenchConfig& c, bool json,
                        const std::string& rows_file);

// `shoal bench collective --nodes 2` (collective_nodes.cc): two network
// namespaces joined by a veth pair, `nproc` ranks in each; hierarchical shoal,
// flat gloo (--backend gloo) and Open MPI across them, and the link's raw
// one-stream TCP bandwidth. Returns the exit code.
int OrchestrateNodes(const CollectiveBenchConfig& c, int64_t nproc, int rounds,
                     const std::string& peers, bool json);

// Shared by the orchestrators (collective_peers.cc).
// The C source of the Open MPI all_reduce program (argv: PeerProgramArgs).
const char* MpiAllreduceProgram();
std::vector<std::string> PeerProgramArgs(const CollectiveBenchConfig& c);
// Runs argv to completion, stdout appended to `stdout_file` ("" inherits).
// Errors: Internal (non-zero exit), the start's or the wait's.
absl::Status RunCommandToEnd(const std::vector<std::string>& argv,
                             const std::string& stdout_file,
                             absl::Duration limit = absl::Hours(1));
// The rows of a JSON-rows file, one per size: median time over the rounds.
std::map<uint64_t, CollectiveRow> MedianRowsOf(const std::string& file);
// Every round's row of each size, in the order the rounds ran.
std::map<uint64_t, std::vector<CollectiveRow>> RoundRowsOf(
    const std::string& file);
// "lo-hi" µs: the fastest and the slowest repetition over all `rounds` (a
// round's median where its row carries no spread); "-" when none was
// measured.
std::string SpreadCell(const std::vector<CollectiveRow>& rounds, bool in_place);
// The smallest over the rounds of the peer's time over shoal's, round k of
// one beside round k of the other ("0.93x"): shoal's worst round against
// the peer; "-" when either is missing.
std::string WorstRoundRatioCell(const std::vector<CollectiveRow>& shoal,
                                const std::vector<CollectiveRow>& peer,
                                bool in_place);

}  // namespace shoal::bench

#endif  // SHOAL_TOOLS_BENCH_COLLECTIVE_BENCH_H_
