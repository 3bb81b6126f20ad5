#include "shm/segment_lock.h"

#include <errno.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "ipc/status_macros.h"

namespace shoal::shm {
namespace {

SegmentHeader* Header(uint8_t* base) {
  return reinterpret_cast<SegmentHeader*>(base);
}

// getpid() is a system call (glibc no longer caches it); the lock's fast path
// records the holder's pid, so remember it, and forget it in a forked child.
pid_t g_pid = 0;
void ForgetPid() { g_pid = 0; }
pid_t CachedPid() {
  if (g_pid == 0) {
    static const int registered = pthread_atfork(nullptr, nullptr, ForgetPid);
    (void)registered;
    g_pid = getpid();
  }
  return g_pid;
}

}  // namespace

absl::Status InitSegmentLock(SegmentHeader* header) {
  pthread_mutexattr_t attr;
  int rc = pthread_mutexattr_init(&attr);
  if (rc == 0) rc = pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  if (rc == 0) rc = pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  if (rc == 0) rc = pthread_mutex_init(&header->lock, &attr);
  pthread_mutexattr_destroy(&attr);
  if (rc != 0) return SHOAL_ERRNO_VALUE(rc, "initialising the segment mutex");
  header->journal.active.store(0, std::memory_order_relaxed);
  header->journal.count.store(0, std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::StatusOr<SegmentLock> SegmentLock::Acquire(uint8_t* base,
                                                 absl::Duration timeout) {
  SegmentHeader* h = Header(base);
  // Uncontended fast path: no clock read, no deadline arithmetic.
  int rc = pthread_mutex_trylock(&h->lock);
  if (rc != EBUSY) {
    // 0 or EOWNERDEAD (or an error), handled below.
  } else if (timeout == absl::InfiniteDuration()) {
    rc = pthread_mutex_lock(&h->lock);
  } else {
    const absl::Time deadline = absl::Now() + timeout;
    timespec ts = absl::ToTimespec(deadline);
    do {
      // timedlock, not clocklock: ThreadSanitizer intercepts only the former.
      rc = pthread_mutex_timedlock(&h->lock, &ts);
    } while (rc == EINTR);
  }
  if (rc == ETIMEDOUT) {
    return absl::DeadlineExceededError(
        absl::StrCat("the store's table lock has been held for over ",
                     absl::FormatDuration(timeout), " by pid ",
                     h->lock_owner_pid, " (stopped or deadlocked?)"));
  }
  SegmentLock lock(base);
  if (rc == EOWNERDEAD) {
    // The previous holder died inside its critical section: undo its
    // half-done operation, then make the mutex usable again.
    lock.repaired_ = RollBackJournal(base);
    h->lock_repairs++;
    if (pthread_mutex_consistent(&h->lock) != 0) {
      lock.base_ = nullptr;
      return absl::InternalError(
          "could not mark the store's table lock consistent");
    }
  } else if (rc != 0) {
    lock.base_ = nullptr;
    if (rc == ENOTRECOVERABLE) {
      return absl::InternalError(
          "the store's table lock is unrecoverable; restart the store");
    }
    return SHOAL_ERRNO_VALUE(rc, "locking the store's table");
  }
  h->lock_owner_pid = CachedPid();
  return lock;
}

SegmentLock::~SegmentLock() {
  if (base_ != nullptr) {
    SegmentHeader* h = Header(base_);
    h->lock_owner_pid = 0;
    pthread_mutex_unlock(&h->lock);
  }
}

bool RollBackJournal(uint8_t* base) {
  Journal& j = Header(base)->journal;
  if (j.active.load(std::memory_order_acquire) == 0) return false;
  const uint32_t n = std::min<uint32_t>(j.count.load(std::memory_order_acquire),
                                        kMaxUndoRecords);
  for (uint32_t i = n; i-- > 0;) {
    const UndoRecord& r = j.records[i];
    if (r.size == 4) {
      const uint32_t v = static_cast<uint32_t>(r.old_value);
      std::memcpy(base + r.offset, &v, 4);
    } else {
      std::memcpy(base + r.offset, &r.old_value, 8);
    }
  }
  j.count.store(0, std::memory_order_relaxed);
  j.active.store(0, std::memory_order_release);
  return true;
}

JournaledWriter::JournaledWriter(uint8_t* base)
    : base_(base), journal_(&Header(base)->journal) {
  journal_->count.store(0, std::memory_order_relaxed);
  journal_->pid = CachedPid();
  journal_->active.store(1, std::memory_order_release);
}

void JournaledWriter::Record(void* field, uint64_t old_value, uint32_t size) {
  uint32_t n = journal_->count.load(std::memory_order_relaxed);
  if (n >= kMaxUndoRecords) {
    // Operations are sized to fit; overflowing would make the rollback
    // incomplete, which is worse than stopping here.
    abort();
  }
  UndoRecord& r = journal_->records[n];
  r.offset = static_cast<uint64_t>(static_cast<uint8_t*>(field) - base_);
  r.old_value = old_value;
  r.size = size;
  // The record must be complete before the count covers it, and the count
  // before the field changes.
  journal_->count.store(n + 1, std::memory_order_release);
}

void JournaledWriter::Write32(uint32_t* field, uint32_t value) {
  Record(field, *field, 4);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  *field = value;
}

void JournaledWriter::Write64(uint64_t* field, uint64_t value) {
  Record(field, *field, 8);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  *field = value;
}

void JournaledWriter::Commit() {
  if (committed_) return;
  committed_ = true;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  journal_->active.store(0, std::memory_order_release);
}

}  // namespace shoal::shm
