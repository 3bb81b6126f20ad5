#include "base/runtime_dir.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "base/temp_dir.h"

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

// Whether another user holds `path` (a folder, file or link of theirs);
// `*st` gets its lstat.
bool HeldByAnotherUser(const std::string& path, struct stat* st) {
  return lstat(path.c_str(), st) == 0 && st->st_uid != geteuid();
}

uint64_t Fnv1a(absl::string_view s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

std::string HostName() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0')
    return "localhost";
  std::string name(host);
  for (char& c : name) {
    if (c == '/') c = '_';
  }
  return name;
}

uint64_t RandomWord() {
  uint64_t r = 0;
  if (getrandom(&r, sizeof(r), 0) != sizeof(r))
    r = absl::ToUnixNanos(absl::Now());
  return r;
}

// The folder that holds the records ($HOME/.shoal), opened and checked
// (OpenPrivateFolder; created 0700 with `create`).
absl::StatusOr<int> OpenRecordFolder(const std::string& record, bool create) {
  if (record.empty()) {
    return absl::FailedPreconditionError(
        "HOME is not set (or not an absolute path), so there is no place only "
        "this user may write to record a fallback in");
  }
  return OpenPrivateFolder(record.substr(0, record.rfind('/')), create,
                           "the folder of shoal's records");
}

// The fallback that the record `name` in `dir_fd` names for `preferred`, if
// the record is a regular file of this user that no one else may write to,
// was written for `preferred`, and names an existing folder
// "<preferred>-XXXXXX" that passes CheckRuntimeFolder.
// Errors: NotFound (no record), FailedPrecondition (anything else wrong).
absl::StatusOr<std::string> ReadRecordAt(int dir_fd, const std::string& record,
                                         const std::string& preferred) {
  const std::string name = record.substr(record.rfind('/') + 1);
  const int fd = openat(dir_fd, name.c_str(),
                        O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT)
      return absl::NotFoundError(absl::StrCat("no ", record));
    return absl::FailedPreconditionError(
        absl::StrCat("cannot open ", record, ": ", strerror(errno)));
  }
  struct stat st;
  std::string text(4096, '\0');
  ssize_t n = -1;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
      (st.st_mode & 022) == 0) {
    n = read(fd, text.data(), text.size());
  }
  close(fd);
  if (n < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        record, " is not a regular file of this user that only it may write"));
  }
  text.resize(static_cast<size_t>(n));
  std::vector<std::string> lines =
      absl::StrSplit(text, '\n', absl::SkipEmpty());
  const std::string prefix = preferred + "-";
  if (lines.size() != 2 || lines[0] != preferred ||
      !absl::StartsWith(lines[1], prefix) ||
      lines[1].size() != prefix.size() + 6 ||
      absl::StrContains(lines[1].substr(prefix.size()), '/')) {
    return absl::FailedPreconditionError(
        absl::StrCat(record, " does not name a fallback of ", preferred));
  }
  // NotFound stays the answer for a missing record only: a record naming a
  // folder that is gone (a reboot emptied /tmp) is replaced.
  if (absl::Status s = CheckRuntimeFolder(lines[1], /*private_only=*/false);
      !s.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        record, " names ", lines[1], ", which is not usable: ", s.message()));
  }
  return lines[1];
}

// The recorded fallback of `preferred`, if valid.
absl::StatusOr<std::string> FindFallbackRoot(const std::string& preferred) {
  const std::string record = FallbackRecordPath(preferred);
  SHOAL_ASSIGN_OR_RETURN(const int dir_fd,
                         OpenRecordFolder(record, /*create=*/false));
  absl::StatusOr<std::string> found = ReadRecordAt(dir_fd, record, preferred);
  close(dir_fd);
  return found;
}

