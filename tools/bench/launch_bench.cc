// `shoal bench launch` (workload W4): wall time of
//   shoal launch --nproc-per-node 4 -- <a program that inits, passes one
//   barrier, exits>
// side by side in the same run with `mpirun -np 4` of the same program
// written against MPI (MPI_Init, MPI_Barrier, MPI_Finalize), built here with
// mpicc when Open MPI is installed. The shoal program is this binary's own
// `bench launch-probe` (shoal::launch::Init + Barrier).
#include <unistd.h>

#include <cstdio>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/subprocess.h"
#include "base/temp_dir.h"
#include "launch/job.h"
#include "tools/bench/bench_util.h"
#include "tools/cli/args.h"

namespace shoal::bench {
namespace {

constexpr char kMpiProgram[] = R"C(
#include <mpi.h>
int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Finalize();
  return 0;
}
)C";

// Runs argv to completion; returns the wall time, or a negative number on a
// failure (exit code != 0).
double TimeCommand(const std::vector<std::string>& argv) {
  SubprocessOptions o;
  o.stdout_file = "/dev/null";
  const double t0 = NowSeconds();
  absl::StatusOr<Subprocess> p = Subprocess::Start(argv, o);
  if (!p.ok()) return -1;
  absl::StatusOr<int> status = p->Wait(absl::Minutes(2));
  const double dt = NowSeconds() - t0;
  if (!status.ok() || !WIFEXITED(*status) || WEXITSTATUS(*status) != 0)
    return -1;
  return dt;
}

struct Row {
  std::string system;
  std::string command;
  std::vector<double> times;
  int failed = 0;
};

// Runs `cmd` once untimed, then `iters` times into `row`.
void TimeRuns(const std::vector<std::string>& cmd, int64_t iters, Row* row) {
  for (int i = 0; i <= iters; ++i) {
    const double t = TimeCommand(cmd);
    if (i == 0) continue;
    if (t < 0) {
      ++row->failed;
    } else {
      row->times.push_back(t);
    }
  }
}

// The MPI program, compiled with mpicc in `dir` (a private folder: a name in
// /tmp that someone else made first could hold their program); nullopt when
// mpicc is missing or fails.
std::optional<std::string> BuildMpiBarrier(const TempDir& dir) {
  if (!dir.WriteFile("barrier.c", kMpiProgram).ok()) return std::nullopt;
  const std::string bin = dir.File("barrier");
  if (TimeCommand({"mpicc", "-O2", "-o", bin, dir.File("barrier.c")}) < 0)
    return std::nullopt;
  return bin;
}

// One JSON object per row, or a table under a header line (and the note on
// the MPI peer, if any).
void PrintRows(const std::vector<Row>& rows, bool json, int64_t n,
               const std::string& mpi_note) {
  Table t(
      {"system", "command", "runs", "median s", "min s", "max s", "#failed"});
  for (const Row& r : rows) {
    const double med = Median(r.times), lo = Quantile(r.times, 0),
                 hi = Quantile(r.times, 1);
    if (json) {
      JsonRow j;
      j.Add("workload", "W4")
          .Add("system", r.system)
          .Add("command", r.command)
          .Add("nproc", n)
          .Add("runs", static_cast<int64_t>(r.times.size()))
          .Add("median_s", med)
          .Add("min_s", lo)
          .Add("max_s", hi)
          .Add("failed", static_cast<int64_t>(r.failed));
      std::printf("%s\n", j.str().c_str());
    }
    t.AddRow({r.system, r.command, absl::StrCat(r.times.size()),
              absl::StrFormat("%.3f", med), absl::StrFormat("%.3f", lo),
              absl::StrFormat("%.3f", hi), absl::StrCat(r.failed)});
  }
  if (!json) {
    std::printf("# W4 launch: %lld processes init, pass one barrier, exit\n",
                static_cast<long long>(n));
    std::fputs(t.Render().c_str(), stdout);
    if (!mpi_note.empty()) std::printf("# %s\n", mpi_note.c_str());
  }
}

}  // namespace

int LaunchProbe() {
  auto job = launch::Init();
  if (!job.ok()) {
    std::fprintf(stderr, "%s\n", job.status().ToString().c_str());
    return 3;
  }
  absl::Status s = (*job)->Barrier(absl::Seconds(60));
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 4;
  }
  return 0;
}

int LaunchBench(int argc, char** argv) {
  cli::ArgParser p(
      "shoal bench launch [flags]",
      "Workload W4: wall time to launch N processes that init, pass one\n"
      "barrier and exit, beside mpirun -np N of the same program in MPI.");
  int64_t& n = p.Int("nproc", 4, "processes");
  int64_t& iters = p.Int("iters", 11, "timed runs of each (after one warm-up)");
  bool& json = p.Bool("json", false, "one JSON object per row");
  bool& mpi = p.Bool("mpi", true, "also time mpirun (needs mpicc and mpirun)");
  p.Alias('n', "iters");
  if (absl::Status s = p.Parse(argc, argv); !s.ok()) return cli::Fail(s);

  std::vector<Row> rows;
  Row shoal{"shoal launch", "", {}, 0};
  std::vector<std::string> shoal_cmd = {
      SelfExePath(), "launch", "--nproc-per-node", absl::StrCat(n), "--",
      SelfExePath(), "bench",  "launch-probe"};
  shoal.command = absl::StrCat("shoal launch --nproc-per-node ", n,
                               " -- shoal bench launch-probe");
  rows.push_back(shoal);

  std::string mpi_note;
  absl::StatusOr<TempDir> mpi_dir = TempDir::Create("shoal-bench-mpi-");
  if (mpi && !mpi_dir.ok()) {
    mpi_note =
        absl::StrCat("no folder for the MPI program (",
                     mpi_dir.status().message(), "): the MPI peer was skipped");
  } else if (mpi) {
    std::optional<std::string> bin = BuildMpiBarrier(*mpi_dir);
    if (!bin) {
      mpi_note =
          "mpicc not found or failed: the MPI peer was skipped (install "
          "libopenmpi-dev)";
    } else {
      rows.push_back(
          Row{"mpirun (Open MPI)",
              absl::StrCat("mpirun -np ", n, " --oversubscribe ./barrier"),
              {},
              0});
      // As root, Open MPI needs --allow-run-as-root.
      std::vector<std::string> cmd = {"mpirun", "-np", absl::StrCat(n),
                                      "--oversubscribe"};
      if (getuid() == 0) cmd.push_back("--allow-run-as-root");
      cmd.push_back(*bin);
      TimeRuns(cmd, iters, &rows.back());
    }
  }
  TimeRuns(shoal_cmd, iters, &rows[0]);
  PrintRows(rows, json, n, mpi_note);
  return 0;
}

}  // namespace shoal::bench
