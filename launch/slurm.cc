#include "launch/slurm.h"

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace shoal::launch {
namespace {

// At most this many digits per bound, so any bound fits in uint64_t.
constexpr size_t kMaxDigits = 18;

std::string Quote(absl::string_view s) {
  return absl::StrCat("\"", absl::CHexEscape(s), "\"");
}

absl::Status NodelistError(absl::string_view item, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("Slurm node list item ", Quote(item), ": ", what));
}

bool HasAsciiWhitespace(absl::string_view s) {
  for (char c : s) {
    if (absl::ascii_isspace(static_cast<unsigned char>(c))) return true;
  }
  return false;
}

// One number or range inside a bracket group, e.g. "07" or "01-04".
struct Range {
  uint64_t start = 0;
  uint64_t end = 0;
  size_t width = 0;  // digits written for the start: the zero-padded width
};

// One piece of an item: literal text, or a bracket group's ranges.
struct Piece {
  std::string literal;
  std::vector<Range> ranges;  // empty for a literal
  uint64_t count = 1;         // values this piece takes
};

absl::StatusOr<uint64_t> ParseBound(absl::string_view item,
                                    absl::string_view bound) {
  if (bound.empty() || bound.size() > kMaxDigits) {
    return NodelistError(
        item, absl::StrCat("bound ", Quote(bound), " is not a number of 1 to ",
                           kMaxDigits, " digits"));
  }
  uint64_t value = 0;
  for (char c : bound) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) {
      return NodelistError(
          item, absl::StrCat("bound ", Quote(bound), " is not a number"));
    }
    value = value * 10 + static_cast<uint64_t>(c - '0');
  }
  return value;
}

// Parses the inside of a bracket group, e.g. "01-04,07".
absl::StatusOr<Piece> ParseGroup(absl::string_view item,
                                 absl::string_view group) {
  Piece piece;
  piece.count = 0;
  if (group.empty()) return NodelistError(item, "empty bracket group \"[]\"");
  for (absl::string_view element : absl::StrSplit(group, ',')) {
    if (element.empty()) {
      return NodelistError(
          item, absl::StrCat("empty element in bracket group ", Quote(group)));
    }
    std::vector<absl::string_view> bounds = absl::StrSplit(element, '-');
    if (bounds.size() > 2) {
      return NodelistError(item, absl::StrCat("range ", Quote(element),
                                              " is not a number or start-end"));
    }
    Range range;
    absl::StatusOr<uint64_t> start = ParseBound(item, bounds[0]);
    if (!start.ok()) return start.status();
    range.start = range.end = *start;
    range.width = bounds[0].size();
    if (bounds.size() == 2) {
      absl::StatusOr<uint64_t> end = ParseBound(item, bounds[1]);
      if (!end.ok()) return end.status();
      if (*end < *start) {
        return NodelistError(item, absl::StrCat("range ", Quote(element),
                                                " ends before it starts"));
      }
      range.end = *end;
    }
    // Both terms are below 10^18 + 1 and capped below, so no overflow.
    piece.count += range.end - range.start + 1;
    if (piece.count > kMaxSlurmHosts) {
      return NodelistError(item, absl::StrCat("expands to more than ",
                                              kMaxSlurmHosts, " hosts"));
    }
    piece.ranges.push_back(range);
  }
  return piece;
}

// Splits an item into literal and bracket-group pieces.
absl::StatusOr<std::vector<Piece>> ParseItem(absl::string_view item) {
  std::vector<Piece> pieces;
  size_t pos = 0;
  while (pos < item.size()) {
    size_t open = item.find_first_of("[]", pos);
    if (open == absl::string_view::npos) {
      pieces.push_back(Piece{.literal = std::string(item.substr(pos))});
      break;
    }
    if (item[open] == ']') return NodelistError(item, "unbalanced \"]\"");
    if (open > pos) {
      pieces.push_back(
          Piece{.literal = std::string(item.substr(pos, open - pos))});
    }
    size_t close = item.find_first_of("[]", open + 1);
    if (close == absl::string_view::npos) {
      return NodelistError(item, "unbalanced \"[\"");
    }
    if (item[close] == '[') return NodelistError(item, "nested \"[\"");
    absl::StatusOr<Piece> group =
        ParseGroup(item, item.substr(open + 1, close - open - 1));
    if (!group.ok()) return group.status();
    pieces.push_back(*std::move(group));
    pos = close + 1;
  }
  return pieces;
}

