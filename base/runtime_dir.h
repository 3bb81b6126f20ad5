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

// RuntimeRoot()/<job_id>, created with mode 0700 if missing.
// Errors: InvalidArgument (bad job id), PermissionDenied / Internal from mkdir,
// FailedPrecondition if the path would exceed the 107-byte limit of ipc://
// socket paths.
absl::StatusOr<std::string> JobDir(absl::string_view job_id);

// A fresh job id: "j" + 12 hex digits.
std::string NewJobId();

}  // namespace shoal

#endif  // SHOAL_BASE_RUNTIME_DIR_H_
