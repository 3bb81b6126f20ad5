// What a run leaves behind: a CSV of its loss curve and a PNG of the loss
// curves (this run's, overlaid on others' CSVs), rendered by gnuplot.
#ifndef SHOAL_EXAMPLES_DATA_PARALLEL_REPORT_H_
#define SHOAL_EXAMPLES_DATA_PARALLEL_REPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "examples/data_parallel/train.h"

namespace shoal::dp {

struct RunInfo {
  int ranks = 1;
  int batch = 0;       // per rank
  std::string device;  // "cpu" or "cuda"
};

// One row per step: step,loss,samples_per_s,step_ms,ranks,batch_per_rank,
// device (the last three repeat, so the file describes itself).
absl::Status WriteCsv(const std::string& path,
                      const std::vector<StepRecord>& steps,
                      const RunInfo& info);

struct Curve {
  std::string csv;
  RunInfo info;
  int64_t steps = 0;
  float final_loss = 0;
  double samples_per_second = 0;  // rows after the first `warmup`
  // "2 ranks x 64 (cpu), 21,345 samples/s"
  std::string Label() const;
};

// Reads a CSV written by WriteCsv. Errors: NotFound, InvalidArgument.
absl::StatusOr<Curve> ReadCsv(const std::string& path, int64_t warmup);

// Renders the loss curves (log scale) to `png` with gnuplot, leaving the
// script beside it (png with ".gp"). Errors: NotFound when gnuplot is not
// installed (tools/setup installs gnuplot-nox), Internal when it fails.
absl::Status PlotLoss(const std::string& png, const std::vector<Curve>& curves,
                      const std::string& title);

}  // namespace shoal::dp

#endif  // SHOAL_EXAMPLES_DATA_PARALLEL_REPORT_H_
