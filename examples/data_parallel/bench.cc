// dp_bench (workload W5): samples/s of the data-parallel example with 1 and
// 2 ranks, and the scaling efficiency, in one go.
//
//   bazel build --config=opt //examples/data_parallel:dp_bench //tools:shoal
//   bazel-out/k8-optopt/bin/examples/data_parallel/dp_bench [--json]
//
// Each configuration is a whole `shoal launch` of the example; the example's
// rank 0 times every step (forward, backward, the gradient all-reduce and
// the update) and leaves the first --warmup steps out. Configurations run in
// turn, --rounds times (so a burst of load on the machine hits them alike);
// the table shows each one's median round.
//
//   1 rank x B        the baseline
//   N ranks x B, overlap      weak scaling: the same per-rank batch (as DDP
//                     numbers are usually quoted), the all-reduce overlapped
//                     with backward; efficiency = samples/s ÷ (N × the
//                     baseline's)
//   N ranks x B, no overlap   the same with every bucket posted after backward
//                     (the example's default on the CPU when the ranks have
//                     no core to spare: dp::ChooseOverlap)
//   1 rank x N·B      the same global batch on one rank: what N ranks buy
//                     for a fixed global batch ("speed-up" column)
//   N x 1 rank, apart N independent 1-rank jobs at the same time, samples/s
//                     summed: the N processes' arithmetic with no
//                     communication at all, i.e. the most N ranks can reach
//                     on this machine (its "efficiency" is that ceiling)
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/subprocess.h"
#include "base/temp_dir.h"
#include "examples/data_parallel/model.h"
#include "tools/bench/bench_util.h"
#include "tools/cli/args.h"

namespace shoal::dp {
namespace {

struct Config {
  std::string name;
  int ranks = 1;
  int64_t batch = 64;
  bool overlap = true;
  // > 1: that many independent 1-rank jobs at once (`ranks` is 1), their
  // samples/s summed: N ranks' arithmetic with no communication at all.
  int apart = 1;
  std::vector<std::map<std::string, std::string>> runs;  // their summaries

  int processes() const { return ranks * apart; }

