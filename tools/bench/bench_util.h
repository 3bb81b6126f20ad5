// Shared pieces of the `shoal bench` harnesses: timing, statistics, table and
// JSON output.
#ifndef SHOAL_TOOLS_BENCH_BENCH_UTIL_H_
#define SHOAL_TOOLS_BENCH_BENCH_UTIL_H_

#include <time.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shoal::bench {

inline double NowSeconds() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) +
         static_cast<double>(ts.tv_nsec) * 1e-9;
}

// The q-quantile (0..1) of `v`, by nearest rank. 0 for an empty vector.
double Quantile(std::vector<double> v, double q);
inline double Median(std::vector<double> v) {
  return Quantile(std::move(v), 0.5);
}

// Parses "1M,64M,1G" into byte sizes.
absl::StatusOr<std::vector<uint64_t>> ParseSizeList(absl::string_view text);

// Sizes from `begin` to `end` multiplying by `factor` (nccl-tests' -b -e -f).
std::vector<uint64_t> GeometricSizes(uint64_t begin, uint64_t end,
                                     uint64_t factor);

// A sum of 64-bit words (plus the tail bytes), for checking that bytes arrived
// intact; touching every byte is also how a consumer "reads" an object.
uint64_t Checksum(const void* data, uint64_t nbytes);

// Fills `data` with a pattern that depends on `seed` and every word's index.
void FillPattern(void* data, uint64_t nbytes, uint64_t seed);

// A human table: column headers, then rows of already-formatted cells.
class Table {
 public:
  explicit Table(std::vector<std::string> headers)
      : headers_(std::move(headers)) {}
  void AddRow(std::vector<std::string> cells) {
    rows_.push_back(std::move(cells));
  }
  std::string Render() const;

 private:
  std::vector<std::string> headers_;
  std::vector<std::vector<std::string>> rows_;
};

// {"k": v, ...} with numbers unquoted, for --json output.
class JsonRow {
 public:
  JsonRow& Add(absl::string_view key, double value);
  JsonRow& Add(absl::string_view key, int64_t value);
  JsonRow& Add(absl::string_view key, uint64_t value);
  JsonRow& Add(absl::string_view key, absl::string_view value);
  std::string str() const { return "{" + body_ + "}"; }

 private:
  void Key(absl::string_view key);
  std::string body_;
};

}  // namespace shoal::bench

#endif  // SHOAL_TOOLS_BENCH_BENCH_UTIL_H_
