#include "shm/spill_folder.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/log.h"
#include "base/process_info.h"
#include "base/status_macros.h"
#include "base/temp_dir.h"

namespace shoal::shm {
namespace {

constexpr char kOwnerFile[] = "owner";

// Removes every file in the folder open as `dir_fd`, then the folder.
void RemoveFolder(int dir_fd, const std::string& path) {
  const int fd = dup(dir_fd);
  DIR* d = fd >= 0 ? fdopendir(fd) : nullptr;
  if (d != nullptr) {
    std::vector<std::string> names;
    while (struct dirent* ent = readdir(d)) {
      const absl::string_view name = ent->d_name;
      if (name != "." && name != "..") names.emplace_back(name);
    }
    for (const std::string& name : names) unlinkat(dir_fd, name.c_str(), 0);
    closedir(d);
  } else if (fd >= 0) {
    close(fd);
  }
  if (rmdir(path.c_str()) != 0 && errno != ENOENT) {
    SHOAL_LOG(WARNING, "cannot remove the spill folder %s: %s", path,
              strerror(errno));
  }
}

// Whether the folder `name` in `parent` (open as `parent_fd`) is one of this
// user's spill folders whose owner is gone.
bool IsStale(int parent_fd, const std::string& name) {
  if (!absl::StartsWith(name, "shoal-") ||
      !absl::StrContains(name, "-spill-")) {
    return false;
  }
  struct stat st;
  if (fstatat(parent_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 ||
      !S_ISDIR(st.st_mode) || st.st_uid != geteuid()) {
    return false;
  }
  const int fd = openat(parent_fd, (name + "/" + kOwnerFile).c_str(),
                        O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return false;  // being made, or not ours to judge
  char text[64] = {};
  const ssize_t n = read(fd, text, sizeof(text) - 1);
  close(fd);
  if (n <= 0) return false;
  std::vector<absl::string_view> parts =
      absl::StrSplit(absl::string_view(text, n), ' ', absl::SkipWhitespace());
  int32_t pid = 0;
  uint64_t ticks = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &pid) ||
      !absl::SimpleAtoi(parts[1], &ticks) || pid <= 0) {
    return false;
  }
  return !ProcessIsAlive(pid, ticks);
}

absl::Status WriteOwner(int dir_fd) {
  const uint64_t ticks = ProcessStartTicks(getpid()).value_or(0);
  const std::string text = absl::StrCat(getpid(), " ", ticks, "\n");
  const int fd =
      openat(dir_fd, kOwnerFile,
             O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return SHOAL_ERRNO("creating the spill folder's owner file");
  const bool ok =
      write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  return ok ? absl::OkStatus()
            : SHOAL_ERRNO("writing the spill folder's owner file");
}

}  // namespace

std::vector<std::string> SpillFolder::StaleFolders(const std::string& parent) {
  std::vector<std::string> out;
  const int parent_fd =
      open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (parent_fd < 0) return out;
  DIR* d = fdopendir(dup(parent_fd));
  if (d != nullptr) {
    while (struct dirent* ent = readdir(d)) {
      if (IsStale(parent_fd, ent->d_name)) {
        out.push_back(absl::StrCat(parent, "/", ent->d_name));
      }
    }
    closedir(d);
  }
  close(parent_fd);
  return out;
}

absl::StatusOr<std::unique_ptr<SpillFolder>> SpillFolder::Create(
    const std::string& parent, absl::string_view job_id, uint64_t quota_bytes) {
  if (quota_bytes == 0) {
    return absl::InvalidArgumentError("a spill folder with a quota of 0 bytes");
  }
  // The parent: made (0700) when missing; refused when it is another
  // user's, a link, or writable by others.
  SHOAL_ASSIGN_OR_RETURN(
      const int parent_fd,
      OpenPrivateFolder(parent, /*create=*/true, "the spill folder"));
  for (const std::string& stale : StaleFolders(parent)) {
    const int fd =
        open(stale.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) continue;
    RemoveFolder(fd, stale);
    close(fd);
    SHOAL_LOG(INFO, "removed the spill folder %s of a store that died", stale);
  }
  // A fresh name no one could predict, made only if it did not exist.
  std::string name;
  int made = -1;
  for (int attempt = 0; attempt < 16 && made != 0; ++attempt) {
    uint64_t r = 0;
    if (getrandom(&r, sizeof(r), 0) != sizeof(r)) {
      close(parent_fd);
      return SHOAL_ERRNO("getrandom for a spill folder's name");
    }
    name = absl::StrFormat("shoal-%s-spill-%012x", job_id, r & 0xffffffffffff);
    made = mkdirat(parent_fd, name.c_str(), 0700);
    if (made != 0 && errno != EEXIST) break;
  }
  if (made != 0) {
    absl::Status s = SHOAL_ERRNO(absl::StrCat("making a folder in ", parent));
    close(parent_fd);
    return s;
  }
  const std::string path = absl::StrCat(parent, "/", name);
  const int dir_fd = openat(parent_fd, name.c_str(),
                            O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  close(parent_fd);
  if (dir_fd < 0) {
    absl::Status s = SHOAL_ERRNO(absl::StrCat("opening ", path));
    rmdir(path.c_str());
    return s;
  }
  std::unique_ptr<SpillFolder> folder(
      new SpillFolder(path, dir_fd, quota_bytes, false));
  SHOAL_RETURN_IF_ERROR(WriteOwner(dir_fd));
  struct statfs fs;
  if (fstatfs(dir_fd, &fs) == 0) {
    folder->on_tmpfs_ = fs.f_type == TMPFS_MAGIC;
  }
  if (quota_bytes == kQuotaAuto) {
    struct statvfs vfs;
    if (fstatvfs(dir_fd, &vfs) != 0) {
      return SHOAL_ERRNO(absl::StrCat("statvfs of ", path));
    }
    folder->quota_bytes_ =
        std::max<uint64_t>(1, uint64_t{vfs.f_bavail} * vfs.f_frsize / 2);
  }
  return folder;
}

SpillFolder::~SpillFolder() {
  if (dir_fd_ < 0) return;
  RemoveFolder(dir_fd_, path_);
  close(dir_fd_);
}

absl::Status SpillFolder::Write(const ObjectId& id, const uint8_t* data,
                                uint64_t nbytes) {
  SHOAL_RETURN_IF_ERROR(Reserve(nbytes));
  absl::Status s = WriteFile(id, data, nbytes);
  if (!s.ok()) {
    used_bytes_ -= nbytes;
    --files_;
  }
  return s;
}

absl::Status SpillFolder::Reserve(uint64_t nbytes) {
  if (!Fits(nbytes)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the spill folder ", path_, " holds ", used_bytes_, " bytes of its ",
        quota_bytes_, " (--spill-bytes); ", nbytes, " more do not fit"));
  }
  used_bytes_ += nbytes;
  ++files_;
  return absl::OkStatus();
}

absl::Status SpillFolder::WriteFile(const ObjectId& id, const uint8_t* data,
                                    uint64_t nbytes) const {
  const std::string name = id.ToHex();
  const int fd =
      openat(dir_fd_, name.c_str(),
             O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    return SHOAL_ERRNO(absl::StrCat("creating ", path_, "/", name));
  }
  uint64_t done = 0;
  while (done < nbytes) {
    const ssize_t n = write(fd, data + done, nbytes - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      absl::Status s =
          n < 0 ? SHOAL_ERRNO(absl::StrCat("writing ", path_, "/", name))
                : absl::DataLossError(
                      absl::StrCat("writing ", path_, "/", name, " stopped"));
      close(fd);
      unlinkat(dir_fd_, name.c_str(), 0);
      return s;
    }
    done += static_cast<uint64_t>(n);
  }
  close(fd);
  return absl::OkStatus();
}

absl::Status SpillFolder::Read(const ObjectId& id, uint8_t* dst,
                               uint64_t nbytes) const {
  const std::string name = id.ToHex();
  const int fd =
      openat(dir_fd_, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return SHOAL_ERRNO(absl::StrCat("opening ", path_, "/", name));
  struct stat st;
  absl::Status s;
  if (fstat(fd, &st) != 0) {
    s = SHOAL_ERRNO(absl::StrCat("stat of ", path_, "/", name));
  } else if (static_cast<uint64_t>(st.st_size) != nbytes) {
    s = absl::DataLossError(absl::StrCat(path_, "/", name, " holds ",
                                         st.st_size, " bytes, not ", nbytes));
  }
  uint64_t done = 0;
  while (s.ok() && done < nbytes) {
    const ssize_t n = pread(fd, dst + done, nbytes - done, done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      s = SHOAL_ERRNO(absl::StrCat("reading ", path_, "/", name));
    } else if (n == 0) {
      s = absl::DataLossError(
          absl::StrCat(path_, "/", name, " ended after ", done, " bytes"));
    }
    done += n > 0 ? static_cast<uint64_t>(n) : 0;
  }
  close(fd);
  return s;
}

void SpillFolder::Remove(const ObjectId& id, uint64_t nbytes) {
  const std::string name = id.ToHex();
  if (unlinkat(dir_fd_, name.c_str(), 0) != 0 && errno != ENOENT) {
    SHOAL_LOG(WARNING, "cannot remove %s/%s: %s", path_, name, strerror(errno));
  }
  used_bytes_ -= std::min(used_bytes_, nbytes);
  if (files_ > 0) --files_;
}

}  // namespace shoal::shm
