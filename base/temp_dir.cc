#include "base/temp_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"

namespace shoal {
namespace {

std::string DefaultParent() {
  if (const char* t = std::getenv("TMPDIR"); t != nullptr && t[0] == '/')
    return t;
  return "/tmp";
}

// Why `st` (of `path`, from lstat or fstat) is not a private folder of this
// user, or OK.
absl::Status CheckFolderStat(const struct stat& st, const std::string& path,
                             absl::string_view what) {
  if (S_ISLNK(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, " ", path, " is a link (owned by uid ", st.st_uid,
                     "): refusing to follow it"));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, " ", path, " is not a folder (owned by uid ", st.st_uid, ")"));
  }
  if (st.st_uid != geteuid()) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, " ", path, " belongs to uid ", st.st_uid,
        ", not to this user (uid ", geteuid(), "): refusing to write there"));
  }
  if ((st.st_mode & 022) != 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s %s has mode %04o: others may write to it; refusing it (chmod "
        "go-w %s)",
        what, path, st.st_mode & 07777, path));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TempDir> TempDir::Create(absl::string_view prefix,
                                        absl::string_view parent) {
  if (absl::StrContains(prefix, '/')) {
    return absl::InvalidArgumentError(
        absl::StrCat("a temporary folder's prefix may not hold '/': ", prefix));
  }
  std::string templ =
      absl::StrCat(parent.empty() ? DefaultParent() : std::string(parent), "/",
                   prefix, "XXXXXX");
  if (mkdtemp(templ.data()) == nullptr)
    return SHOAL_ERRNO(absl::StrCat("mkdtemp ", templ));
  return TempDir(std::move(templ));
}

TempDir::TempDir(TempDir&& other) noexcept
    : path_(std::exchange(other.path_, std::string())) {}

TempDir& TempDir::operator=(TempDir&& other) noexcept {
  if (this != &other) {
    Remove();
    path_ = std::exchange(other.path_, std::string());
  }
  return *this;
}

TempDir::~TempDir() { Remove(); }

void TempDir::Remove() {
  if (path_.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);  // removes links, never follows
  path_.clear();
}

std::string TempDir::File(absl::string_view name) const {
  return absl::StrCat(path_, "/", name);
}

std::string TempDir::Release() { return std::exchange(path_, std::string()); }

absl::Status TempDir::WriteFile(absl::string_view name, absl::string_view text,
                                mode_t mode) const {
  if (absl::StrContains(name, '/')) {
    return absl::InvalidArgumentError(
        absl::StrCat("a file name may not hold '/': ", name));
  }
  const std::string path = File(name);
  const int fd = open(
      path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) return SHOAL_ERRNO(absl::StrCat("creating ", path));
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      absl::Status s = SHOAL_ERRNO(absl::StrCat("writing ", path));
      close(fd);
      return s;
    }
    done += static_cast<size_t>(n);
  }
  // The umask may have taken bits away from `mode`; the caller asked for it.
  if (fchmod(fd, mode) != 0) {
    absl::Status s = SHOAL_ERRNO(absl::StrCat("chmod ", path));
    close(fd);
    return s;
  }
  if (close(fd) != 0) return SHOAL_ERRNO(absl::StrCat("closing ", path));
  return absl::OkStatus();
}

absl::StatusOr<int> OpenPrivateFolder(const std::string& path, bool create,
                                      absl::string_view what, bool* created) {
  if (created != nullptr) *created = false;
  if (create) {
    if (mkdir(path.c_str(), 0700) == 0) {
      if (created != nullptr) *created = true;
    } else if (errno != EEXIST) {
      return SHOAL_ERRNO(absl::StrCat("mkdir ", what, " ", path));
    }
  }
  const int fd =
      open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    struct stat st;
    if (lstat(path.c_str(), &st) == 0) {
      SHOAL_RETURN_IF_ERROR(CheckFolderStat(st, path, what));
    }
    return SHOAL_ERRNO_VALUE(err, absl::StrCat("opening ", what, " ", path));
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    absl::Status s = SHOAL_ERRNO(absl::StrCat("fstat ", what, " ", path));
    close(fd);
    return s;
  }
  if (absl::Status s = CheckFolderStat(st, path, what); !s.ok()) {
    close(fd);
    return s;
  }
  return fd;
}

absl::StatusOr<int> OpenPrivateFileAt(int dir_fd, const std::string& dir_path,
                                      absl::string_view name, int extra_flags) {
  const std::string shown = absl::StrCat(dir_path, "/", name);
  if (absl::StrContains(name, '/')) {
    return absl::InvalidArgumentError(
        absl::StrCat("a file name may not hold '/': ", name));
  }
  // O_NONBLOCK: a FIFO at the name fails (ENXIO) instead of blocking here.
  // O_TRUNC waits for the checks: a file that is refused is left untouched.
  const bool truncate = (extra_flags & O_TRUNC) != 0;
  const int fd = openat(dir_fd, std::string(name).c_str(),
                        O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK |
                            O_CLOEXEC | (extra_flags & ~O_TRUNC),
                        0600);
  if (fd < 0) {
    const int err = errno;
    struct stat st;
    if (fstatat(dir_fd, std::string(name).c_str(), &st, AT_SYMLINK_NOFOLLOW) ==
            0 &&
        S_ISLNK(st.st_mode)) {
      return absl::FailedPreconditionError(
          absl::StrCat(shown, " is a link (owned by uid ", st.st_uid,
                       "): refusing to write through it"));
    }
    return SHOAL_ERRNO_VALUE(err, absl::StrCat("opening ", shown));
  }
  struct stat st;
  absl::Status bad;
  if (fstat(fd, &st) != 0) {
    bad = SHOAL_ERRNO(absl::StrCat("fstat ", shown));
  } else if (!S_ISREG(st.st_mode)) {
    bad = absl::FailedPreconditionError(
        absl::StrCat(shown, " is not a regular file: refusing to write to it"));
  } else if (st.st_uid != geteuid()) {
    bad = absl::FailedPreconditionError(absl::StrCat(
        shown, " belongs to uid ", st.st_uid, ", not to this user (uid ",
        geteuid(), "): refusing to write to it"));
  } else if (st.st_nlink != 1) {
    bad = absl::FailedPreconditionError(absl::StrCat(
        shown, " has ", st.st_nlink, " hard links: refusing to write to it"));
  } else if ((st.st_mode & 07777) != 0600 && fchmod(fd, 0600) != 0) {
    bad = SHOAL_ERRNO(absl::StrCat("chmod 600 ", shown));
  } else if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0) {
    bad = SHOAL_ERRNO(absl::StrCat("fcntl ", shown));
  } else if (truncate && ftruncate(fd, 0) != 0) {
    bad = SHOAL_ERRNO(absl::StrCat("truncating ", shown));
  }
  if (!bad.ok()) {
    close(fd);
    return bad;
  }
  return fd;
}

}  // namespace shoal
