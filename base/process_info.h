// Facts about local processes read from /proc, for liveness checks that are
// safe against pid reuse.
#ifndef SHOAL_BASE_PROCESS_INFO_H_
#define SHOAL_BASE_PROCESS_INFO_H_

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace shoal {

// The process's start time in clock ticks since boot (/proc/<pid>/stat field
// 22). Errors: NotFound if the process does not exist.
absl::StatusOr<uint64_t> ProcessStartTicks(pid_t pid);

// True if `pid` is running (not a zombie) and, when `start_ticks` is non-zero,
// is the same process that had that start time.
bool ProcessIsAlive(pid_t pid, uint64_t start_ticks = 0);

// Resident set size in bytes (/proc/<pid>/statm), or NotFound.
absl::StatusOr<uint64_t> ProcessRssBytes(pid_t pid);

// This machine's boot id (/proc/sys/kernel/random/boot_id): the same for
// every process until the next boot, so two processes that read the same
// one share a machine (and pid numbers). "" if it cannot be read.
std::string BootId();

// Opens a pidfd for `pid` (readable when the process exits).
// Errors: NotFound (no such process), Unimplemented (kernel without pidfd).
absl::StatusOr<int> OpenPidFd(pid_t pid);

}  // namespace shoal

#endif  // SHOAL_BASE_PROCESS_INFO_H_
