#include "base/event_fd.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdint>

#include "base/status_macros.h"

namespace shoal {

absl::StatusOr<EventFd> EventFd::Create() {
  const int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (fd < 0) return SHOAL_ERRNO("eventfd");
  return EventFd(fd);
}

EventFd& EventFd::operator=(EventFd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

EventFd::~EventFd() {
  if (fd_ >= 0) close(fd_);
}

void EventFd::Signal() const {
  if (fd_ < 0) return;
  const uint64_t one = 1;
  // Only fails when the counter would overflow: it is readable then anyway.
  ssize_t unused = write(fd_, &one, sizeof(one));
  (void)unused;
}

void EventFd::Drain() const {
  if (fd_ < 0) return;
  uint64_t value;
  // Fails with EAGAIN when nothing was signalled: nothing to drain.
  ssize_t unused = read(fd_, &value, sizeof(value));
  (void)unused;
}

}  // namespace shoal
