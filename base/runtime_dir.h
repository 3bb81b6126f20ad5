// Where a node's runtime files live: sockets, discovery files, logs.
//
//   $SHOAL_RUNTIME_DIR, else $XDG_RUNTIME_DIR/shoal, else /tmp/shoal-<uid>;
//   one folder per job inside it, mode 0700.
#ifndef SHOAL_BASE_RUNTIME_DIR_H_
#define SHOAL_BASE_RUNTIME_DIR_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shoal {

// The runtime root (not created).
std::string RuntimeRoot();

// Whether `job_id` may name a job: it becomes part of folder, socket and
// /dev/shm names, so 1-48 letters, digits, '_', '-' and '.'.
// Errors: InvalidArgument saying which rule the id breaks.
absl::Status CheckJobId(absl::string_view job_id);

// RuntimeRoot()/<job_id>, created with mode 0700 if missing. Both folders are
// checked (CheckRuntimeFolder): the root may not be writable by others, the
// job's folder not even enterable by others.
// Errors: InvalidArgument (bad job id), PermissionDenied / Internal from mkdir,
// FailedPrecondition if the path would exceed the 107-byte limit of ipc://
// socket paths or a folder fails its check (the message names it).
absl::StatusOr<std::string> JobDir(absl::string_view job_id);

// Whether `path` is a folder (not a link) owned by this user that no one else
// may write to (with `private_only`: no group/other permission bit at all).
// Errors: FailedPrecondition naming the folder and what is wrong; errno codes
// from lstat (NotFound if it does not exist).
absl::Status CheckRuntimeFolder(const std::string& path, bool private_only);

// Writes `text` to `path` (mode 0600) through a fresh temporary file in the
// same folder, created with O_EXCL|O_NOFOLLOW under an unpredictable name, then
// renamed over `path`: a planted file or link is never written through, and
// readers never see half a file. REQUIRES: the folder passed
// CheckRuntimeFolder. Errors: errno-derived codes naming the file.
absl::Status WriteRuntimeFile(const std::string& path, absl::string_view text);

// A fresh job id: "j" + 12 hex digits.
std::string NewJobId();

}  // namespace shoal

#endif  // SHOAL_BASE_RUNTIME_DIR_H_
