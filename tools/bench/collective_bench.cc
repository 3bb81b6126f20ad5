// `shoal bench collective` (workload W3): names, bandwidth factors, flags and
// JSON rows shared by the harness and the orchestrator.
#include "tools/bench/collective_bench.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "collectives/reduce/reduce_kernels.h"
#include "tools/bench/bench_util.h"
#include "tools/cli/args.h"

namespace shoal::bench {

absl::string_view CollectiveName(Collective c) {
  switch (c) {
    case Collective::kAllReduce:
      return "all_reduce";
    case Collective::kBroadcast:
      return "broadcast";
    case Collective::kReduce:
      return "reduce";
    case Collective::kAllGather:
      return "all_gather";
    case Collective::kReduceScatter:
      return "reduce_scatter";
    case Collective::kAllToAll:
      return "alltoall";
    case Collective::kSendRecv:
      return "sendrecv";
  }
  return "?";
}

absl::StatusOr<Collective> ParseCollective(absl::string_view name) {
  for (Collective c :
       {Collective::kAllReduce, Collective::kBroadcast, Collective::kReduce,
        Collective::kAllGather, Collective::kReduceScatter,
        Collective::kAllToAll, Collective::kSendRecv}) {
    if (name == CollectiveName(c)) return c;
  }
  if (name == "all_to_all") return Collective::kAllToAll;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown collective '", name,
      "' (all_reduce, broadcast, reduce, all_gather, reduce_scatter, "
      "alltoall, sendrecv)"));
}

double BusFactor(Collective c, int n) {
  switch (c) {
    case Collective::kAllReduce:
      return 2.0 * (n - 1) / n;
    case Collective::kAllGather:
    case Collective::kReduceScatter:
    case Collective::kAllToAll:
      return static_cast<double>(n - 1) / n;
    default:
      return 1.0;
  }
}

int64_t AutoIters(double op_seconds, double target_seconds) {
  if (!(op_seconds > 0)) return 5;
  const double n = std::ceil(target_seconds / op_seconds);
  return static_cast<int64_t>(std::clamp(n, 5.0, 100000.0));
}

const char* NcclTypeName(DType t) {
  switch (t) {
    case DType::kF16:
      return "half";
    case DType::kBF16:
      return "bfloat16";
    case DType::kF32:
      return "float";
    case DType::kF64:
      return "double";
    case DType::kI32:
      return "int32";
    case DType::kI64:
      return "int64";
    default:
      return "?";
  }
}

namespace {

absl::StatusOr<DType> ParseBenchDType(absl::string_view s) {
  for (DType t : {DType::kF16, DType::kBF16, DType::kF32, DType::kF64,
                  DType::kI32, DType::kI64}) {
    if (s == NcclTypeName(t)) return t;
  }
  if (s == "int") return DType::kI32;
  absl::StatusOr<DType> t = ParseDType(s);
  if (!t.ok() || !collectives::IsReducible(*t)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "-d ", s, ": expected float, half, bfloat16, double, int32 or int64"));
  }
  return *t;
}

}  // namespace

std::string RowToJson(const CollectiveRow& r, const CollectiveBenchConfig& c,
                      int n) {
  auto bw = [&](double us) { return us > 0 ? r.bytes / (us * 1e3) : -1.0; };
  JsonRow j;
  j.Add("workload", "W3")
      .Add("system", r.system)
      .Add("collective", CollectiveName(c.coll))
      .Add("nranks", static_cast<int64_t>(n))
      .Add("dtype", DTypeName(c.dtype))
      .Add("op", collectives::ReduceOpName(c.op))
      .Add("bytes", r.bytes)
      .Add("count", r.count)
      .Add("oop_us", r.oop_us)
      .Add("oop_algbw", bw(r.oop_us))
      .Add("oop_busbw", bw(r.oop_us) * BusFactor(c.coll, n))
      .Add("oop_wrong", r.oop_wrong)
      .Add("ip_us", r.ip_us)
      .Add("ip_algbw", bw(r.ip_us))
      .Add("ip_busbw", r.ip_us < 0 ? -1.0 : bw(r.ip_us) * BusFactor(c.coll, n))
      .Add("ip_wrong", r.ip_wrong)
      .Add("oop_lo_us", r.oop_lo_us)
      .Add("oop_hi_us", r.oop_hi_us)
      .Add("ip_lo_us", r.ip_lo_us)
      .Add("ip_hi_us", r.ip_hi_us);
  return j.str();
}

absl::StatusOr<CollectiveRow> RowFromJson(absl::string_view line) {
  auto field = [&](absl::string_view key) -> absl::string_view {
    const std::string k = absl::StrCat("\"", key, "\":");
    size_t at = line.find(k);
    if (at == absl::string_view::npos) return {};
    at += k.size();
    while (at < line.size() && line[at] == ' ') ++at;
    size_t end = at;
    if (at < line.size() && line[at] == '"') {
      end = line.find('"', at + 1);
      return line.substr(at + 1, end - at - 1);
    }
    while (end < line.size() && line[end] != ',' && line[end] != '}') ++end;
    return line.substr(at, end - at);
  };
  CollectiveRow r;
  r.system = std::string(field("system"));
  double bytes = 0, count = 0, ow = 0, iw = 0;
  if (r.system.empty() || !absl::SimpleAtod(field("bytes"), &bytes) ||
      !absl::SimpleAtod(field("oop_us"), &r.oop_us)) {
    return absl::InvalidArgumentError(absl::StrCat("not a W3 row: ", line));
  }
  (void)absl::SimpleAtod(field("count"), &count);
  (void)absl::SimpleAtod(field("ip_us"), &r.ip_us);
  (void)absl::SimpleAtod(field("oop_wrong"), &ow);
  (void)absl::SimpleAtod(field("ip_wrong"), &iw);
  for (auto [key, value] : {std::pair{"oop_lo_us", &r.oop_lo_us},
                            {"oop_hi_us", &r.oop_hi_us},
                            {"ip_lo_us", &r.ip_lo_us},
                            {"ip_hi_us", &r.ip_hi_us}}) {
    if (!absl::SimpleAtod(field(key), value)) *value = -1;
  }
  r.bytes = static_cast<uint64_t>(bytes);
  r.count = static_cast<int64_t>(count);
  r.oop_wrong = static_cast<int64_t>(ow);
  r.ip_wrong = static_cast<int64_t>(iw);
  return r;
}

