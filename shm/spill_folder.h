// SpillFolder: the folder on local disk where the store service keeps the
// objects it spilled out of the arena, one file per object, and the quota on
// the bytes they hold.
//
// The folder is <parent>/shoal-<job>-spill-XXXXXX, made by mkdtemp (mode
// 0700, a fresh unpredictable name) inside a parent that must be a folder of
// this user that no one else may write to (created, mode 0700, when missing;
// refused when another user owns it). Every file is created with
// O_CREAT|O_EXCL|O_NOFOLLOW, mode 0600, through the folder's descriptor, so
// nothing planted or swapped in the parent is written through. An `owner`
// file records the creating process (pid, start time): the next store that
// starts with the same parent removes the folders of dead owners. The
// destructor removes every file and the folder.
//
// Not thread-safe, but for WriteFile and Read, which touch only files: the
// store service calls the rest from its thread, and those from its spill
// thread (SpillIo).
#ifndef SHOAL_SHM_SPILL_FOLDER_H_
#define SHOAL_SHM_SPILL_FOLDER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ipc/object_id.h"

namespace shoal::shm {

class SpillFolder {
 public:
  // Makes the folder inside `parent` for job `job_id`, with a quota of
  // `quota_bytes` (kQuotaAuto: half of the free space of the parent's file
  // system now). Removes folders left in `parent` by stores that died.
  // Errors: PermissionDenied (the parent is another user's), FailedPrecondition
  // (the parent is a link, not a folder, or others may write to it),
  // InvalidArgument (a quota of 0), errno codes of mkdir/mkdtemp/statvfs.
  static constexpr uint64_t kQuotaAuto = ~uint64_t{0};
  static absl::StatusOr<std::unique_ptr<SpillFolder>> Create(
      const std::string& parent, absl::string_view job_id,
      uint64_t quota_bytes);

  // Removes every file and the folder.
  ~SpillFolder();
  SpillFolder(const SpillFolder&) = delete;
  SpillFolder& operator=(const SpillFolder&) = delete;

  // The folder's path and whether it lies on a tmpfs (whose files take
  // memory, not disk).
  const std::string& path() const { return path_; }
  bool on_tmpfs() const { return on_tmpfs_; }

  uint64_t quota_bytes() const { return quota_bytes_; }
  // Bytes and files held now.
  uint64_t used_bytes() const { return used_bytes_; }
  uint64_t files() const { return files_; }
  // Whether `nbytes` more fit in the quota (and what is lent to it).
  bool Fits(uint64_t nbytes) const {
    const uint64_t quota = quota_bytes_ + lent_bytes_;
    return nbytes <= quota && used_bytes_ <= quota - nbytes;
  }
  // Lends the quota `bytes` more until Lend(0): while an object is read
  // back, others may be written out for its room before its own file goes.
  void Lend(uint64_t bytes) { lent_bytes_ = bytes; }

  // Writes `nbytes` from `data` as the file of `id` (created new, 0600):
  // Reserve, then WriteFile (Remove undoes the reservation on failure).
  // Nothing is left behind on failure.
  // Errors: ResourceExhausted (over the quota), AlreadyExists (a file of that
  // id), errno codes of open/write (ENOSPC: ResourceExhausted).
  absl::Status Write(const ObjectId& id, const uint8_t* data, uint64_t nbytes);
  // Counts a file of `nbytes` on the quota before it is written (Remove
  // takes it off again). Errors: ResourceExhausted (over the quota).
  absl::Status Reserve(uint64_t nbytes);
  // The file I/O of Write, and nothing else: safe on another thread than
  // the folder's other calls (the store's spill thread), as Read is.
  absl::Status WriteFile(const ObjectId& id, const uint8_t* data,
                         uint64_t nbytes) const;

  // Reads the file of `id`, which must hold exactly `nbytes`, into `dst`.
  // Errors: NotFound, DataLoss (a different size, a short read), errno codes.
  absl::Status Read(const ObjectId& id, uint8_t* dst, uint64_t nbytes) const;

  // Removes the file of `id` (of `nbytes` bytes) and takes it off the quota.
  void Remove(const ObjectId& id, uint64_t nbytes);

  // Folders of this user in `parent` named shoal-*-spill-* whose owner file
  // names a process that is gone; removed by Create. Exposed for tests.
  static std::vector<std::string> StaleFolders(const std::string& parent);

 private:
  SpillFolder(std::string path, int dir_fd, uint64_t quota_bytes, bool tmpfs)
      : path_(std::move(path)),
        dir_fd_(dir_fd),
        quota_bytes_(quota_bytes),
        on_tmpfs_(tmpfs) {}

  std::string path_;
  int dir_fd_ = -1;
  uint64_t quota_bytes_ = 0;
  bool on_tmpfs_ = false;
  uint64_t lent_bytes_ = 0;
  uint64_t used_bytes_ = 0;
  uint64_t files_ = 0;
};

}  // namespace shoal::shm

#endif  // SHOAL_SHM_SPILL_FOLDER_H_
