#include "shm/robust_lock.h"

#include <errno.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace shoal::shm {
namespace {

pid_t g_pid = 0;
void ForgetPid() { g_pid = 0; }

}  // namespace

int32_t CachedPid() {
  if (g_pid == 0) {
    static const int registered = pthread_atfork(nullptr, nullptr, ForgetPid);
    (void)registered;
    g_pid = getpid();
  }
  return g_pid;
}

absl::Status InitRobustLock(RobustLock* lock) {
  pthread_mutexattr_t attr;
  int rc = pthread_mutexattr_init(&attr);
  if (rc == 0) rc = pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  if (rc == 0) rc = pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  if (rc == 0) rc = pthread_mutex_init(&lock->mutex, &attr);
  pthread_mutexattr_destroy(&attr);
  if (rc != 0) return SHOAL_ERRNO_VALUE(rc, "initialising a robust mutex");
  lock->owner_pid = 0;
  lock->repairs = 0;
  lock->journal.active.store(0, std::memory_order_relaxed);
  lock->journal.count.store(0, std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::StatusOr<LockGuard> LockGuard::Acquire(uint8_t* base, RobustLock* lock,
                                             absl::Duration timeout,
                                             absl::string_view what) {
  // Uncontended fast path: no clock read, no deadline arithmetic.
  int rc = pthread_mutex_trylock(&lock->mutex);
  if (rc != EBUSY) {
    // 0 or EOWNERDEAD (or an error), handled below.
  } else if (timeout == absl::InfiniteDuration()) {
    rc = pthread_mutex_lock(&lock->mutex);
  } else {
    const absl::Time deadline = absl::Now() + timeout;
    timespec ts = absl::ToTimespec(deadline);
    do {
      // timedlock, not clocklock: ThreadSanitizer intercepts only the former.
      rc = pthread_mutex_timedlock(&lock->mutex, &ts);
    } while (rc == EINTR);
  }
  if (rc == ETIMEDOUT) {
    return absl::DeadlineExceededError(
        absl::StrCat("the ", what, " lock has been held for over ",
                     absl::FormatDuration(timeout), " by pid ", lock->owner_pid,
                     " (stopped or deadlocked?)"));
  }
  LockGuard guard(lock);
  if (rc == EOWNERDEAD) {
    // The previous holder died inside its critical section: undo its
    // half-done operation, then make the mutex usable again.
    guard.repaired_ = RollBackJournal(base, &lock->journal);
    lock->repairs++;
    if (pthread_mutex_consistent(&lock->mutex) != 0) {
      guard.lock_ = nullptr;
      return absl::InternalError(
          absl::StrCat("could not mark the ", what, " lock consistent"));
    }
  } else if (rc != 0) {
    guard.lock_ = nullptr;
    if (rc == ENOTRECOVERABLE) {
      return absl::InternalError(absl::StrCat(
          "the ", what,
          " lock is unrecoverable; restart the process that owns it"));
    }
    return SHOAL_ERRNO_VALUE(rc, absl::StrCat("locking the ", what));
  }
  lock->owner_pid = CachedPid();
  return guard;
}

LockGuard::~LockGuard() {
  if (lock_ != nullptr) {
    lock_->owner_pid = 0;
    pthread_mutex_unlock(&lock_->mutex);
  }
}

bool RollBackJournal(uint8_t* base, Journal* journal) {
  Journal& j = *journal;
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

JournaledWriter::JournaledWriter(uint8_t* base, Journal* journal)
    : base_(base), journal_(journal) {
  journal_->count.store(0, std::memory_order_relaxed);
  journal_->pid = CachedPid();
  journal_->active.store(1, std::memory_order_release);
}

void JournaledWriter::Record(void* field, uint64_t old_value, uint32_t size) {
  const uint64_t offset =
      static_cast<uint64_t>(static_cast<uint8_t*>(field) - base_);
  const uint32_t n = journal_->count.load(std::memory_order_relaxed);
  for (uint32_t i = 0; i < n; ++i) {
    // Already recorded in this operation: its first old value is what a
    // rollback must restore.
    if (journal_->records[i].offset == offset) return;
  }
  if (n >= kMaxUndoRecords) {
    // Operations are sized to fit; overflowing would make the rollback
    // incomplete, which is worse than stopping here.
    std::abort();
  }
  UndoRecord& r = journal_->records[n];
  r.offset = offset;
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

void JournaledWriter::WriteAtomic32(std::atomic<uint32_t>* field,
                                    uint32_t value) {
  Record(field, field->load(std::memory_order_relaxed), 4);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  field->store(value, std::memory_order_release);
}

void JournaledWriter::Commit() {
  if (committed_) return;
  committed_ = true;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  journal_->active.store(0, std::memory_order_release);
}

}  // namespace shoal::shm