CollectiveFlags DeclareCollectiveFlags(cli::ArgParser& p) {
  const CollectiveBenchConfig d;
  CollectiveFlags f;
  f.min_bytes = &p.Bytes("minbytes", d.min_bytes, "smallest size (-b)");
  f.max_bytes = &p.Bytes("maxbytes", d.max_bytes, "largest size (-e)");
  f.factor = &p.Int("stepfactor", static_cast<int64_t>(d.factor),
                    "size multiplier (-f)");
  f.iters = &p.Int("iters", d.iters,
                   "timed iterations per repetition; 0: ~20 ms worth (-n)");
  f.warmup = &p.Int("warmup_iters", d.warmup, "untimed iterations first (-w)");
  f.reps = &p.Int("reps", d.reps, "repetitions; the time is their median");
  f.check = &p.Int("check", 1, "check results: 0 or 1 (-c)");
  f.op = &p.String("op", "sum", "sum, prod, min, max, avg (-o)");
  f.dtype = &p.String("datatype", "float",
                      "float, half, bfloat16, double, int32, int64 (-d)");
  f.coll = &p.String("coll", "all_reduce",
                     "all_reduce, broadcast, reduce, all_gather, "
                     "reduce_scatter, alltoall, sendrecv");
  f.root = &p.Int("root", 0, "root of broadcast and reduce (-r)");
  f.bind = &p.Int("bind", d.bind ? 1 : 0,
                  "1: each rank on a CPU of its own where they fit (as "
                  "mpirun's binding of 2 ranks); 0 (default): unbound");
  f.backend = &p.String("backend", d.backend,
                        "auto (host buffers: shm on one node, hierarchical "
                        "across nodes), shm, gloo (flat), nccl (device "
                        "buffers)");
  for (auto [letter, name] :
       std::vector<std::pair<char, const char*>>{{'b', "minbytes"},
                                                 {'e', "maxbytes"},
                                                 {'f', "stepfactor"},
                                                 {'n', "iters"},
                                                 {'w', "warmup_iters"},
                                                 {'c', "check"},
                                                 {'o', "op"},
                                                 {'d', "datatype"},
                                                 {'r', "root"}}) {
    p.Alias(letter, name);
  }
  return f;
}

absl::StatusOr<CollectiveBenchConfig> ConfigFromFlags(
    const CollectiveFlags& f) {
  CollectiveBenchConfig c;
  SHOAL_ASSIGN_OR_RETURN(c.coll, ParseCollective(*f.coll));
  SHOAL_ASSIGN_OR_RETURN(c.dtype, ParseBenchDType(*f.dtype));
  SHOAL_ASSIGN_OR_RETURN(c.op, collectives::ParseReduceOp(*f.op));
  c.min_bytes = *f.min_bytes;
  c.max_bytes = *f.max_bytes;
  if (c.min_bytes == 0 || c.max_bytes < c.min_bytes || *f.factor < 2) {
    return absl::InvalidArgumentError("sizes: need 0 < -b <= -e and -f >= 2");
  }
  c.factor = static_cast<uint64_t>(*f.factor);
  c.iters = *f.iters;
  c.warmup = *f.warmup;
  c.reps = *f.reps;
  if (c.iters < 0 || c.warmup < 0 || c.reps < 1) {
    return absl::InvalidArgumentError("need -n >= 0, -w >= 0, --reps >= 1");
  }
  c.check = *f.check != 0;
  c.root = static_cast<int>(*f.root);
  c.backend = *f.backend;
  c.bind = *f.bind != 0;
  if (c.backend != "auto" && c.backend != "shm" && c.backend != "gloo" &&
      c.backend != "nccl") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--backend ", c.backend, ": expected auto, shm, gloo or nccl"));
  }
  if (c.backend == "nccl" && c.coll == Collective::kSendRecv) {
    return absl::InvalidArgumentError(
        "sendrecv on the nccl backend needs grouped send/recv, which shoal's "
        "Communicator does not offer yet");
  }
  return c;
}

std::vector<std::string> ConfigArgs(const CollectiveBenchConfig& c) {
  return {"-b",        absl::StrCat(c.min_bytes),
          "-e",        absl::StrCat(c.max_bytes),
          "-f",        absl::StrCat(c.factor),
          "-n",        absl::StrCat(c.iters),
          "-w",        absl::StrCat(c.warmup),
          "--reps",    absl::StrCat(c.reps),
          "-c",        c.check ? "1" : "0",
          "-o",        std::string(collectives::ReduceOpName(c.op)),
          "-d",        NcclTypeName(c.dtype),
          "--coll",    std::string(CollectiveName(c.coll)),
          "-r",        absl::StrCat(c.root),
          "--backend", c.backend,
          "--bind",    c.bind ? "1" : "0"};
}

int CpuForLocalRank(const std::vector<int>& allowed, int local_rank,
                    int local_ranks) {
  if (local_ranks > static_cast<int>(allowed.size()) || local_rank < 0 ||
      local_rank >= local_ranks) {
    return -1;
  }
  return allowed[local_rank];
}

}  // namespace shoal::bench
