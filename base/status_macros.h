// Status helpers shared by every component: early-return macros and the single
// place where errno, ZeroMQ and exception failures become absl::Status values.
#ifndef SHOAL_BASE_STATUS_MACROS_H_
#define SHOAL_BASE_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shoal {

// Maps an errno value to the closest canonical code (ENOENT → NotFound, ENOMEM
// and ENOSPC → ResourceExhausted, EAGAIN → Unavailable, ...).
absl::StatusCode ErrnoToCode(int err);

// "<what>: <strerror(err)> [file:line]" with the code from ErrnoToCode.
absl::Status ErrnoStatus(int err, absl::string_view what, const char* file,
                         int line);

// Adds "file:line: " context in front of a status message, keeping the code.
absl::Status Annotate(const absl::Status& s, absl::string_view context);

}  // namespace shoal

#define SHOAL_STATUS_CONCAT_INNER_(a, b) a##b
#define SHOAL_STATUS_CONCAT_(a, b) SHOAL_STATUS_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` (an absl::Status) is not OK.
#define SHOAL_RETURN_IF_ERROR(expr)                \
  do {                                             \
    ::absl::Status shoal_status_ = (expr);         \
    if (!shoal_status_.ok()) return shoal_status_; \
  } while (0)

// `lhs` = value of `rexpr` (an absl::StatusOr<T>), or returns its status.
#define SHOAL_ASSIGN_OR_RETURN(lhs, rexpr)                                 \
  SHOAL_ASSIGN_OR_RETURN_IMPL_(SHOAL_STATUS_CONCAT_(shoal_sor_, __LINE__), \
                               lhs, rexpr)
#define SHOAL_ASSIGN_OR_RETURN_IMPL_(var, lhs, rexpr) \
  auto var = (rexpr);                                 \
  if (!var.ok()) return std::move(var).status();      \
  lhs = std::move(var).value()

// An error code returned directly (pthread_*, posix_fallocate, ...).
#define SHOAL_ERRNO_VALUE(err, what) \
  ::shoal::ErrnoStatus((err), (what), __FILE__, __LINE__)

// A failed system call: errno is read at the point of failure.
#define SHOAL_ERRNO(what) \
  ::shoal::ErrnoStatus(errno, (what), __FILE__, __LINE__)

// Evaluates a system call returning -1 on failure (with errno) and returns an
// error status from the enclosing function when it fails.
#define SHOAL_SYSCALL(call)                                          \
  do {                                                               \
    if ((call) == -1)                                                \
      return ::shoal::ErrnoStatus(errno, #call, __FILE__, __LINE__); \
  } while (0)

#endif  // SHOAL_BASE_STATUS_MACROS_H_
