// Prefaulter: allocates the arena's tmpfs pages in the background, ahead of
// where allocations reach, so that writers do not pay for page allocation and
// zeroing on first touch (a write into fresh shared pages runs an order of
// magnitude slower than into allocated ones; docs/store.md), while start-up
// never waits for a multi-GiB arena.
//
// It works in fixed chunks with fallocate() on the segment's file, from the
// arena's start up to `frontier + ahead`, at the lowest CPU priority. Pages
// are not mapped into any process: each client fills its own page tables
// (Segment::Populate), which is cheap once the pages exist.
#ifndef SHOAL_SHM_PREFAULTER_H_
#define SHOAL_SHM_PREFAULTER_H_

#include <atomic>
#include <cstdint>
#include <thread>

#include "base/mutex.h"

namespace shoal::shm {

class Prefaulter {
 public:
  // Pages [arena_offset, arena_offset + arena_bytes) of file `fd`, keeping
  // `ahead` bytes ready beyond the frontier (0 disables the prefaulter).
  Prefaulter(int fd, uint64_t arena_offset, uint64_t arena_bytes,
             uint64_t ahead);
  ~Prefaulter();  // stops the thread

  // Tells the prefaulter that allocations now reach `frontier` bytes into the
  // arena. Cheap; never blocks.
  void Advance(uint64_t frontier) ABSL_LOCKS_EXCLUDED(mu_);

  // Bytes of the arena known to be allocated.
  uint64_t prefaulted_bytes() const {
    return done_.load(std::memory_order_relaxed);
  }

  // Blocks until everything up to the current target is done (tests, bench).
  void WaitIdle() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  static constexpr uint64_t kChunk = uint64_t{16} << 20;
  void Run() ABSL_LOCKS_EXCLUDED(mu_);

  const int fd_;
  const uint64_t arena_offset_;
  const uint64_t arena_bytes_;
  const uint64_t ahead_;
  std::atomic<uint64_t> done_{0};
  Mutex mu_;
  CondVar cv_;
  uint64_t target_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace shoal::shm

#endif  // SHOAL_SHM_PREFAULTER_H_
