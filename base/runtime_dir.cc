#include "base/runtime_dir.h"

#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"

namespace shoal {
namespace {

absl::Status MakeDir(const std::string& path) {
  if (mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
    return SHOAL_ERRNO(absl::StrCat("mkdir ", path));
  }
  return absl::OkStatus();
}

}  // namespace

std::string RuntimeRoot() {
  if (const char* d = std::getenv("SHOAL_RUNTIME_DIR"); d != nullptr && *d)
    return d;
  if (const char* d = std::getenv("XDG_RUNTIME_DIR"); d != nullptr && *d) {
    return absl::StrCat(d, "/shoal");
  }
  return absl::StrCat("/tmp/shoal-", getuid());
}

absl::Status CheckJobId(absl::string_view job_id) {
  if (job_id.empty() || job_id.size() > 48) {
    return absl::InvalidArgumentError(
        absl::StrCat("job id must be 1-48 characters, got '", job_id, "'"));
  }
  for (char c : job_id) {
    if (!(absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' ||
          c == '-' || c == '.')) {
      return absl::InvalidArgumentError(
          absl::StrCat("job id '", job_id,
                       "' may hold only letters, digits, '_', '-' and '.'"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> JobDir(absl::string_view job_id) {
  SHOAL_RETURN_IF_ERROR(CheckJobId(job_id));
  const std::string root = RuntimeRoot();
  const std::string dir = absl::StrCat(root, "/", job_id);
  // Leave room for the longest socket name we put there ("/coordinator.sock").
  if (dir.size() + 24 > 107) {
    return absl::FailedPreconditionError(
        absl::StrCat("runtime directory '", dir,
                     "' is too long for ipc:// sockets; set SHOAL_RUNTIME_DIR "
                     "to a shorter path"));
  }
  SHOAL_RETURN_IF_ERROR(MakeDir(root));
  SHOAL_RETURN_IF_ERROR(MakeDir(dir));
  return dir;
}

std::string NewJobId() {
  uint64_t r = 0;
  if (getrandom(&r, sizeof(r), 0) != sizeof(r))
    r = static_cast<uint64_t>(getpid());
  return absl::StrFormat("j%012x", r & 0xffffffffffffULL);
}

}  // namespace shoal
