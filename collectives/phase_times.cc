#include "collectives/phase_times.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"

namespace shoal::collectives {

PhaseTimes::PhaseTimes(std::string label, std::vector<std::string> phases)
    : label_(std::move(label)), phases_(std::move(phases)) {
  const char* dir = std::getenv("SHOAL_COLL_TRACE");
  if (dir == nullptr || *dir == '\0') return;
  dir_ = dir;
  samples_.resize(phases_.size());
  for (std::vector<float>& s : samples_) s.reserve(4096);
  const char* raw = std::getenv("SHOAL_COLL_TRACE_RAW");
  raw_ = raw != nullptr && std::string(raw) == "1";
}

PhaseTimes::~PhaseTimes() {
  if (!enabled() || samples_.empty() || samples_[0].empty()) return;
  if (raw_) {
    const std::string raw_path =
        absl::StrCat(dir_, "/", label_, ".", getpid(), ".raw");
    if (FILE* r = std::fopen(raw_path.c_str(), "w"); r != nullptr) {
      for (const RawEvent& e : raw_events_) {
        std::fprintf(r, "%lld %d %ld %ld\n", static_cast<long long>(e.ns),
                     e.phase, e.nvcsw, e.nivcsw);
      }
      std::fclose(r);
    }
  }
  const std::string path =
      absl::StrCat(dir_, "/", label_, ".", getpid(), ".txt");
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return;  // a debugging aid: nothing to report to
  std::fprintf(f, "# %s (pid %d): per phase, us\n", label_.c_str(),
               static_cast<int>(getpid()));
  std::fprintf(f, "%-16s %8s %9s %9s %9s %9s %9s %9s\n", "phase", "count",
               "p10", "p50", "p90", "p99", "max", "mean");
  for (size_t p = 0; p < phases_.size(); ++p) {
    std::vector<float> s = samples_[p];
    if (s.empty()) continue;
    std::sort(s.begin(), s.end());
    double sum = 0;
    for (float v : s) sum += v;
    std::fprintf(f, "%-16s %8zu %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f\n",
                 phases_[p].c_str(), s.size(), s[s.size() / 10],
                 s[s.size() / 2], s[s.size() * 9 / 10], s[s.size() * 99 / 100],
                 s.back(), sum / s.size());
  }
  std::fclose(f);
}

}  // namespace shoal::collectives
