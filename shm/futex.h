// Futex wait/wake on 32-bit words in shared memory (process-shared, so never
// FUTEX_PRIVATE_FLAG), and the sleep/wake handshake the task table uses.
#ifndef SHOAL_SHM_FUTEX_H_
#define SHOAL_SHM_FUTEX_H_

#include <atomic>
#include <cstdint>

#include "absl/time/time.h"

namespace shoal::shm {

// Sleeps while *word == expected, up to `timeout` (InfiniteDuration: no
// limit). Returns early on a wake, a signal, or a spurious wakeup: callers
// re-check their condition.
void FutexWait(std::atomic<uint32_t>* word, uint32_t expected,
               absl::Duration timeout);

// Wakes up to `count` sleepers on `word`.
void FutexWake(std::atomic<uint32_t>* word, int count = 1);

// A doorbell one side rings and the other sleeps on, without a system call on
// either side when the sleeper is awake:
//   sleeper: uint32_t seen = bell.Arm(); if (!ready()) bell.Sleep(seen, t);
//   bell.Disarm(); ringer:  make ready() true; bell.Ring();
// Both sides use sequentially consistent atomics, so either the sleeper sees
// the condition or the ringer sees the sleeper (no lost wakeup).
struct Doorbell {
  std::atomic<uint32_t> rings;
  std::atomic<uint32_t> sleepers;

  uint32_t Arm() {
    sleepers.fetch_add(1, std::memory_order_seq_cst);
    return rings.load(std::memory_order_seq_cst);
  }
  void Sleep(uint32_t seen, absl::Duration timeout) {
    FutexWait(&rings, seen, timeout);
  }
  void Disarm() { sleepers.fetch_sub(1, std::memory_order_seq_cst); }
  void Ring() {
    rings.fetch_add(1, std::memory_order_seq_cst);
    if (sleepers.load(std::memory_order_seq_cst) != 0)
      FutexWake(&rings, 1 << 30);
  }
  // Rings only if nobody rang since a sleeper armed and saw `armed`; whether
  // this call rang. A ringer that wants one sleeper per wake-up uses it to
  // tell a sleeper already rung (but not awake yet) from one still waiting.
  bool RingIfUnrung(uint32_t armed) {
    if (!rings.compare_exchange_strong(armed, armed + 1,
                                       std::memory_order_seq_cst)) {
      return false;
    }
    if (sleepers.load(std::memory_order_seq_cst) != 0)
      FutexWake(&rings, 1 << 30);
    return true;
  }
};

}  // namespace shoal::shm

#endif  // SHOAL_SHM_FUTEX_H_
