#include "shm/futex.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

namespace shoal::shm {

void FutexWait(std::atomic<uint32_t>* word, uint32_t expected,
               absl::Duration timeout) {
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  if (timeout == absl::InfiniteDuration()) {
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected,
            nullptr, nullptr, 0);
    return;
  }
  if (timeout <= absl::ZeroDuration()) return;
  timespec ts = absl::ToTimespec(timeout);  // relative, as FUTEX_WAIT wants
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected,
          &ts, nullptr, 0);
}

void FutexWake(std::atomic<uint32_t>* word, int count) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, count,
          nullptr, nullptr, 0);
}

}  // namespace shoal::shm