  // The run with the median samples/s (the lower middle for even counts).
  const std::map<std::string, std::string>& Median() const;
  double SamplesPerSecond() const;
};

// key=value pairs of the example's "summary:" line.
std::map<std::string, std::string> ParseSummary(const std::string& line) {
  std::map<std::string, std::string> kv;
  for (absl::string_view field : absl::StrSplit(line.substr(line.find(':') + 1),
                                                ' ', absl::SkipEmpty())) {
    std::pair<std::string, std::string> p = absl::StrSplit(field, '=');
    kv[p.first] = p.second;
  }
  return kv;
}

double Num(const std::map<std::string, std::string>& kv, const std::string& k);

absl::StatusOr<std::map<std::string, std::string>> RunOnce(
    const std::string& shoal, const std::string& program, const Config& c,
    const std::vector<std::string>& common, const std::string& out_dir) {
  std::vector<Subprocess> procs;
  for (int k = 0; k < c.apart; ++k) {
    std::vector<std::string> argv = {shoal,
                                     "launch",
                                     "--nproc-per-node",
                                     absl::StrCat(c.ranks),
                                     "--",
                                     program,
                                     "--batch",
                                     absl::StrCat(c.batch),
                                     c.overlap ? "--overlap" : "--no-overlap"};
    argv.insert(argv.end(), common.begin(), common.end());
    if (c.apart > 1) {
      argv.push_back("--csv");
      argv.push_back(absl::StrCat(out_dir, "/apart_", k, ".csv"));
    }
    SubprocessOptions o;
    o.pipe_stdout = true;
    absl::StatusOr<Subprocess> p = Subprocess::Start(argv, o);
    if (!p.ok()) return p.status();
    procs.push_back(*std::move(p));
  }
  // With --log-every 0 each job prints a few lines: reading one to the end
  // while the others run cannot fill their pipes.
  std::map<std::string, std::string> total;
  double samples = 0, step_ms = 0, wait_ms = 0;
  for (Subprocess& p : procs) {
    std::map<std::string, std::string> summary;
    while (true) {
      absl::StatusOr<std::string> line = p.ReadLine(absl::Minutes(10));
      if (!line.ok()) break;
      if (line->rfind("summary:", 0) == 0) summary = ParseSummary(*line);
    }
    absl::StatusOr<int> status = p.Wait(absl::Minutes(1));
    if (!status.ok()) return status.status();
    if (!WIFEXITED(*status) || WEXITSTATUS(*status) != 0 || summary.empty()) {
      return absl::InternalError(absl::StrCat(
          c.name, ": the run failed (", DescribeWaitStatus(*status), ")"));
    }
    samples += Num(summary, "samples_per_s");
    step_ms += Num(summary, "step_ms") / c.apart;
    wait_ms += Num(summary, "wait_ms") / c.apart;
    if (total.empty()) total = summary;
  }
  // Independent jobs: their samples/s add up; times are their mean.
  total["samples_per_s"] = absl::StrCat(samples);
  total["step_ms"] = absl::StrCat(step_ms);
  total["wait_ms"] = absl::StrCat(wait_ms);
  return total;
}

double Num(const std::map<std::string, std::string>& kv, const std::string& k) {
  double v = 0;
  auto it = kv.find(k);
  if (it != kv.end()) (void)absl::SimpleAtod(it->second, &v);
  return v;
}

const std::map<std::string, std::string>& Config::Median() const {
  std::vector<size_t> order(runs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return Num(runs[a], "samples_per_s") < Num(runs[b], "samples_per_s");
  });
  return runs[order[(order.size() - 1) / 2]];
}

double Config::SamplesPerSecond() const {
  return Num(Median(), "samples_per_s");
}

struct Flags {
  int64_t ranks = 2, batch = 64, steps = 300, warmup = 20, rounds = 3;
  int64_t hidden = 1024;
  std::string device = "cpu";
  bool json = false;
  std::string shoal, program;
  std::vector<std::string> rest;  // more flags for data_parallel
};

// Flags, with the binaries' defaults filled in; nullopt after --help (exit
// 0); an error for a bad flag (exit 2).
absl::StatusOr<std::optional<Flags>> ParseFlags(int argc, char** argv) {
  cli::ArgParser p(
      "dp_bench [flags] [-- more flags for data_parallel]",
      "W5: samples/s of examples/data_parallel with 1 and N ranks under shoal\n"
      "launch, the scaling efficiency, and what overlapping the all-reduce "
      "with\n"
      "backward buys.");
  Flags f;
  int64_t& ranks =
      p.Int("ranks", f.ranks, "N: the multi-rank configurations' size");
  int64_t& batch = p.Int("batch", f.batch, "B: samples per rank and step");
  int64_t& steps = p.Int("steps", f.steps, "steps per run");
  int64_t& warmup =
      p.Int("warmup", f.warmup, "steps per run left out of the timing");
  int64_t& rounds = p.Int("rounds", f.rounds, "times each configuration runs");
  int64_t& hidden = p.Int("hidden", f.hidden, "hidden width of the MLP");
  std::string& device = p.String("device", f.device, "cpu, gpu or auto");
  bool& json = p.Bool("json", false, "one JSON object per row instead");
  std::string& shoal = p.String("shoal", "",
                                "the shoal binary (default: "
                                "found beside this one)");
  std::string& program = p.String("program", "",
                                  "the example (default: "
                                  "found beside this one)");
  if (absl::Status s = p.Parse(argc, argv); !s.ok()) {
    if (absl::IsCancelled(s)) return std::nullopt;
    return s;
  }
  if (ranks < 1)
    return absl::InvalidArgumentError("--ranks must be at least 1");
  f = Flags{ranks,  batch, steps, warmup,  rounds,  hidden,
            device, json,  shoal, program, p.rest()};
  // bazel-bin/examples/data_parallel/dp_bench: the example beside it, shoal
  // in bazel-bin/tools.
  const std::filesystem::path self(SelfExePath());
  if (f.program.empty())
    f.program = (self.parent_path() / "data_parallel").string();
  if (f.shoal.empty()) {
    f.shoal = (self.parent_path().parent_path().parent_path() / "tools/shoal")
                  .string();
  }
  return f;
}

// The configurations of the table (see the top); --ranks 1 (one GPU, say):
// the baseline alone.
std::vector<Config> MakeConfigs(int n, int64_t batch) {
  std::vector<Config> configs = {{"1 rank", 1, batch, true}};
  if (n > 1) {
    configs.push_back({absl::StrCat(n, " ranks, overlap"), n, batch, true});
    configs.push_back({absl::StrCat(n, " ranks, no overlap"), n, batch, false});
    configs.push_back(
        {absl::StrCat("1 rank, batch ", n * batch), 1, n * batch, true});
    Config apart{absl::StrCat(n, " x 1 rank, apart"), 1, batch, true};
    apart.apart = n;
    configs.push_back(std::move(apart));
  }
  return configs;
}

// One row's figures, from its median round.
struct Row {
  double sps, per_rank, gflops, eff, speedup;
};

Row Figures(const Config& c, int n, int64_t batch, int64_t params, double base,
            double same_global) {
  Row r;
  r.sps = c.SamplesPerSecond();
  r.per_rank = r.sps / c.processes();
  // Forward + backward of a dense layer: 6 flops per weight and sample.
  r.gflops = 6.0 * params * r.per_rank / 1e9;
  r.eff = r.sps / (c.processes() * base);
  // Independent jobs have no global batch: no speed-up to speak of.
  r.speedup = n > 1 && c.apart == 1 && c.batch * c.ranks == n * batch
                  ? r.sps / same_global
                  : 0;
  return r;
}

void PrintJsonRow(const Config& c, const Row& r) {
  const std::map<std::string, std::string>& m = c.Median();
  bench::JsonRow row;
  row.Add("workload", "W5")
      .Add("config", c.name)
      .Add("device", m.at("device"))
      .Add("ranks", int64_t{c.processes()})
      .Add("independent_jobs", int64_t{c.apart})
      .Add("batch_per_rank", c.batch)
      .Add("global_batch", c.batch * c.ranks)
      .Add("samples_per_s", r.sps)
      .Add("samples_per_s_per_rank", r.per_rank)
      .Add("gflops_per_rank", r.gflops)
      .Add("step_ms", Num(m, "step_ms"))
      .Add("wait_ms", Num(m, "wait_ms"))
      .Add("final_loss", Num(m, "final_loss"))
      .Add("scaling_efficiency", r.eff);
  if (r.speedup > 0) row.Add("speedup_same_global_batch", r.speedup);
  std::printf("%s\n", row.str().c_str());
}

void PrintReport(const Flags& f, const std::vector<Config>& configs,
                 const ModelSpec& spec, int64_t params) {
  const int n = static_cast<int>(f.ranks);
  const double base = configs[0].SamplesPerSecond();
  double same_global = 0;
  for (const Config& c : configs) {
    if (c.ranks == 1 && c.apart == 1 && c.batch == n * f.batch)
      same_global = c.SamplesPerSecond();
  }
  if (f.json) {
    for (const Config& c : configs) {
      PrintJsonRow(c, Figures(c, n, f.batch, params, base, same_global));
    }
    return;
  }
  std::printf(
      "W5 data-parallel training: MLP %s (%lld parameters, %s of gradients), "
      "device %s, %lld steps (first %lld not timed), median of %lld rounds\n",
      spec.ToString().c_str(), static_cast<long long>(params),
      cli::FormatBytes(4 * params).c_str(),
      configs[0].Median().at("device").c_str(), static_cast<long long>(f.steps),
      static_cast<long long>(f.warmup), static_cast<long long>(f.rounds));
  bench::Table table({"config", "ranks", "batch/rank", "global batch",
                      "samples/s", "per rank", "GFLOP/s/rank", "ms/step",
                      "wait ms", "final loss", "efficiency", "speed-up"});
  for (const Config& c : configs) {
    const std::map<std::string, std::string>& m = c.Median();
    const Row r = Figures(c, n, f.batch, params, base, same_global);
    table.AddRow({c.name, absl::StrCat(c.processes()), absl::StrCat(c.batch),
                  c.apart > 1 ? absl::StrCat(c.batch, " each")
                              : absl::StrCat(c.batch * c.ranks),
                  absl::StrFormat("%.0f", r.sps),
                  absl::StrFormat("%.0f", r.per_rank),
                  absl::StrFormat("%.1f", r.gflops),
                  absl::StrFormat("%.2f", Num(m, "step_ms")),
                  absl::StrFormat("%.2f", Num(m, "wait_ms")),
                  absl::StrFormat("%.4f", Num(m, "final_loss")),
                  c.batch == f.batch ? absl::StrFormat("%.2f", r.eff) : "",
                  r.speedup > 0 ? absl::StrFormat("%.2fx", r.speedup) : ""});
  }
  std::printf("%s", table.Render().c_str());
  std::printf(
      "efficiency = samples/s / (ranks x samples/s of 1 rank x %lld); "
      "speed-up = samples/s / samples/s of 1 rank x %lld (same global "
      "batch); ms/step and wait ms of the median round%s\n",
      static_cast<long long>(f.batch), static_cast<long long>(n * f.batch),
      n > 1 ? absl::StrFormat("; '%d x 1 rank, apart': %d independent jobs "
                              "at once, samples/s summed (no "
                              "communication: the ceiling for %d ranks)",
                              n, n, n)
                  .c_str()
            : "");
}

int Main(int argc, char** argv) {
  absl::StatusOr<std::optional<Flags>> parsed = ParseFlags(argc, argv);
  if (!parsed.ok()) {
    std::fprintf(stderr, "dp_bench: %s\n",
                 std::string(parsed.status().message()).c_str());
    return 2;
  }
  if (!parsed->has_value()) return 0;  // --help
  const Flags& f = **parsed;
  const ModelSpec spec{.hidden = static_cast<int>(f.hidden)};
  // A private folder (mkdtemp, 0700) for the runs' files, removed at the end.
  absl::StatusOr<TempDir> tmp = TempDir::Create("dp_bench_");
  if (!tmp.ok()) {
    std::fprintf(stderr, "dp_bench: %s\n", tmp.status().ToString().c_str());
    return 1;
  }
  const std::string out_dir = tmp->path();
  std::vector<std::string> common = {"--steps",     absl::StrCat(f.steps),
                                     "--warmup",    absl::StrCat(f.warmup),
                                     "--hidden",    absl::StrCat(f.hidden),
                                     "--device",    f.device,
                                     "--log-every", "0",
                                     "--no-png",    "--out-dir",
                                     out_dir};
  common.insert(common.end(), f.rest.begin(), f.rest.end());
  std::vector<Config> configs = MakeConfigs(static_cast<int>(f.ranks), f.batch);
  // Configurations in turn, round after round: a burst of load hits them
  // alike.
  for (int64_t r = 0; r < f.rounds; ++r) {
    for (Config& c : configs) {
      absl::StatusOr<std::map<std::string, std::string>> s =
          RunOnce(f.shoal, f.program, c, common, out_dir);
      if (!s.ok()) {
        std::fprintf(stderr, "dp_bench: %s\n", s.status().ToString().c_str());
        return 1;
      }
      c.runs.push_back(*std::move(s));
    }
  }
  PrintReport(f, configs, spec, ParamLayout(spec).params());
  return 0;
}

}  // namespace
}  // namespace shoal::dp

int main(int argc, char** argv) { return shoal::dp::Main(argc, argv); }
