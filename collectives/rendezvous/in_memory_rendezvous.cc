#include "collectives/rendezvous/in_memory_rendezvous.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace shoal::collectives {

bool InMemoryRendezvous::WaitUntil(absl::Time deadline) {
  // No limit: a plain wait (a deadline at the end of time would be turned
  // into a clock value that may overflow).
  if (deadline == absl::InfiniteFuture()) {
    changed_.Wait(&mu_);
    return false;
  }
  return changed_.WaitWithDeadline(&mu_, deadline);
}

absl::Status InMemoryRendezvous::Set(absl::string_view key,
                                     absl::string_view value) {
  MutexLock lock(&mu_);
  data_.insert_or_assign(std::string(key), std::string(value));
  changed_.SignalAll();
  return absl::OkStatus();
}

absl::StatusOr<std::string> InMemoryRendezvous::Get(absl::string_view key,
                                                    absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  MutexLock lock(&mu_);
  while (true) {
    if (auto it = data_.find(key); it != data_.end()) return it->second;
    if (timeout == absl::ZeroDuration()) {
      return absl::NotFoundError(absl::StrCat("no key '", key, "'"));
    }
    // WaitUntil may return early: the loop looks again either way.
    if (WaitUntil(deadline) && data_.find(key) == data_.end()) {
      return absl::DeadlineExceededError(
          absl::StrCat("key '", key, "' not set in time"));
    }
  }
}

absl::Status InMemoryRendezvous::Delete(absl::string_view key) {
  MutexLock lock(&mu_);
  if (auto it = data_.find(key); it != data_.end()) data_.erase(it);
  return absl::OkStatus();
}

absl::Status InMemoryRendezvous::Barrier(absl::string_view name, int world,
                                         absl::Duration timeout) {
  if (world < 1) {
    return absl::InvalidArgumentError("a barrier needs at least one caller");
  }
  const absl::Time deadline = absl::Now() + timeout;
  MutexLock lock(&mu_);
  auto it = barriers_.find(name);
  if (it == barriers_.end()) {
    it = barriers_.emplace(std::string(name), BarrierState{}).first;
  }
  BarrierState& b = it->second;
  if (b.arrived == 0) b.world = world;
  if (b.world != world) {
    return absl::InvalidArgumentError(
        absl::StrCat("barrier '", name, "' is for ", b.world,
                     " callers, this caller says ", world));
  }
  // The state stays in the map (never erased), so `b` remains valid across
  // waits; only `round` tells a waiter that its round completed.
  const uint64_t mine = b.round;
  if (++b.arrived == b.world) {
    b.arrived = 0;
    ++b.round;
    changed_.SignalAll();
    return absl::OkStatus();
  }
  while (b.round == mine) {
    if (WaitUntil(deadline) && b.round == mine) {
      --b.arrived;
      return absl::DeadlineExceededError(
          absl::StrCat("barrier '", name, "': ", b.arrived + 1, " of ", b.world,
                       " callers arrived in time"));
    }
  }
  return absl::OkStatus();
}

}  // namespace shoal::collectives
