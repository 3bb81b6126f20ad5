// Helpers for tests that run real processes: where the built binaries are,
// unique job ids, and polling for a condition.
#ifndef SHOAL_TESTS_TESTING_TEST_ENV_H_
#define SHOAL_TESTS_TESTING_TEST_ENV_H_

#include <functional>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace shoal::testing {

// Absolute path of a file in the test's runfiles, e.g. "tools/shoal".
std::string RunfilePath(absl::string_view relative);

// A job id unique to this test process and call ("t<pid>-<n>").
std::string UniqueJobId();

// Polls `done` every millisecond or so until it returns true or `timeout`
// passes. Returns the last result.
bool WaitUntil(const std::function<bool()>& done, absl::Duration timeout);

// True if /dev/shm/<name> exists.
bool ShmExists(absl::string_view name);

}  // namespace shoal::testing

#endif  // SHOAL_TESTS_TESTING_TEST_ENV_H_
