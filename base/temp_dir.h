// Private temporary folders, and folders and files that only this user
// writes (docs/security.md, "Runtime folder and files").
//
// shoal never writes under a name in a shared folder (/tmp) that another
// user could create first: a temporary folder comes from mkdtemp (a fresh
// random name, mode 0700), files in it are created O_CREAT|O_EXCL|O_NOFOLLOW,
// and a folder named by the user (`shoal launch --log-dir`) is used only if
// it is this user's and no one else may write to it, its files opened
// O_NOFOLLOW, mode 0600.
//
//   SHOAL_ASSIGN_OR_RETURN(TempDir dir, TempDir::Create("shoal-bench-mpi-"));
//   SHOAL_RETURN_IF_ERROR(dir.WriteFile("barrier.c", kProgram));
//   ... dir.File("barrier") ...            // removed with `dir`
#ifndef SHOAL_BASE_TEMP_DIR_H_
#define SHOAL_BASE_TEMP_DIR_H_

#include <sys/types.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shoal {

// A folder of this process's own under /tmp (or $TMPDIR), removed with
// everything in it when the object is destroyed.
class TempDir {
 public:
  // Creates <parent>/<prefix>XXXXXX with mkdtemp: a name no one could
  // predict, made only if it did not exist, mode 0700. `parent` "" means
  // $TMPDIR when that is an absolute path, else /tmp.
  // Errors: InvalidArgument (a '/' in `prefix`), errno-derived codes from
  // mkdtemp naming the template.
  static absl::StatusOr<TempDir> Create(absl::string_view prefix,
                                        absl::string_view parent = "");

  TempDir() = default;
  TempDir(TempDir&& other) noexcept;
  TempDir& operator=(TempDir&& other) noexcept;
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  // Removes the folder and its contents; links inside are removed, never
  // followed.
  ~TempDir();

  // The folder's absolute path ("" for a default-constructed or released
  // TempDir).
  const std::string& path() const { return path_; }
  // <path>/<name>.
  std::string File(absl::string_view name) const;

  // Creates the new file <path>/<name> (O_CREAT|O_EXCL|O_NOFOLLOW, `mode`)
  // holding `text`.
  // REQUIRES: path() is not empty; `name` holds no '/'.
  // Errors: AlreadyExists (the name is taken), InvalidArgument (a '/' in
  // `name`), errno-derived codes naming the file.
  absl::Status WriteFile(absl::string_view name, absl::string_view text,
                         mode_t mode = 0600) const;

  // Keeps the folder on disk: the destructor no longer removes it. Returns
  // its path.
  std::string Release();

 private:
  explicit TempDir(std::string path) : path_(std::move(path)) {}
  void Remove();

  std::string path_;
};

// Opens the folder `path`, into which this user writes files others must not
// redirect: with `create`, makes it (mode 0700) when missing, and sets
// `*created` (if given) to whether it did. The folder is opened
// O_DIRECTORY|O_NOFOLLOW and checked on that descriptor: this user's, and no
// one else may write to it. `what` names it in errors ("the log folder").
// Returns the descriptor (close-on-exec); the caller closes it.
// Errors: FailedPrecondition naming the folder and, as the case may be, its
// owner (another user's), that it is a link or not a folder, or its mode
// (others may write to it); NotFound (missing, without `create`); other
// errno-derived codes naming the folder.
absl::StatusOr<int> OpenPrivateFolder(const std::string& path, bool create,
                                      absl::string_view what,
                                      bool* created = nullptr);

// Opens <dir_path>/<name> for writing through `dir_fd` (an OpenPrivateFolder
// descriptor): O_WRONLY|O_CREAT|O_NOFOLLOW|O_NONBLOCK|O_CLOEXEC plus
// `extra_flags` (O_APPEND or O_TRUNC), mode 0600 when created. A link at the
// name is refused, never followed; an existing file must be a regular file
// of this user with no other hard link, and its mode becomes 0600; O_TRUNC
// takes effect only after these checks, so a refused file is left untouched.
// The descriptor is left blocking.
// REQUIRES: `name` holds no '/'.
// Errors: FailedPrecondition naming the file and why (a link, not a regular
// file, another user's, more than one link), other errno-derived codes
// naming the file.
absl::StatusOr<int> OpenPrivateFileAt(int dir_fd, const std::string& dir_path,
                                      absl::string_view name, int extra_flags);

}  // namespace shoal

#endif  // SHOAL_BASE_TEMP_DIR_H_
