#include "examples/data_parallel/report.h"

#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"
#include "base/subprocess.h"

namespace shoal::dp {
namespace {

constexpr char kHeader[] =
    "step,loss,samples_per_s,step_ms,ranks,batch_per_rank,device";

// "21345.6" -> "21,346".
std::string Thousands(double v) {
  std::string digits = absl::StrCat(static_cast<int64_t>(v + 0.5));
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// A gnuplot single-quoted string ('' is a quote inside).
std::string Quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    out += c;
    if (c == '\'') out += '\'';
  }
  return out + "'";
}

}  // namespace

absl::Status WriteCsv(const std::string& path,
                      const std::vector<StepRecord>& steps,
                      const RunInfo& info) {
  std::ofstream out(path, std::ios::trunc);
  if (!out) return absl::NotFoundError(absl::StrCat("cannot write ", path));
  out << kHeader << "\n";
  const double global = static_cast<double>(info.ranks) * info.batch;
  for (const StepRecord& s : steps) {
    out << absl::StrFormat("%d,%.7g,%.1f,%.3f,%d,%d,%s\n", s.step + 1, s.loss,
                           s.seconds > 0 ? global / s.seconds : 0.0,
                           1e3 * s.seconds, info.ranks, info.batch,
                           info.device);
  }
  out.close();
  if (!out)
    return absl::InternalError(absl::StrCat("writing ", path, " failed"));
  return absl::OkStatus();
}

std::string Curve::Label() const {
  return absl::StrCat(info.ranks, info.ranks == 1 ? " rank" : " ranks",
                      " x batch ", info.batch, " (", info.device, "), ",
                      Thousands(samples_per_second), " samples/s");
}

absl::StatusOr<Curve> ReadCsv(const std::string& path, int64_t warmup) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::string line;
  if (!std::getline(in, line) || absl::StripAsciiWhitespace(line) != kHeader) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is not a loss CSV of this example"));
  }
  Curve c;
  c.csv = path;
  double seconds = 0;
  int64_t timed = 0;
  while (std::getline(in, line)) {
    std::vector<std::string> f = absl::StrSplit(line, ',');
    int64_t step;
    double loss, step_ms;
    if (f.size() != 7 || !absl::SimpleAtoi(f[0], &step) ||
        !absl::SimpleAtod(f[1], &loss) || !absl::SimpleAtod(f[3], &step_ms) ||
        !absl::SimpleAtoi(f[4], &c.info.ranks) ||
        !absl::SimpleAtoi(f[5], &c.info.batch)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": bad line '", line, "'"));
    }
    c.info.device = f[6];
    c.steps = step;
    c.final_loss = static_cast<float>(loss);
    if (step > warmup) {
      seconds += step_ms / 1e3;
      ++timed;
    }
  }
  if (seconds > 0) {
    c.samples_per_second =
        static_cast<double>(c.info.ranks) * c.info.batch * timed / seconds;
  }
  return c;
}

absl::Status PlotLoss(const std::string& png, const std::vector<Curve>& curves,
                      const std::string& title) {
  const std::string script = absl::StrCat(png, ".gp");
  {
    std::ofstream gp(script, std::ios::trunc);
    if (!gp) return absl::NotFoundError(absl::StrCat("cannot write ", script));
    gp << "# Renders " << png << "; rerun with: gnuplot " << script << "\n"
       << "set terminal pngcairo size 1000,620 font ',11'\n"
       << "set output " << Quoted(png) << "\n"
       << "set title " << Quoted(title) << "\n"
       << "set xlabel 'step'\n"
       << "set ylabel 'training loss (MSE, log scale)'\n"
       << "set logscale y\n"
       << "set autoscale yfix\n"
       << "set ytics (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, "
          "1, 2, 5, 10, 20, 50, 100)\n"
       << "set offsets 0, 0, graph 0.03, graph 0.03\n"
       << "set grid xtics ytics mytics\n"
       << "set key top right box opaque\n"
       << "set datafile separator ','\n";
    std::vector<std::string> plots;
    // References first, wide and light; this run on top, thin and dark: where
    // the curves coincide (as they should for the same global batch) the
    // reference shows as a band around this run's line.
    static constexpr const char* kRefColors[] = {"#f4a6a6", "#a6d8a6",
                                                 "#c9b3e6", "#f2cc8f"};
    for (size_t i = 1; i < curves.size(); ++i) {
      plots.push_back(absl::StrCat(
          Quoted(curves[i].csv), " skip 1 using 1:2 with lines lw 7 lc rgb '",
          kRefColors[(i - 1) % 4], "' title ", Quoted(curves[i].Label())));
    }
    plots.push_back(absl::StrCat(Quoted(curves[0].csv),
                                 " skip 1 using 1:2 with lines lw 1.5 lc rgb "
                                 "'#1f4e9c' title ",
                                 Quoted(curves[0].Label())));
    gp << "plot " << absl::StrJoin(plots, ", \\\n     ") << "\n";
    if (!gp)
      return absl::InternalError(absl::StrCat("writing ", script, " failed"));
  }
  SubprocessOptions o;
  o.stderr_file = absl::StrCat(png, ".log");
  std::remove(o.stderr_file.c_str());
  absl::StatusOr<Subprocess> p = Subprocess::Start({"gnuplot", script}, o);
  if (!p.ok()) {
    return absl::NotFoundError(absl::StrCat(
        "gnuplot is not installed (tools/setup installs gnuplot-nox): ",
        p.status().message()));
  }
  SHOAL_ASSIGN_OR_RETURN(int status, p->Wait(absl::Minutes(1)));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::ifstream err(o.stderr_file);
    std::stringstream ss;
    ss << err.rdbuf();
    return absl::InternalError(
        absl::StrCat("gnuplot ", script, " failed: ", ss.str()));
  }
  std::remove(o.stderr_file.c_str());
  return absl::OkStatus();
}

}  // namespace shoal::dp
