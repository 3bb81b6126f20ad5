#include "tools/bench/tasks_bench_interleave.h"

#include <cstdio>
#include <utility>

#include "base/status_macros.h"
#include "tools/bench/bench_util.h"

namespace shoal::bench {

int64_t MachineContextSwitches() {
  std::FILE* f = std::fopen("/proc/stat", "r");
  if (f == nullptr) return -1;
  char line[512];
  long long ctxt = -1;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::sscanf(line, "ctxt %lld", &ctxt) == 1) break;
  }
  std::fclose(f);
  return ctxt;
}

absl::StatusOr<std::vector<InterleavedLatency>> MeasureInterleaved(
    const std::vector<InterleavedSystem>& systems,
    const InterleaveOptions& options) {
  if (systems.empty()) return absl::InvalidArgumentError("no systems");
  if (options.blocks < 1 || options.per_block < 1 || options.warmup < 0) {
    return absl::InvalidArgumentError(
        "blocks and per_block must be >= 1, warmup >= 0");
  }
  const std::function<double()> now =
      options.now ? options.now : std::function<double()>(NowSeconds);
  const std::function<int64_t()> switches =
      options.switches ? options.switches
                       : std::function<int64_t()>(MachineContextSwitches);
  std::vector<InterleavedLatency> out(systems.size());
  for (size_t s = 0; s < systems.size(); ++s) {
    out[s].name = systems[s].name;
    out[s].samples.reserve(static_cast<size_t>(options.blocks) *
                           options.per_block);
    for (int i = 0; i < options.warmup; ++i) {
      SHOAL_RETURN_IF_ERROR(systems[s].one());
    }
  }
  const size_t n = systems.size();
  std::vector<int64_t> switched(n, 0);
  bool counted = true;
  std::vector<double> block;
  for (int b = 0; b < options.blocks; ++b) {
    for (size_t k = 0; k < n; ++k) {
      // Forward in even blocks, backward in odd ones.
      const size_t s = b % 2 == 0 ? k : n - 1 - k;
      block.clear();
      const int64_t before = switches();
      for (int i = 0; i < options.per_block; ++i) {
        const double t0 = now();
        SHOAL_RETURN_IF_ERROR(systems[s].one());
        block.push_back(now() - t0);
      }
      const int64_t after = switches();
      counted &= before >= 0 && after >= before;
      switched[s] += after - before;
      out[s].block_p50.push_back(Median(block));
      out[s].samples.insert(out[s].samples.end(), block.begin(), block.end());
    }
  }
  for (size_t s = 0; s < n; ++s) {
    InterleavedLatency& l = out[s];
    l.p50_us = Median(l.samples) * 1e6;
    l.p99_us = Quantile(l.samples, 0.99) * 1e6;
    if (counted) {
      l.switches_per_op = static_cast<double>(switched[s]) /
                          static_cast<double>(l.samples.size());
    }
  }
  return out;
}

std::vector<double> BlockRatios(const InterleavedLatency& a,
                                const InterleavedLatency& b) {
  std::vector<double> r;
  for (size_t i = 0; i < a.block_p50.size() && i < b.block_p50.size(); ++i) {
    r.push_back(b.block_p50[i] > 0 ? a.block_p50[i] / b.block_p50[i] : 0);
  }
  return r;
}

}  // namespace shoal::bench
