// Where a node's runtime files live: sockets, discovery files, logs.
//
//   $SHOAL_RUNTIME_DIR, else $XDG_RUNTIME_DIR/shoal, else /tmp/shoal-<uid>;
//   one folder per job inside it, mode 0700.
#ifndef SHOAL_BASE_RUNTIME_DIR_H_
#define SHOAL_BASE_RUNTIME_DIR_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shoal {

// The runtime root (not created).
std::string RuntimeRoot();

// RuntimeRoot()/<job_id>, created with mode 0700 if missing.
// Errors: InvalidArgument (bad job id), PermissionDenied / Internal from mkdir,
// FailedPrecondition if the path would exceed the 107-byte limit of ipc://
// socket paths.
absl::StatusOr<std::string> JobDir(absl::string_view job_id);

// A fresh job id: "j" + 12 hex digits.
std::string NewJobId();

}  // namespace shoal

#endif  // SHOAL_BASE_RUNTIME_DIR_H_
