#include "tests/testing/test_env.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "base/subprocess.h"

namespace shoal::testing {

std::string RunfilePath(absl::string_view relative) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  if (srcdir != nullptr && workspace != nullptr) {
    return absl::StrCat(srcdir, "/", workspace, "/", relative);
  }
  // Run outside `bazel test`: next to this binary's runfiles tree.
  return absl::StrCat(SelfExePath(), ".runfiles/shoal/", relative);
}

std::string UniqueJobId() {
  static std::atomic<int> n{0};
  return absl::StrCat("t", getpid(), "-", n.fetch_add(1));
}

bool WaitUntil(const std::function<bool()>& done, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!done()) {
    if (absl::Now() >= deadline) return done();
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

bool ShmExists(absl::string_view name) {
  return access(absl::StrCat("/dev/shm/", name).c_str(), F_OK) == 0;
}

}  // namespace shoal::testing
