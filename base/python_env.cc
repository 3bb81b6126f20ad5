#include "base/python_env.h"

#include <unistd.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/subprocess.h"

namespace shoal {

std::string BundledPythonPackageDir() {
  const std::string exe = SelfExePath();
  const size_t slash = exe.rfind('/');
  if (slash == std::string::npos) return "";
  // Bazel's output (<bin>/tools/shoal, <bin>/python/site/shoal), then an
  // installed wheel (<site-packages>/shoal/_bin/shoal).
  for (const char* relative : {"/../python/site", "/../.."}) {
    const std::string dir = absl::StrCat(exe.substr(0, slash), relative);
    char resolved[PATH_MAX];
    if (realpath(dir.c_str(), resolved) == nullptr) continue;
    const std::string init = absl::StrCat(resolved, "/shoal/__init__.py");
    if (access(init.c_str(), R_OK) == 0) return resolved;
  }
  return "";
}

std::string PythonPathWithBundledPackage(const std::string& pythonpath) {
  const std::string bundled = BundledPythonPackageDir();
  if (bundled.empty()) return pythonpath;
  for (absl::string_view d : absl::StrSplit(pythonpath, ':')) {
    if (d == bundled) return pythonpath;
  }
  return pythonpath.empty() ? bundled : absl::StrCat(pythonpath, ":", bundled);
}

}  // namespace shoal
