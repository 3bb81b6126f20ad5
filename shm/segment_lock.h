// The segment's robust lock and its undo journal.
//
// SegmentHeader::lock is a process-shared, robust pthread mutex. When its
// holder dies, the next locker gets EOWNERDEAD; SegmentLock then rolls back the
// dead holder's unfinished operation from the Journal and marks the mutex
// consistent, so a crash at any instruction leaves the table as it was before
// that operation began.
#ifndef SHOAL_SHM_SEGMENT_LOCK_H_
#define SHOAL_SHM_SEGMENT_LOCK_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "shm/layout.h"

namespace shoal::shm {

// Initialises the robust, process-shared mutex. Service only, before `ready`.
absl::Status InitSegmentLock(SegmentHeader* header);

// Holds SegmentHeader::lock for its lifetime.
class SegmentLock {
 public:
  // Acquires the lock within `timeout`, repairing after a dead holder.
  // Errors: DeadlineExceeded (held longer than `timeout`; names the holder's
  // pid), Internal (the mutex is unrecoverable: the segment must be recreated).
  static absl::StatusOr<SegmentLock> Acquire(uint8_t* base,
                                             absl::Duration timeout);

  SegmentLock(SegmentLock&& other) noexcept
      : base_(other.base_), repaired_(other.repaired_) {
    other.base_ = nullptr;
  }
  SegmentLock& operator=(SegmentLock&&) = delete;
  SegmentLock(const SegmentLock&) = delete;
  ~SegmentLock();

  // True if acquiring repaired a dead holder's operation (for tests and stats).
  bool repaired() const { return repaired_; }

 private:
  explicit SegmentLock(uint8_t* base) : base_(base) {}
  uint8_t* base_;
  bool repaired_ = false;
};

// Undoes the journal's in-flight operation, if any. REQUIRES: the lock is held.
// Returns true if something was rolled back.
bool RollBackJournal(uint8_t* base);

// Records each word's old value in the journal before overwriting it, so the
// operation can be rolled back if this process dies before Commit().
// REQUIRES: the segment lock is held for the writer's whole life.
class JournaledWriter {
 public:
  explicit JournaledWriter(uint8_t* base);
  ~JournaledWriter() { Commit(); }
  JournaledWriter(const JournaledWriter&) = delete;
  JournaledWriter& operator=(const JournaledWriter&) = delete;

  void Write32(uint32_t* field, uint32_t value);
  void Write64(uint64_t* field, uint64_t value);
  // Ends the operation: from here on it is permanent.
  void Commit();

 private:
  void Record(void* field, uint64_t old_value, uint32_t size);
  uint8_t* base_;
  Journal* journal_;
  bool committed_ = false;
};

// A write that goes through `journal` when one is given (client operations)
// and directly otherwise (the service, whose death ends the segment anyway).
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

}  // namespace shoal::shm

#endif  // SHOAL_SHM_SEGMENT_LOCK_H_
