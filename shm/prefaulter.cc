#include "shm/prefaulter.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>

namespace shoal::shm {

Prefaulter::Prefaulter(int fd, uint64_t arena_offset, uint64_t arena_bytes,
                       uint64_t ahead)
    : fd_(fd),
      arena_offset_(arena_offset),
      arena_bytes_(arena_bytes),
      ahead_(ahead) {
  if (ahead_ == 0) return;
  {
    MutexLock lock(&mu_);
    target_ = std::min(arena_bytes_, ahead_);
  }
  thread_ = std::thread([this] { Run(); });
}

Prefaulter::~Prefaulter() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
    cv_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
}

void Prefaulter::Advance(uint64_t frontier) {
  if (ahead_ == 0) return;
  const uint64_t want = std::min(arena_bytes_, frontier + ahead_);
  MutexLock lock(&mu_);
  if (want > target_) {
    target_ = want;
    cv_.SignalAll();
  }
}

void Prefaulter::WaitIdle() {
  MutexLock lock(&mu_);
  while (!stop_ && done_.load() < target_) cv_.Wait(&mu_);
}

void Prefaulter::Run() {
  // Lowest priority: this is work the machine can do when it is otherwise idle.
  setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 19);
  while (true) {
    uint64_t from, to;
    {
      MutexLock lock(&mu_);
      while (!stop_ && done_.load() >= target_) cv_.Wait(&mu_);
      if (stop_) return;
      from = done_.load();
      to = std::min(target_, from + kChunk);
    }
    // fallocate on tmpfs allocates (and zeroes) the pages without mapping
    // them. A failure (ENOSPC) just ends prefaulting: writers will then fault
    // the pages in themselves, and the allocator reports real exhaustion.
    if (fallocate(fd_, 0, static_cast<off_t>(arena_offset_ + from),
                  static_cast<off_t>(to - from)) != 0) {
      MutexLock lock(&mu_);
      target_ = from;
      cv_.SignalAll();
      continue;
    }
    done_.store(to);
    MutexLock lock(&mu_);
    cv_.SignalAll();
  }
}

}  // namespace shoal::shm
