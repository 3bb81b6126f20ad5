// Where a node's runtime files live: sockets, discovery files, logs.
//
//   $SHOAL_RUNTIME_DIR, else $XDG_RUNTIME_DIR/shoal, else /tmp/shoal-<uid>;
//   one folder per job inside it, mode 0700.
//
// A name in /tmp can be taken first by another user (a folder, file or link
// of theirs at /tmp/shoal-<uid>). shoal never uses such a root; a node then
// makes a private fallback beside it, <root>-XXXXXX (mkdtemp, mode 0700), and
// records it in $HOME/.shoal/runtime-<host>-<hash of the root's path>, a file
// in a folder that only this user may write. Clients that find the root held
// by another user follow that record, and accept only a folder of the form
// <root>-XXXXXX that is this user's and that no one else may write to: no one
// else can point them at a folder of their own.
#ifndef SHOAL_BASE_RUNTIME_DIR_H_
#define SHOAL_BASE_RUNTIME_DIR_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shoal {

// The runtime root by the rule above, whoever holds it (not created).
std::string PreferredRuntimeRoot();

// The runtime root this user's nodes and clients use (not created): the
// preferred root, unless another user holds that name (lstat: its owner is
// not this user) and a valid fallback is recorded for it; then that fallback.
std::string RuntimeRoot();

// The file that records the fallback of runtime root `preferred`:
// $HOME/.shoal/runtime-<host>-<16 hex digits of the path's FNV-1a hash>.
// "" when HOME is not an absolute path.
std::string FallbackRecordPath(absl::string_view preferred);

// Whether `job_id` may name a job: it becomes part of folder, socket and
// /dev/shm names, so 1-48 letters, digits, '_', '-' and '.'.
// Errors: InvalidArgument saying which rule the id breaks.
absl::Status CheckJobId(absl::string_view job_id);

// <root>/<job_id>, created with mode 0700 if missing. The root is the
// preferred one, or, when another user holds that name, its fallback: the
// recorded one if valid, else a fresh one (mkdtemp) recorded for clients; a
// warning (once per process) names the held path, its owner and the fallback.
// Both folders are checked (CheckRuntimeFolder): the root may not be writable
// by others, the job's folder not even enterable by others.
// Errors: InvalidArgument (bad job id), PermissionDenied / Internal from mkdir,
// FailedPrecondition if the path would exceed the 107-byte limit of ipc://
// socket paths, a folder fails its check, or the root is another user's and
// no fallback can be made or recorded (no HOME, say; the message names the
// root, its owner and why).
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
