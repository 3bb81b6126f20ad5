#include "base/event_fd.h"

#include <poll.h>

#include "gtest/gtest.h"

namespace shoal {
namespace {

bool Readable(const EventFd& e) {
  pollfd p{e.fd(), POLLIN, 0};
  return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

TEST(EventFdTest, SignalThenDrain) {
  absl::StatusOr<EventFd> e = EventFd::Create();
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_FALSE(Readable(*e));
  e->Signal();
  e->Signal();
  EXPECT_TRUE(Readable(*e));
  e->Drain();
  EXPECT_FALSE(Readable(*e));
  e->Drain();  // nothing to drain: no error, no block
  EXPECT_FALSE(Readable(*e));
}

TEST(EventFdTest, MovesOwnership) {
  absl::StatusOr<EventFd> e = EventFd::Create();
  ASSERT_TRUE(e.ok()) << e.status();
  const int fd = e->fd();
  EventFd moved = *std::move(e);
  EXPECT_EQ(moved.fd(), fd);
  EventFd empty;
  EXPECT_EQ(empty.fd(), -1);
  empty.Signal();  // a no-op before Create
  empty = std::move(moved);
  EXPECT_EQ(empty.fd(), fd);
  empty.Signal();
  EXPECT_TRUE(Readable(empty));
}

}  // namespace
}  // namespace shoal
