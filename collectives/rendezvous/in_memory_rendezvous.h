// InMemoryRendezvous: Rendezvous as a map in this process, for ranks that are
// threads of one process (the in-process collectives tests). Same semantics as
// the job's key-value store: Get waits for a key, barriers release when the
// last caller arrives and are reusable, a caller that times out leaves.
//
// Thread-safe: every rank's thread shares one object.
#ifndef SHOAL_COLLECTIVES_RENDEZVOUS_IN_MEMORY_RENDEZVOUS_H_
#define SHOAL_COLLECTIVES_RENDEZVOUS_IN_MEMORY_RENDEZVOUS_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/mutex.h"
#include "collectives/rendezvous.h"

namespace shoal::collectives {

class InMemoryRendezvous : public Rendezvous {
 public:
  // Errors: none (Set, Delete); Get and Barrier as Rendezvous documents.
  absl::Status Set(absl::string_view key, absl::string_view value) override
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<std::string> Get(absl::string_view key,
                                  absl::Duration timeout) override
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Delete(absl::string_view key) override ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Barrier(absl::string_view name, int world,
                       absl::Duration timeout) override
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // One barrier name's current round. `round` counts completed rounds: a
  // waiter is released when it moves past the one it joined.
  struct BarrierState {
    int world = 0;
    int arrived = 0;
    uint64_t round = 0;
  };

  // Waits for a change; true if `deadline` passed (InfiniteFuture: never).
  // May return early: callers loop on their condition.
  bool WaitUntil(absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Mutex mu_;
  // Signalled on every Set and every completed barrier round.
  CondVar changed_;
  std::map<std::string, std::string, std::less<>> data_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, BarrierState, std::less<>> barriers_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace shoal::collectives

#endif  // SHOAL_COLLECTIVES_RENDEZVOUS_IN_MEMORY_RENDEZVOUS_H_