// The value-th (0-based) number a bracket group takes, zero-padded.
std::string GroupValue(const Piece& piece, uint64_t value) {
  for (const Range& range : piece.ranges) {
    uint64_t size = range.end - range.start + 1;
    if (value < size) {
      std::string digits = absl::StrCat(range.start + value);
      if (digits.size() < range.width) {
        digits.insert(0, range.width - digits.size(), '0');
      }
      return digits;
    }
    value -= size;
  }
  return "";  // unreachable: value < piece.count
}

// Appends an item's hosts: the cartesian product of its pieces, the leftmost
// piece varying slowest.
void AppendHosts(const std::vector<Piece>& pieces, uint64_t count,
                 std::vector<std::string>& hosts) {
  std::vector<uint64_t> index(pieces.size(), 0);
  for (uint64_t n = 0; n < count; ++n) {
    std::string host;
    for (size_t i = 0; i < pieces.size(); ++i) {
      if (pieces[i].ranges.empty()) {
        absl::StrAppend(&host, pieces[i].literal);
      } else {
        absl::StrAppend(&host, GroupValue(pieces[i], index[i]));
      }
    }
    hosts.push_back(std::move(host));
    for (size_t i = pieces.size(); i-- > 0;) {
      if (++index[i] < pieces[i].count) break;
      index[i] = 0;
    }
  }
}

using Getenv = std::function<std::optional<std::string>(absl::string_view)>;

absl::Status EnvError(absl::string_view name, absl::string_view what) {
  // `what` starts with " is ..." or "=value ...".
  return absl::InvalidArgumentError(absl::StrCat("Slurm: ", name, what));
}

// The first of `names` that is set (even if empty); name and value.
std::optional<std::pair<std::string, std::string>> FirstSet(
    const Getenv& getenv, std::initializer_list<absl::string_view> names) {
  for (absl::string_view name : names) {
    std::optional<std::string> value = getenv(name);
    if (value.has_value()) {
      return std::make_pair(std::string(name), *std::move(value));
    }
  }
  return std::nullopt;
}

absl::StatusOr<std::pair<std::string, std::string>> Required(
    const Getenv& getenv, std::initializer_list<absl::string_view> names) {
  std::optional<std::pair<std::string, std::string>> found =
      FirstSet(getenv, names);
  std::string all;
  for (absl::string_view name : names) {
    absl::StrAppend(&all, all.empty() ? "" : " or ", name);
  }
  if (!found.has_value()) {
    return EnvError(all, " is not set (inside a Slurm job, SLURM_JOB_ID is)");
  }
  if (absl::StripAsciiWhitespace(found->second).empty()) {
    return EnvError(found->first, " is set but empty");
  }
  return *std::move(found);
}

absl::StatusOr<int> ParseInt(absl::string_view name, absl::string_view value) {
  int result = 0;
  if (!absl::SimpleAtoi(value, &result)) {
    return EnvError(name,
                    absl::StrCat("=", Quote(value), " is not an integer"));
  }
  return result;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ExpandSlurmNodelist(
    absl::string_view list) {
  if (absl::StripAsciiWhitespace(list).empty()) {
    return absl::InvalidArgumentError("Slurm node list is empty");
  }
  // Split at top-level commas; brackets are checked again per item.
  std::vector<absl::string_view> items;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= list.size(); ++i) {
    if (i == list.size() || (list[i] == ',' && depth == 0)) {
      items.push_back(list.substr(start, i - start));
      start = i + 1;
    } else if (list[i] == '[') {
      ++depth;
    } else if (list[i] == ']' && depth > 0) {
      --depth;
    }
  }

  std::vector<std::vector<Piece>> parsed;
  std::vector<uint64_t> counts;
  uint64_t total = 0;
  for (absl::string_view raw : items) {
    absl::string_view item = absl::StripAsciiWhitespace(raw);
    if (item.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("Slurm node list ", Quote(list), " has an empty item"));
    }
    if (HasAsciiWhitespace(item)) {
      return NodelistError(item, "contains whitespace");
    }
    absl::StatusOr<std::vector<Piece>> pieces = ParseItem(item);
    if (!pieces.ok()) return pieces.status();
    uint64_t count = 1;
    for (const Piece& piece : *pieces) {
      // count and piece.count are both <= kMaxSlurmHosts: no overflow.
      count *= piece.count;
      if (count > kMaxSlurmHosts) {
        return NodelistError(item, absl::StrCat("expands to more than ",
                                                kMaxSlurmHosts, " hosts"));
      }
    }
    total += count;
    if (total > kMaxSlurmHosts) {
      return absl::InvalidArgumentError(
          absl::StrCat("Slurm node list expands to more than ", kMaxSlurmHosts,
                       " hosts (at item ", Quote(item), ")"));
    }
    parsed.push_back(*std::move(pieces));
    counts.push_back(count);
  }

  std::vector<std::string> hosts;
  hosts.reserve(total);
  for (size_t i = 0; i < parsed.size(); ++i) {
    AppendHosts(parsed[i], counts[i], hosts);
  }
  return hosts;
}

