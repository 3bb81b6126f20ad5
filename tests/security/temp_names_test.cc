// No source file of the tree makes a temporary name someone else could make
// first (docs/security.md, "Runtime folder and files"): the whole checkout
// (C++, Python, shell: tools/, tests/, python/, examples/, worker/, launch/
// ...) is read and each statement checked against the shapes that did it:
//
//   C/C++   a "/tmp..." literal or std::filesystem::temp_directory_path() in
//           the same statement as getpid(); a `... : "/tmp"` fallback (for
//           TEST_TMPDIR, TMPDIR); "mkdir -p" of a "/tmp..." name through a
//           shell
//   Python  tempfile.mktemp; "/tmp..." with os.getpid() in one statement
//   shell   /tmp/...$$; `mkdir -p /tmp/...`; a redirection into /tmp/...;
//           a TMPDIR / TEST_TMPDIR set to /tmp itself (or ${X:-/tmp})
//
// Temporary folders come from mkdtemp / mktemp -d / tempfile.mkdtemp
// instead (base/temp_dir.h in C++). The tree is found through this file's
// runfile link; SHOAL_TEMP_NAMES_ROOT names another tree to check.
#include <limits.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/testing/test_env.h"

namespace shoal {
namespace {

namespace fs = std::filesystem;

constexpr char kSelf[] = "tests/security/temp_names_test.cc";

// The checkout this test was built from: its runfile links to the source.
std::string SourceRoot() {
  if (const char* r = getenv("SHOAL_TEMP_NAMES_ROOT"); r != nullptr && *r)
    return r;
  char real[PATH_MAX];
  const std::string self = shoal::testing::RunfilePath(kSelf);
  if (realpath(self.c_str(), real) == nullptr) return "";
  std::string path(real);
  if (!absl::EndsWith(path, kSelf)) return "";
  return path.substr(0, path.size() - sizeof(kSelf));
}

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

enum class Lang { kCpp, kPython, kShell, kOther };

Lang LanguageOf(const fs::path& p, const std::string& text) {
  const std::string ext = p.extension().string();
  if (ext == ".cc" || ext == ".h" || ext == ".cpp" || ext == ".c" ||
      ext == ".cu") {
    return Lang::kCpp;
  }
  if (ext == ".py") return Lang::kPython;
  if (ext == ".sh" || ext == ".bash") return Lang::kShell;
  if (absl::StartsWith(text, "#!")) {
    const std::string first = text.substr(0, text.find('\n'));
    if (absl::StrContains(first, "python")) return Lang::kPython;
    if (absl::StrContains(first, "sh")) return Lang::kShell;
  }
  return Lang::kOther;
}

// The text with comments blanked (line structure kept): C++ "//" comments and
// Python/shell "#" comments that start a line (after spaces).
std::string WithoutComments(const std::string& text, Lang lang) {
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  for (std::string& line : lines) {
    const size_t first = line.find_first_not_of(" \t");
    if (first == std::string::npos) continue;
    if (lang == Lang::kCpp && line.compare(first, 2, "//") == 0) line.clear();
    if (lang != Lang::kCpp && line[first] == '#' &&
        line.compare(first, 2, "#!") != 0) {
      line.clear();
    }
  }
  return absl::StrJoin(lines, "\n");
}

struct Finding {
  std::string where;  // path:line
  std::string why;
};

// Checks each statement (C++: up to ';' or a brace; otherwise a line) of
// one file.
void CheckFile(const std::string& rel, const std::string& raw, Lang lang,
               std::vector<Finding>* out) {
  const std::string text = WithoutComments(raw, lang);
  static const std::regex cpp_tmp_literal(R"re("/tmp(/|"|-|\.|_|[A-Za-z]))re");
  static const std::regex cpp_tmp_fallback(R"re(:\s*"/tmp/?")re");
  static const std::regex py_tmp_literal(R"re(["']/tmp(/|["'_.-]|[A-Za-z]))re");
  static const std::regex sh_pid_tmp(R"re(/tmp/[^\s"']*\$\$)re");
  static const std::regex sh_mkdir_tmp(R"re(mkdir\s+-p\s+["']?/tmp/)re");
  static const std::regex sh_redirect_tmp(R"re(>>?\s*["']?/tmp/)re");
  static const std::regex sh_tmpdir_is_tmp(
      R"re(TMPDIR=["']?(\$\{[A-Za-z_]+:-/tmp/?\}|/tmp/?)["']?(\s|;|$))re");
  // Statements with the line each starts on.
  std::vector<std::pair<int, std::string>> statements;
  int line = 1, start_line = 1;
  std::string current;
  const std::string stops = lang == Lang::kCpp ? ";{}" : "\n";
  for (char c : text) {
    if (current.empty() && (c == ' ' || c == '\n' || c == '\t')) {
      if (c == '\n') ++line;
      start_line = line;
      continue;
    }
    current += c;
    if (c == '\n') ++line;
    if (stops.find(c) != std::string::npos ||
        (lang != Lang::kCpp && c == '\n')) {
      statements.emplace_back(start_line, current);
      current.clear();
      start_line = line;
    }
  }
  if (!current.empty()) statements.emplace_back(start_line, current);
  for (const auto& [at, s] : statements) {
    const std::string where = absl::StrCat(rel, ":", at);
    auto flag = [&](const std::string& why) { out->push_back({where, why}); };
    switch (lang) {
      case Lang::kCpp:
        if ((std::regex_search(s, cpp_tmp_literal) ||
             absl::StrContains(s, "temp_directory_path")) &&
            absl::StrContains(s, "getpid(")) {
          flag("a /tmp name built from getpid()");
        }
        if (std::regex_search(s, cpp_tmp_fallback))
          flag("a fallback to the shared /tmp itself");
        if ((absl::StrContains(s, "\"mkdir -p") ||
             absl::StrContains(s, " mkdir -p ")) &&
            absl::StrContains(s, "/tmp")) {
          flag("mkdir -p of a /tmp name (accepts a folder made first)");
        }
        break;
      case Lang::kPython:
        if (absl::StrContains(s, "tempfile.mktemp(") ||
            absl::StrContains(s, "mktemp("))
          flag("tempfile.mktemp (a name, not a file)");
        if (std::regex_search(s, py_tmp_literal) &&
            absl::StrContains(s, "getpid()"))
          flag("a /tmp name built from os.getpid()");
        break;
      case Lang::kShell:
        if (std::regex_search(s, sh_pid_tmp)) flag("a /tmp name built from $$");
        if (std::regex_search(s, sh_mkdir_tmp)) flag("mkdir -p /tmp/...");
        if (std::regex_search(s, sh_redirect_tmp))
          flag("output redirected into a fixed /tmp name");
        if (std::regex_search(s, sh_tmpdir_is_tmp))
          flag("a TMPDIR that may be the shared /tmp itself");
        break;
      case Lang::kOther:
        break;
    }
  }
}

std::vector<Finding> CheckTree(const std::string& root) {
  std::vector<Finding> found;
  fs::recursive_directory_iterator it(
      root, fs::directory_options::skip_permission_denied);
  for (; it != fs::recursive_directory_iterator(); ++it) {
    const fs::path& p = it->path();
    const std::string name = p.filename().string();
    if (it->is_symlink()) continue;  // bazel-* output links, among others
    if (it->is_directory()) {
      // Hidden folders (.git, the virtual environments benchmarks and
      // tests make, caches) hold no source of shoal's.
      if (absl::StartsWith(name, ".") || name == "third_party" ||
          name == "__pycache__" || name == "node_modules" ||
          absl::StartsWith(name, "bazel-")) {
        it.disable_recursion_pending();
      }
      continue;
    }
    if (!it->is_regular_file() || it->file_size() > (2 << 20)) continue;
    const std::string rel = fs::relative(p, root).string();
    if (rel == kSelf) continue;  // its patterns are text here
    const std::string text = ReadAll(p);
    const Lang lang = LanguageOf(p, text);
    if (lang == Lang::kOther) continue;
    CheckFile(rel, text, lang, &found);
  }
  return found;
}

// The checker itself, on the shapes the tree had: each is found.
TEST(TempNames, TheCheckFindsEveryShape) {
  struct Case {
    const char* file;
    Lang lang;
    const char* text;
  };
  const std::vector<Case> bad = {
      {"a.cc", Lang::kCpp,
       "  const std::string dir = absl::StrCat(\"/tmp/shoal-bench-mpi-\", "
       "getpid());\n"},
      {"b.cc", Lang::kCpp,
       "  dir_ = new std::string(absl::StrCat(\n"
       "      std::getenv(\"TEST_TMPDIR\") ? std::getenv(\"TEST_TMPDIR\") : "
       "\"/tmp\",\n      \"/pyrunner-\", getpid()));\n"},
      {"c.cc", Lang::kCpp,
       "  std::system(\"rm -rf /tmp/shoal-x && mkdir -p /tmp/shoal-x\");\n"},
      {"d.cc", Lang::kCpp,
       "  const std::string out = absl::StrCat(\n"
       "      std::filesystem::temp_directory_path().string(), \"/x_\", "
       "getpid());\n"},
      {"e.cc", Lang::kCpp,
       "  root_ = std::filesystem::path(tmp != nullptr ? tmp : \"/tmp\") / "
       "name;\n"},
      {"f.py", Lang::kPython, "path = tempfile.mktemp()\n"},
      {"g.py", Lang::kPython, "p = f\"/tmp/shoal-{os.getpid()}.sock\"\n"},
      {"h.sh", Lang::kShell, "out=/tmp/run-$$.log\n"},
      {"i.sh", Lang::kShell, "mkdir -p /tmp/shoal-out\n"},
      {"j.sh", Lang::kShell, "make > /tmp/build.log\n"},
      {"k.sh", Lang::kShell,
       "export TEST_SRCDIR=\"$HERE\" TEST_TMPDIR=${TMPDIR:-/tmp}\n"},
  };
  for (const Case& c : bad) {
    std::vector<Finding> found;
    CheckFile(c.file, c.text, c.lang, &found);
    EXPECT_FALSE(found.empty()) << c.file << " was not found: " << c.text;
  }
  const std::vector<Case> good = {
      {"a.cc", Lang::kCpp,
       "  absl::StatusOr<TempDir> d = TempDir::Create(\"shoal-bench-mpi-\");\n"
       "  if (mkdtemp(templ.data()) == nullptr) return Err();\n"
       "  // comment: /tmp/shoal-<pid> built from getpid() once\n"
       "  const std::string job = absl::StrCat(\"bench-\", getpid());\n"
       "  system(absl::StrCat(\"mkdir -p \", private_dir, "
       "\"/sub\").c_str());\n"},
      {"b.py", Lang::kPython,
       "rt = tempfile.mkdtemp(prefix=\"shoal-pc-\", dir=\"/tmp\")\n"
       "job = f\"pc{os.getpid()}\"\n"},
      {"c.sh", Lang::kShell,
       "work=\"$(mktemp -d /tmp/shoal-install-check.XXXXXX)\"\n"
       "job=\"install-check-$$\"\nmkdir -p \"$OUT\"\n"},
  };
  for (const Case& c : good) {
    std::vector<Finding> found;
    CheckFile(c.file, c.text, c.lang, &found);
    EXPECT_TRUE(found.empty()) << c.file << ": " << found[0].why;
  }
}

TEST(TempNames, NoSourceFileMakesAGuessableTemporaryName) {
  const std::string root = SourceRoot();
  ASSERT_FALSE(root.empty()) << "the source tree was not found";
  ASSERT_TRUE(fs::exists(fs::path(root) / "WORKSPACE")) << root;
  // The check reached the files it is about.
  ASSERT_TRUE(fs::exists(fs::path(root) / "tools/bench/launch_bench.cc"));
  std::vector<Finding> found = CheckTree(root);
  std::vector<std::string> lines;
  for (const Finding& f : found)
    lines.push_back(absl::StrCat(f.where, ": ", f.why));
  EXPECT_TRUE(found.empty()) << "in " << root << ":\n"
                             << absl::StrJoin(lines, "\n");
}

}  // namespace
}  // namespace shoal
