// The process's limit on open descriptors (RLIMIT_NOFILE), for servers that
// accept connections from others: shells commonly start processes with a soft
// limit of 1024 under a far higher hard limit, and a server that runs out of
// descriptors fails (libzmq aborts when an ipc:// accept finds none left).
#ifndef SHOAL_BASE_DESCRIPTOR_LIMIT_H_
#define SHOAL_BASE_DESCRIPTOR_LIMIT_H_

#include <cstdint>

#include "absl/status/statusor.h"

namespace shoal {

// Raises the soft RLIMIT_NOFILE to the hard limit; returns the soft limit in
// force afterwards. Children started later inherit it. Errors: Internal
// (getrlimit/setrlimit failed; the limit is unchanged).
absl::StatusOr<uint64_t> RaiseDescriptorLimit();

// The soft RLIMIT_NOFILE now (re-read at each call: another process may lower
// it with prlimit(2)); 1024 if it cannot be read.
uint64_t DescriptorLimit();

}  // namespace shoal

#endif  // SHOAL_BASE_DESCRIPTOR_LIMIT_H_
