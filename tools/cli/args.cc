#include "tools/cli/args.h"

#include <cmath>
#include <cstdio>
#include <variant>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "base/overloaded.h"

namespace shoal::cli {
namespace {

constexpr absl::string_view kDurationExamples =
    "a duration such as 30 (seconds), 1.5s, 100ms or 2m";

}  // namespace

struct ArgParser::Flag {
  std::string name;
  std::string help;
  std::string def_text;
  // The value; the caller holds a reference to the alternative it declared,
  // which stays valid as Parse only ever assigns that same alternative.
  std::variant<std::string, int64_t, double, bool, uint64_t, absl::Duration>
      value;
  bool seen = false;
};

absl::StatusOr<uint64_t> ParseBytes(absl::string_view text) {
  std::string t = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  absl::string_view v = t;
  uint64_t mult = 1;
  for (absl::string_view suffix : {"ib", "b"}) {
    if (absl::ConsumeSuffix(&v, suffix)) break;
  }
  if (!v.empty()) {
    switch (v.back()) {
      case 'k':
        mult = uint64_t{1} << 10;
        break;
      case 'm':
        mult = uint64_t{1} << 20;
        break;
      case 'g':
        mult = uint64_t{1} << 30;
        break;
      case 't':
        mult = uint64_t{1} << 40;
        break;
      default:
        break;
    }
    if (mult != 1) v.remove_suffix(1);
  }
  double value;
  if (v.empty() || !absl::SimpleAtod(v, &value) || value < 0 ||
      value * mult > 1.8e19) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", text, "' is not a byte size (examples: 4096, 64M, 1.5G)"));
  }
  return static_cast<uint64_t>(value * static_cast<double>(mult));
}

std::string FormatBytes(uint64_t b) {
  static constexpr struct {
    int shift;
    const char* unit;
  } kUnits[] = {{40, "TiB"}, {30, "GiB"}, {20, "MiB"}, {10, "KiB"}};
  for (const auto& u : kUnits) {
    const uint64_t one = uint64_t{1} << u.shift;
    if (b < one) continue;
    if (b % one == 0) return absl::StrCat(b >> u.shift, " ", u.unit);
    return absl::StrFormat(
        "%.1f %s", static_cast<double>(b) / static_cast<double>(one), u.unit);
  }
  return absl::StrCat(b, " B");
}

absl::StatusOr<absl::Duration> ParseSeconds(absl::string_view text) {
  const std::string v(absl::StripAsciiWhitespace(text));
  absl::Duration d;
  bool parsed = false;
  if (double seconds = 0; absl::SimpleAtod(v, &seconds)) {
    // A plain number is seconds, as these flags took before units.
    parsed = std::isfinite(seconds);
    d = absl::Seconds(seconds);
  } else {
    parsed = absl::ParseDuration(v, &d);
  }
  if (!parsed || d < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "' is not ", kDurationExamples));
  }
  return d;
}

ArgParser::ArgParser(std::string usage, std::string summary)
    : usage_(std::move(usage)), summary_(std::move(summary)) {
  Bool("help", false, "show this help and exit");
}

ArgParser::~ArgParser() = default;

template <typename T>
T& ArgParser::Add(const std::string& name, T def, std::string def_text,
                  std::string help) {
  auto f = std::make_unique<Flag>();
  f->name = name;
  f->help = std::move(help);
  f->def_text = std::move(def_text);
  f->value = std::move(def);
  flags_.push_back(std::move(f));
  return std::get<T>(flags_.back()->value);
}

std::string& ArgParser::String(const std::string& name, std::string def,
                               std::string help) {
  std::string def_text = def;
  return Add(name, std::move(def), std::move(def_text), std::move(help));
}

int64_t& ArgParser::Int(const std::string& name, int64_t def,
                        std::string help) {
  return Add(name, def, absl::StrCat(def), std::move(help));
}

double& ArgParser::Double(const std::string& name, double def,
                          std::string help) {
  return Add(name, def, absl::StrCat(def), std::move(help));
}

bool& ArgParser::Bool(const std::string& name, bool def, std::string help) {
  return Add(name, def, def ? "true" : "", std::move(help));
}

uint64_t& ArgParser::Bytes(const std::string& name, uint64_t def,
                           std::string help) {
  return Add(name, def, def == 0 ? "" : FormatBytes(def), std::move(help));
}

absl::Duration& ArgParser::Duration(const std::string& name, absl::Duration def,
                                    std::string help) {
  return Add(name, def,
             def == absl::ZeroDuration() ? "" : absl::FormatDuration(def),
             std::move(help));
}

