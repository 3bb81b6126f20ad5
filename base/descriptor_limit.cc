#include "base/descriptor_limit.h"

#include <sys/resource.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace shoal {

absl::StatusOr<uint64_t> RaiseDescriptorLimit() {
  rlimit l{};
  if (getrlimit(RLIMIT_NOFILE, &l) != 0) {
    return absl::InternalError(
        absl::StrCat("getrlimit(RLIMIT_NOFILE): ", std::strerror(errno)));
  }
  if (l.rlim_cur == l.rlim_max) return static_cast<uint64_t>(l.rlim_cur);
  const rlim_t was = l.rlim_cur;
  l.rlim_cur = l.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &l) != 0) {
    return absl::InternalError(absl::StrCat(
        "setrlimit(RLIMIT_NOFILE) from ", was, " to ", l.rlim_max, ": ",
        std::strerror(errno)));
  }
  return static_cast<uint64_t>(l.rlim_cur);
}

uint64_t DescriptorLimit() {
  rlimit l{};
  if (getrlimit(RLIMIT_NOFILE, &l) != 0) return 1024;
  return l.rlim_cur == RLIM_INFINITY ? uint64_t{1} << 20
                                     : static_cast<uint64_t>(l.rlim_cur);
}

}  // namespace shoal