// Puts `text` at the record `name` in `dir_fd` through a fresh candidate
// file: linked into place when no record exists (of two starts at once, one
// wins), renamed over a record that exists but is not valid.
absl::Status PublishRecord(int dir_fd, const std::string& record,
                           const std::string& text, bool replace) {
  const std::string name = record.substr(record.rfind('/') + 1);
  const std::string candidate =
      absl::StrFormat("%s.new.%016x", name, RandomWord());
  const int fd =
      openat(dir_fd, candidate.c_str(),
             O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return SHOAL_ERRNO(absl::StrCat("creating ", record, ".new"));
  const bool written =
      write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  absl::Status s;
  if (!written) {
    s = absl::InternalError(absl::StrCat("writing ", record, ".new"));
  } else if (replace) {
    if (renameat(dir_fd, candidate.c_str(), dir_fd, name.c_str()) != 0)
      s = SHOAL_ERRNO(absl::StrCat("renaming to ", record));
  } else if (linkat(dir_fd, candidate.c_str(), dir_fd, name.c_str(), 0) != 0 &&
             errno != EEXIST) {
    s = SHOAL_ERRNO(absl::StrCat("linking ", record));
  }
  unlinkat(dir_fd, candidate.c_str(), 0);  // gone already after a rename
  return s;
}

// The fallback of `preferred` (held by another user): the recorded one if
// valid, else a fresh folder <preferred>-XXXXXX, recorded.
absl::StatusOr<std::string> MakeFallbackRoot(const std::string& preferred) {
  const std::string record = FallbackRecordPath(preferred);
  SHOAL_ASSIGN_OR_RETURN(const int dir_fd,
                         OpenRecordFolder(record, /*create=*/true));
  absl::Status last = absl::OkStatus();
  for (int attempt = 0; attempt < 4; ++attempt) {
    absl::StatusOr<std::string> found = ReadRecordAt(dir_fd, record, preferred);
    if (found.ok()) {
      close(dir_fd);
      return found;
    }
    std::string fresh = preferred + "-XXXXXX";
    if (mkdtemp(fresh.data()) == nullptr) {
      last = SHOAL_ERRNO(absl::StrCat("mkdtemp ", fresh));
      break;
    }
    last = PublishRecord(dir_fd, record,
                         absl::StrCat(preferred, "\n", fresh, "\n"),
                         /*replace=*/!absl::IsNotFound(found.status()));
    found = ReadRecordAt(dir_fd, record, preferred);
    if (found.ok() && *found == fresh) {
      close(dir_fd);
      return fresh;
    }
    rmdir(fresh.c_str());  // another start recorded its own first
    if (found.ok()) {
      close(dir_fd);
      return found;
    }
    if (last.ok()) last = found.status();
  }
  close(dir_fd);
  return last.ok() ? absl::UnavailableError(absl::StrCat(
                         "no valid fallback could be recorded in ", record))
                   : last;
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

std::string PreferredRuntimeRoot() {
  if (const char* d = std::getenv("SHOAL_RUNTIME_DIR"); d != nullptr && *d) {
    // Without trailing '/': a fallback "<root>-XXXXXX" is made beside the
    // root, never inside it.
    std::string root(d);
    while (root.size() > 1 && root.back() == '/') root.pop_back();
    return root;
  }
  if (const char* d = std::getenv("XDG_RUNTIME_DIR"); d != nullptr && *d) {
    return absl::StrCat(d, "/shoal");
  }
  return absl::StrCat("/tmp/shoal-", getuid());
}

std::string RuntimeRoot() {
  const std::string preferred = PreferredRuntimeRoot();
  struct stat st;
  if (HeldByAnotherUser(preferred, &st)) {
    absl::StatusOr<std::string> fallback = FindFallbackRoot(preferred);
    if (fallback.ok()) return *fallback;
  }
  return preferred;
}

std::string FallbackRecordPath(absl::string_view preferred) {
  const char* home = std::getenv("HOME");
  if (home == nullptr || home[0] != '/') return "";
  std::string dir(home);
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return absl::StrFormat("%s/.shoal/runtime-%s-%016x", dir == "/" ? "" : dir,
                         HostName(), Fnv1a(preferred));
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
  std::string root = PreferredRuntimeRoot();
  struct stat st;
  if (HeldByAnotherUser(root, &st)) {
    absl::StatusOr<std::string> fallback = MakeFallbackRoot(root);
    if (!fallback.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("the runtime folder ", root, " belongs to uid ",
                       st.st_uid, ", not to this user (uid ", geteuid(),
                       "), and no private fallback could be made: ",
                       fallback.status().message(),
                       "; set SHOAL_RUNTIME_DIR to a folder of your own"));
    }
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true)) {
      SHOAL_LOG(WARNING,
                "the runtime folder %s belongs to uid %d, not to this user "
                "(uid %d): someone else made it, so it is not used. Using %s "
                "instead; this user's clients find it through %s",
                root, st.st_uid, geteuid(), *fallback,
                FallbackRecordPath(root));
    }
    root = *fallback;
  }
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