void ArgParser::Alias(char letter, const std::string& name) {
  aliases_.emplace_back(letter, name);
}

ArgParser::Flag* ArgParser::Find(absl::string_view name) {
  if (name.size() == 1) {
    for (const auto& [letter, full] : aliases_) {
      if (letter == name[0]) return Find(full);
    }
  }
  for (auto& f : flags_) {
    if (f->name == name) return f.get();
  }
  return nullptr;
}

bool ArgParser::seen(const std::string& name) const {
  for (const auto& f : flags_) {
    if (f->name == name) return f->seen;
  }
  return false;
}

absl::Status ArgParser::Set(Flag* f, absl::string_view value) {
  f->seen = true;
  auto bad = [&](absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", f->name, "=", value, ": expected ", what));
  };
  return std::visit(
      Overloaded{
          [&](std::string& s) {
            s = std::string(value);
            return absl::OkStatus();
          },
          [&](int64_t& i) {
            return absl::SimpleAtoi(value, &i) ? absl::OkStatus()
                                               : bad("an integer");
          },
          [&](double& d) {
            return absl::SimpleAtod(value, &d) ? absl::OkStatus()
                                               : bad("a number");
          },
          [&](bool& b) {
            return absl::SimpleAtob(value, &b) ? absl::OkStatus()
                                               : bad("true or false");
          },
          [&](uint64_t& u) {
            absl::StatusOr<uint64_t> bytes = ParseBytes(value);
            if (!bytes.ok()) return bad("a byte size such as 64M or 1G");
            u = *bytes;
            return absl::OkStatus();
          },
          [&](absl::Duration& d) {
            absl::StatusOr<absl::Duration> parsed = ParseSeconds(value);
            if (!parsed.ok()) return bad(kDurationExamples);
            d = *parsed;
            return absl::OkStatus();
          },
      },
      f->value);
}

absl::Status ArgParser::Parse(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") {
      for (int j = i + 1; j < argc; ++j) rest_.push_back(argv[j]);
      break;
    }
    if (arg.size() < 2 || arg[0] != '-' || arg == "-") {
      positional_.push_back(std::string(arg));
      continue;
    }
    absl::string_view body = arg.substr(arg[1] == '-' ? 2 : 1);
    absl::string_view name = body, value;
    bool has_value = false;
    if (size_t eq = body.find('='); eq != absl::string_view::npos) {
      name = body.substr(0, eq);
      value = body.substr(eq + 1);
      has_value = true;
    }
    Flag* f = Find(name);
    if (f == nullptr && absl::StartsWith(name, "no-")) {
      Flag* neg = Find(name.substr(3));
      if (neg != nullptr && std::holds_alternative<bool>(neg->value) &&
          !has_value) {
        neg->seen = true;
        std::get<bool>(neg->value) = false;
        continue;
      }
    }
    if (f == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag '", arg, "' for `",
                       usage_.substr(0, usage_.find(' ', 6)), "`; see --help"));
    }
    if (std::holds_alternative<bool>(f->value) && !has_value) {
      f->seen = true;
      std::get<bool>(f->value) = true;
    } else {
      if (!has_value) {
        if (i + 1 >= argc) {
          return absl::InvalidArgumentError(
              absl::StrCat("--", f->name, " needs a value"));
        }
        value = argv[++i];
      }
      if (absl::Status s = Set(f, value); !s.ok()) return s;
    }
    if (f->name == "help" && std::get<bool>(f->value)) {
      std::fputs(Help().c_str(), stdout);
      return absl::CancelledError("help shown");
    }
  }
  return absl::OkStatus();
}

std::string ArgParser::Help() const {
  std::string out =
      absl::StrCat("usage: ", usage_, "\n\n", summary_, "\n\nflags:\n");
  for (const auto& f : flags_) {
    std::string left = absl::StrCat("  --", f->name);
    for (const auto& [letter, full] : aliases_) {
      if (full == f->name)
        left = absl::StrCat("  -", std::string(1, letter), ", --", f->name);
    }
    absl::StrAppend(&out, absl::StrFormat("%-28s %s", left, f->help));
    if (!f->def_text.empty())
      absl::StrAppend(&out, " (default: ", f->def_text, ")");
    absl::StrAppend(&out, "\n");
  }
  return out;
}

int Fail(const absl::Status& status) {
  if (absl::IsCancelled(status)) return 0;  // --help
  std::fprintf(stderr, "shoal: %s\n", std::string(status.message()).c_str());
  return absl::IsInvalidArgument(status) ? 2 : 1;
}

}  // namespace shoal::cli
