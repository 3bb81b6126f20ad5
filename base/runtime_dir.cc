#include "base/runtime_dir.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/status_macros.h"

namespace shoal {
namespace {

// Creates `path` (0700) if missing, then checks that it is a folder (not a
// link) of this user that no one else may write to; with `private_only`, that
// no one else may enter it either.
absl::Status MakeDir(const std::string& path, bool private_only) {
  if (mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
    return SHOAL_ERRNO(absl::StrCat("mkdir ", path));
  }
  return CheckRuntimeFolder(path, private_only);
}

}  // namespace

absl::Status CheckRuntimeFolder(const std::string& path, bool private_only) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0)
    return SHOAL_ERRNO(absl::StrCat("stat ", path));
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("the runtime folder ", path,
                     " is not a folder (a link or a file): "
                     "refusing it; remove it or set SHOAL_RUNTIME_DIR"));
  }
  if (st.st_uid != geteuid()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the runtime folder ", path, " belongs to uid ", st.st_uid,
        ", not to this user (uid ", geteuid(),
        "): refusing it; set SHOAL_RUNTIME_DIR to a folder of your own"));
  }
  const mode_t forbidden = private_only ? 077 : 022;
  if ((st.st_mode & forbidden) != 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "the runtime folder %s has mode %04o: others may %s it; refusing it "
        "(chmod 700 %s)",
        path, st.st_mode & 07777, private_only ? "enter" : "write to", path));
  }
  return absl::OkStatus();
}

absl::Status WriteRuntimeFile(const std::string& path, absl::string_view text) {
  uint64_t r = 0;
  if (getrandom(&r, sizeof(r), 0) != sizeof(r))
    r = absl::ToUnixNanos(absl::Now());
  const std::string tmp = absl::StrFormat("%s.tmp.%d.%016x", path, getpid(), r);
  const int fd = open(
      tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return SHOAL_ERRNO(absl::StrCat("creating ", tmp));
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      absl::Status s = SHOAL_ERRNO(absl::StrCat("writing ", tmp));
      close(fd);
      unlink(tmp.c_str());
      return s;
    }
    done += static_cast<size_t>(n);
  }
  close(fd);
  // rename() replaces a link at `path` itself, never writes through it.
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    absl::Status s = SHOAL_ERRNO(absl::StrCat("renaming to ", path));
    unlink(tmp.c_str());
    return s;
  }
  return absl::OkStatus();
}

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
  SHOAL_RETURN_IF_ERROR(MakeDir(root, /*private_only=*/false));
  SHOAL_RETURN_IF_ERROR(MakeDir(dir, /*private_only=*/true));
  return dir;
}

std::string NewJobId() {
  uint64_t r = 0;
  if (getrandom(&r, sizeof(r), 0) != sizeof(r))
    r = static_cast<uint64_t>(getpid());
  return absl::StrFormat("j%012x", r & 0xffffffffffffULL);
}

}  // namespace shoal
