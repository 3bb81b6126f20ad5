#include "tools/bench/bench_util.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "tools/cli/args.h"

namespace shoal::bench {

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t rank =
      static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::min(v.size() - 1, rank == 0 ? 0 : rank - 1)];
}

absl::StatusOr<std::vector<uint64_t>> ParseSizeList(absl::string_view text) {
  std::vector<uint64_t> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    absl::StatusOr<uint64_t> b = cli::ParseBytes(part);
    if (!b.ok()) return b.status();
    out.push_back(*b);
  }
  if (out.empty()) return absl::InvalidArgumentError("no sizes given");
  return out;
}

std::vector<uint64_t> GeometricSizes(uint64_t begin, uint64_t end,
                                     uint64_t factor) {
  std::vector<uint64_t> out;
  if (factor < 2) factor = 2;
  for (uint64_t s = begin; s <= end && s > 0; s *= factor) out.push_back(s);
  return out;
}

uint64_t Checksum(const void* data, uint64_t nbytes) {
  const auto* p = static_cast<const uint64_t*>(data);
  const uint64_t words = nbytes / 8;
  // Four independent sums so the loop is not bound by one dependency chain.
  uint64_t a = 0, b = 0, c = 0, d = 0;
  uint64_t i = 0;
  for (; i + 4 <= words; i += 4) {
    a += p[i];
    b += p[i + 1];
    c += p[i + 2];
    d += p[i + 3];
  }
  for (; i < words; ++i) a += p[i];
  const auto* tail = static_cast<const uint8_t*>(data) + words * 8;
  for (uint64_t j = 0; j < nbytes % 8; ++j) b += tail[j];
  return a + b + c + d;
}

void FillPattern(void* data, uint64_t nbytes, uint64_t seed) {
  auto* p = static_cast<uint64_t*>(data);
  const uint64_t words = nbytes / 8;
  for (uint64_t i = 0; i < words; ++i)
    p[i] = (i + 1) * 0x9E3779B97F4A7C15ULL ^ seed;
  auto* tail = static_cast<uint8_t*>(data) + words * 8;
  for (uint64_t j = 0; j < nbytes % 8; ++j)
    tail[j] = static_cast<uint8_t>(seed + j);
}

std::string Table::Render() const {
  std::vector<size_t> width(headers_.size());
  for (size_t c = 0; c < headers_.size(); ++c) width[c] = headers_[c].size();
  for (const auto& row : rows_) {
    for (size_t c = 0; c < row.size() && c < width.size(); ++c) {
      width[c] = std::max(width[c], row[c].size());
    }
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out;
    for (size_t c = 0; c < width.size(); ++c) {
      const std::string& cell = c < cells.size() ? cells[c] : "";
      absl::StrAppend(&out, c == 0 ? "" : "  ",
                      absl::StrFormat("%*s", static_cast<int>(width[c]), cell));
    }
    return out + "\n";
  };
  std::string out = line(headers_);
  for (const auto& row : rows_) out += line(row);
  return out;
}

void JsonRow::Key(absl::string_view key) {
  if (!body_.empty()) body_ += ", ";
  absl::StrAppend(&body_, "\"", key, "\": ");
}

JsonRow& JsonRow::Add(absl::string_view key, double value) {
  Key(key);
  absl::StrAppend(
      &body_, std::isfinite(value) ? absl::StrFormat("%.6g", value) : "null");
  return *this;
}

JsonRow& JsonRow::Add(absl::string_view key, int64_t value) {
  Key(key);
  absl::StrAppend(&body_, value);
  return *this;
}

JsonRow& JsonRow::Add(absl::string_view key, uint64_t value) {
  Key(key);
  absl::StrAppend(&body_, value);
  return *this;
}

JsonRow& JsonRow::Add(absl::string_view key, absl::string_view value) {
  Key(key);
  std::string escaped;
  for (char c : value) {
    if (c == '"' || c == '\\') escaped += '\\';
    escaped += c;
  }
  absl::StrAppend(&body_, "\"", escaped, "\"");
  return *this;
}

}  // namespace shoal::bench
