// The job secret that authenticates every connection to the key-value
// service (docs/security.md, "The key-value service"): $SHOAL_KV_SECRET when
// set; a fresh one for a single-node job; for a multi-node job, the user's key
// file, which every node's launcher reads (a shared home directory, as on most
// clusters; without HOME, the runtime root, which only this machine sees) or
// which the user replaces by exporting $SHOAL_KV_SECRET on every node.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "base/runtime_dir.h"
#include "base/status_macros.h"
#include "ipc/curve.h"
#include "launch/kv_client.h"
#include "launch/launcher_internal.h"

namespace shoal::launch {
namespace launcher_internal {
namespace {

absl::Status ErrnoStatus(int err, absl::string_view what) {
  return absl::ErrnoToStatus(err, what);
}

// The folder of the key file: created 0700 if missing; refused unless this
// user owns it and no one else may write to it.
absl::Status CheckKeyFolder(const std::string& dir) {
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    return ErrnoStatus(errno, absl::StrCat("mkdir ", dir));
  struct stat st;
  if (lstat(dir.c_str(), &st) != 0)
    return ErrnoStatus(errno, absl::StrCat("stat ", dir));
  if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() ||
      (st.st_mode & 022) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        dir,
        " must be a folder of this user that no one else may write to "
        "(it holds the job secret of multi-node launches)"));
  }
  return absl::OkStatus();
}

// Reads the key file; refuses one that is a link, someone else's, or
// readable by others.
absl::StatusOr<std::string> ReadKeyFile(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0)
    return ErrnoStatus(errno, absl::StrCat("stat ", path));
  if (!S_ISREG(st.st_mode) || st.st_uid != geteuid()) {
    return absl::FailedPreconditionError(absl::StrCat(
        path,
        " is not a regular file of this user: refusing it as the job "
        "secret"));
  }
  SHOAL_ASSIGN_OR_RETURN(ipc::CurveKeyPair keys, ipc::ReadKeyPair(path));
  return keys.secret_key;
}

// The user's key file, created on first use. Two launchers that start at
// once agree: each writes its own candidate under a unique name and links it
// into place; link() fails for all but the first.
absl::StatusOr<std::string> SharedSecret() {
  std::string path;
  if (const char* f = std::getenv("SHOAL_KV_SECRET_FILE"); f && *f) {
    path = f;
  } else {
    // A shared home reaches every node; without one, the runtime root
    // reaches the launchers of this machine only.
    const char* home = std::getenv("HOME");
    const std::string dir = home != nullptr && *home != '\0'
                                ? absl::StrCat(home, "/.shoal")
                                : RuntimeRoot();
    SHOAL_RETURN_IF_ERROR(CheckKeyFolder(dir));
    path = dir + "/kv_secret";
  }
  struct stat st;
  if (lstat(path.c_str(), &st) == 0) return ReadKeyFile(path);
  SHOAL_ASSIGN_OR_RETURN(ipc::CurveKeyPair fresh, ipc::GenerateCurveKeyPair());
  // The candidate's name: Z85 text has '/' among its characters, so the
  // key's first bytes go in as hex.
  const std::string candidate =
      absl::StrCat(path, ".", getpid(), ".",
                   absl::BytesToHexString(fresh.public_key.substr(0, 8)));
  SHOAL_RETURN_IF_ERROR(ipc::WriteKeyPair(candidate, fresh));
  const int linked = link(candidate.c_str(), path.c_str());
  const int err = errno;
  unlink(candidate.c_str());
  if (linked != 0 && err != EEXIST)
    return ErrnoStatus(err, absl::StrCat("link ", path));
  return ReadKeyFile(path);
}

}  // namespace

absl::StatusOr<std::string> JobSecret(int nnodes) {
  if (const char* s = std::getenv(kKvSecretEnv); s != nullptr && *s) {
    if (!ipc::IsValidZ85Key(s)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "$", kKvSecretEnv, " is not a Z85 CURVE secret key (40 characters)"));
    }
    return std::string(s);
  }
  if (nnodes > 1) return SharedSecret();
  SHOAL_ASSIGN_OR_RETURN(ipc::CurveKeyPair fresh, ipc::GenerateCurveKeyPair());
  return fresh.secret_key;
}

}  // namespace launcher_internal
}  // namespace shoal::launch
