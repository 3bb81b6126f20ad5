// EventFd: an eventfd(2) counter that wakes a poll loop: Stop() from another
// thread or a signal handler, or a helper thread saying "work is waiting".
// Owns the descriptor (closed at destruction), so a service holds one member
// instead of writing its own eventfd / write / read / close.
#ifndef SHOAL_BASE_EVENT_FD_H_
#define SHOAL_BASE_EVENT_FD_H_

#include <utility>

#include "absl/status/statusor.h"

namespace shoal {

class EventFd {
 public:
  // A non-blocking, close-on-exec eventfd. Errors: those of eventfd(2).
  static absl::StatusOr<EventFd> Create();

  EventFd() = default;
  EventFd(EventFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  EventFd& operator=(EventFd&& other) noexcept;
  ~EventFd();

  // Makes fd() readable until Drain. Async-signal-safe; a no-op on an
  // EventFd that was never created.
  void Signal() const;
  // Makes fd() unreadable again (until the next Signal).
  void Drain() const;
  // For poll: readable once signalled. -1 before Create.
  int fd() const { return fd_; }

 private:
  explicit EventFd(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace shoal

#endif  // SHOAL_BASE_EVENT_FD_H_
