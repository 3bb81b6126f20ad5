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
  const std::string dir = absl::StrCat(exe.substr(0, slash), "/../python/site");
  char resolved[PATH_MAX];
  if (realpath(dir.c_str(), resolved) == nullptr) return "";
  const std::string init = absl::StrCat(resolved, "/shoal/__init__.py");
  return access(init.c_str(), R_OK) == 0 ? std::string(resolved) : "";
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
