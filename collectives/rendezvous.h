// Rendezvous: how the ranks of a communicator find each other before they
// share anything faster — the few key-value verbs ShmCommunicator::Create
// needs (rank 0 publishes its segment's name, the others wait for it, all meet
// once everyone mapped it, rank 0 clears the key).
//
// Two implementations: KvRendezvous (kv_rendezvous.h, the job's key-value
// store: processes of a launched job) and InMemoryRendezvous
// (in_memory_rendezvous.h, a map in one process: ranks as threads, for tests).
// The same code path runs on both, so the in-process tests exercise exactly
// what production does after the rendezvous.
//
// Every verb returns a Status, never throws. Whether one object may be used
// from several threads depends on the implementation (see each).
#ifndef SHOAL_COLLECTIVES_RENDEZVOUS_H_
#define SHOAL_COLLECTIVES_RENDEZVOUS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace shoal::collectives {

class Rendezvous {
 public:
  virtual ~Rendezvous() = default;

  // Sets `key` to `value`, replacing any earlier value, and wakes whoever
  // waits for it. Errors: the store's (e.g. Unavailable: it cannot be
  // reached).
  virtual absl::Status Set(absl::string_view key, absl::string_view value) = 0;

  // The value of `key`, waiting up to `timeout` for it to be set
  // (ZeroDuration: no wait; InfiniteDuration: no limit).
  // Errors: NotFound (absent and no wait), DeadlineExceeded (not set in
  // time), the store's.
  virtual absl::StatusOr<std::string> Get(absl::string_view key,
                                          absl::Duration timeout) = 0;

  // Removes `key`; OK whether or not it was there. Errors: the store's.
  virtual absl::Status Delete(absl::string_view key) = 0;

  // Returns once `world` callers have called Barrier with this `name`; the
  // name is reusable afterwards. A caller that gives up leaves the count.
  // Errors: DeadlineExceeded (not everyone came within `timeout`),
  // InvalidArgument (this caller's `world` differs from the waiting ones'),
  // the store's.
  virtual absl::Status Barrier(absl::string_view name, int world,
                               absl::Duration timeout) = 0;
};

}  // namespace shoal::collectives

#endif  // SHOAL_COLLECTIVES_RENDEZVOUS_H_