absl::StatusOr<std::optional<SlurmJob>> SlurmJobFromEnvironment(
    const Getenv& getenv) {
  std::optional<std::string> job_id = getenv("SLURM_JOB_ID");
  if (!job_id.has_value()) return std::nullopt;
  if (absl::StripAsciiWhitespace(*job_id).empty()) {
    return EnvError("SLURM_JOB_ID", " is set but empty");
  }
  SlurmJob job;
  job.job_id = *std::move(job_id);

  absl::StatusOr<std::pair<std::string, std::string>> nnodes =
      Required(getenv, {"SLURM_NNODES", "SLURM_JOB_NUM_NODES"});
  if (!nnodes.ok()) return nnodes.status();
  absl::StatusOr<int> n = ParseInt(nnodes->first, nnodes->second);
  if (!n.ok()) return n.status();
  if (*n < 1) {
    return EnvError(nnodes->first,
                    absl::StrCat("=", Quote(nnodes->second), " is not >= 1"));
  }
  job.nnodes = *n;

  absl::StatusOr<std::pair<std::string, std::string>> nodeid =
      Required(getenv, {"SLURM_NODEID"});
  if (!nodeid.ok()) return nodeid.status();
  absl::StatusOr<int> rank = ParseInt(nodeid->first, nodeid->second);
  if (!rank.ok()) return rank.status();
  if (*rank < 0 || *rank >= job.nnodes) {
    return EnvError(
        nodeid->first,
        absl::StrCat("=", Quote(nodeid->second), " is outside [0, ", job.nnodes,
                     ") (", nnodes->first, "=", job.nnodes, ")"));
  }
  job.node_rank = *rank;

  absl::StatusOr<std::pair<std::string, std::string>> nodelist =
      Required(getenv, {"SLURM_JOB_NODELIST", "SLURM_NODELIST"});
  if (!nodelist.ok()) return nodelist.status();
  absl::StatusOr<std::vector<std::string>> hosts =
      ExpandSlurmNodelist(nodelist->second);
  if (!hosts.ok()) {
    return EnvError(nodelist->first,
                    absl::StrCat("=", Quote(nodelist->second), ": ",
                                 hosts.status().message()));
  }
  if (hosts->size() != static_cast<size_t>(job.nnodes)) {
    return EnvError(
        nodelist->first,
        absl::StrCat("=", Quote(nodelist->second), " names ", hosts->size(),
                     " hosts but ", nnodes->first, "=", job.nnodes));
  }
  job.hosts = *std::move(hosts);
  job.head_host = job.hosts.front();

  std::optional<std::string> tasks = getenv("SLURM_NTASKS_PER_NODE");
  if (tasks.has_value()) {
    absl::string_view value = absl::StripAsciiWhitespace(*tasks);
    size_t digits = 0;
    while (digits < value.size() &&
           absl::ascii_isdigit(static_cast<unsigned char>(value[digits]))) {
      ++digits;
    }
    absl::string_view rest = value.substr(digits);
    int per_node = 0;
    if (digits == 0 ||
        !(rest.empty() || rest.front() == '(' || rest.front() == ',') ||
        !absl::SimpleAtoi(value.substr(0, digits), &per_node) || per_node < 1) {
      return EnvError("SLURM_NTASKS_PER_NODE",
                      absl::StrCat("=", Quote(*tasks),
                                   " does not start with a number >= 1"));
    }
    job.ntasks_per_node = per_node;
  }
  return job;
}

absl::StatusOr<std::optional<SlurmJob>> SlurmJobFromEnvironment() {
  return SlurmJobFromEnvironment(
      [](absl::string_view name) -> std::optional<std::string> {
        const char* value = std::getenv(std::string(name).c_str());
        if (value == nullptr) return std::nullopt;
        return std::string(value);
      });
}

}  // namespace shoal::launch
