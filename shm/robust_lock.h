// A robust, process-shared lock and its undo journal, for structures that
// live in shared memory (the store's table, the task table).
//
// RobustLock::mutex is a process-shared, robust pthread mutex. When its holder
// dies, the next locker gets EOWNERDEAD; LockGuard::Acquire then rolls back the
// dead holder's unfinished operation from the journal and marks the mutex
// consistent, so a crash at any instruction leaves the structure as it was
// before that operation began.
#ifndef SHOAL_SHM_ROBUST_LOCK_H_
#define SHOAL_SHM_ROBUST_LOCK_H_

#include <atomic>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "shm/layout.h"

namespace shoal::shm {

// Initialises `lock` (robust, process-shared). Once, by the segment's creator,
// before anyone else maps it.
absl::Status InitRobustLock(RobustLock* lock);

// Holds a RobustLock for its lifetime.
class LockGuard {
 public:
  // Acquires `lock` (which lives in the mapping at `base`) within `timeout`,
  // repairing after a dead holder. `what` names the structure in errors.
  // Errors: DeadlineExceeded (held longer than `timeout`; names the holder's
  // pid), Internal (the mutex is unrecoverable: the segment must be recreated).
  static absl::StatusOr<LockGuard> Acquire(
      uint8_t* base, RobustLock* lock, absl::Duration timeout,
      absl::string_view what = "store table");

  LockGuard(LockGuard&& other) noexcept
      : lock_(other.lock_), repaired_(other.repaired_) {
    other.lock_ = nullptr;
  }
  LockGuard& operator=(LockGuard&&) = delete;
  LockGuard(const LockGuard&) = delete;
  ~LockGuard();

  // True if acquiring repaired a dead holder's operation (for tests and stats).
  bool repaired() const { return repaired_; }

 private:
  explicit LockGuard(RobustLock* lock) : lock_(lock) {}
  RobustLock* lock_;
  bool repaired_ = false;
};

// Undoes the journal's in-flight operation, if any. REQUIRES: the lock is held.
// Returns true if something was rolled back.
bool RollBackJournal(uint8_t* base, Journal* journal);

// Records each word's old value in the journal before overwriting it, so the
// operation can be rolled back if this process dies before Commit(). A word
// written twice in one operation is recorded once (its first old value).
// REQUIRES: the lock owning `journal` is held for the writer's whole life.
class JournaledWriter {
 public:
  JournaledWriter(uint8_t* base, Journal* journal);
  ~JournaledWriter() { Commit(); }
  JournaledWriter(const JournaledWriter&) = delete;
  JournaledWriter& operator=(const JournaledWriter&) = delete;

  void Write32(uint32_t* field, uint32_t value);
  void Write64(uint64_t* field, uint64_t value);
  // For fields also read without the lock: the new value is stored atomically
  // (release) after the old one is recorded.
  void WriteAtomic32(std::atomic<uint32_t>* field, uint32_t value);
  // Ends the operation: from here on it is permanent.
  void Commit();

 private:
  void Record(void* field, uint64_t old_value, uint32_t size);
  uint8_t* base_;
  Journal* journal_;
  bool committed_ = false;
};

// A write that goes through `journal` when one is given (client operations)
// and directly otherwise (the segment's owner, whose death ends the segment).
inline void Store32(JournaledWriter* journal, uint32_t* field, uint32_t v) {
  if (journal != nullptr) {
    journal->Write32(field, v);
  } else {
    *field = v;
  }
}
inline void Store64(JournaledWriter* journal, uint64_t* field, uint64_t v) {
  if (journal != nullptr) {
    journal->Write64(field, v);
  } else {
    *field = v;
  }
}

// The calling process's pid, cached (getpid() is a system call, and the
// lock's fast path records it); reset in forked children.
int32_t CachedPid();

}  // namespace shoal::shm

#endif  // SHOAL_SHM_ROBUST_LOCK_H_
