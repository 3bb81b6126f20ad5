// The coordinator's event loop: one thread polls the sockets, the stop and
// completion eventfds, the workers' and local clients' pidfds, and serves
// what became ready. Start-up and exits are in coordinator.cc.

#include <poll.h>
#include <sched.h>
#include <zmq.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/spin_turn.h"
#include "coordinator/coordinator_impl.h"
#include "ipc/router.h"

namespace shoal::coordinator {

void Coordinator::Impl::FillPollSet(PollSet* ps) {
  auto& items = ps->items;
  items.clear();
  // Replies kept for full client queues go when a socket is writable.
  const short out = frontend_->WantsWritable() ? ZMQ_POLLOUT : 0;
  // In PollItem's order.
  items.push_back(
      {frontend_->ipc_socket(), 0, static_cast<short>(ZMQ_POLLIN | out), 0});
  items.push_back({backend_.raw(), 0, ZMQ_POLLIN, 0});
  items.push_back({nullptr, stop_.fd(), ZMQ_POLLIN, 0});
  items.push_back({nullptr, completion_.fd(), ZMQ_POLLIN, 0});
  items.push_back(
      {frontend_->tcp_socket(), 0, static_cast<short>(ZMQ_POLLIN | out), 0});
  items.push_back({frontend_->ipc_events(), 0, ZMQ_POLLIN, 0});
  items.push_back({frontend_->tcp_events(), 0, ZMQ_POLLIN, 0});
  static_assert(kFixedItems == 7);
  ps->fds.clear();
  ps->who.clear();
  supervisor_->PollFds(&ps->fds, &ps->who);
  ps->workers_at = items.size();
  for (int fd : ps->fds) items.push_back({nullptr, fd, ZMQ_POLLIN, 0});
  ps->clients_at = items.size();
  ps->client_ids.clear();
  for (const auto& [slot, c] : local_clients_) {
    items.push_back({nullptr, c.pidfd, ZMQ_POLLIN, 0});
    ps->client_ids.push_back(slot);
  }
}

absl::Time Coordinator::Impl::NextWake(absl::Time now,
                                       absl::Time next_tick) const {
  // Completions wake the loop (completion_); waits sleep until their
  // deadline, and nothing scans them. A 10 ms tick is left for what only
  // polling sees: task timeouts (CheckTimeouts: the table keeps no deadline
  // queue) while tasks run for remote clients.
  absl::Time wake = std::min(next_tick, frontend_->NextWake(now));
  if (!expiring_.empty() || frontend_->watched() > 0)
    wake = std::min(wake, now + absl::Milliseconds(10));
  return wake;
}

absl::StatusOr<bool> Coordinator::Impl::PollOnce(PollSet* ps, absl::Time now,
                                                 absl::Time wake) {
  // A pushed task was just submitted with few others watched (a sync
  // client): look at the ring count for a moment before sleeping, which
  // saves the watcher's futex and eventfd wake-ups when it finishes soon.
  // Bounded (spin_for_); it yields the CPU to the worker running it, unless
  // that worker runs on another CPU (then a yield would hand this one to an
  // idle worker spinning beside it for a round).
  // Not while the CPU is contended (base/spin_turn.h): a stolen turn ends
  // the spin, and the eventfd wakes the loop.
  bool completed = false;
  uint64_t spin_task = 0;
  const uint32_t seen = frontend_->rings_seen();
  if (frontend_->TakeSpinRequest(&spin_task) && SpinAllowed()) {
    const absl::Time until = absl::Now() + spin_for_;
    bool spinning = true;
    while (spinning && !completed && absl::Now() < until) {
      completed = table_->ClientRings(own_client_) != seen;
      if (!completed) spinning = table_->SpinTurn(spin_task);
    }
  }
  // Without the watcher (few tasks watched) the loop arms the eventfd:
  // a completion after this either shows in the ring count or is written.
  const bool direct = gather_mode_.load() == 0;
  if (direct && !completed)
    completed = table_->ArmClientWakeFd(own_client_) != seen;
  // A completion already seen is served first; the sockets are polled
  // (without waiting) at the latest by the next call.
  if (completed && !ps->skipped_poll) {
    if (direct) table_->DisarmClientWakeFd(own_client_);
    ps->skipped_poll = true;
    return true;
  }
  ps->skipped_poll = false;
  const int rc = Poll(ps, completed ? 0
                                    : ipc::PollTimeoutMs(std::max(
                                          absl::ZeroDuration(), wake - now)));
  if (direct) table_->DisarmClientWakeFd(own_client_);
  if (rc < 0) {
    return absl::InternalError(
        absl::StrCat("the event loop's poll: ", std::strerror(errno)));
  }
  return completed;
}

namespace {

// A ZeroMQ socket's events (ZMQ_EVENTS), or ZMQ_POLLERR if it cannot say.
short SocketEvents(void* socket) {
  uint32_t events = 0;
  size_t size = sizeof(events);
  if (zmq_getsockopt(socket, ZMQ_EVENTS, &events, &size) != 0)
    return ZMQ_POLLERR;
  return static_cast<short>(events);
}

}  // namespace

int Coordinator::Impl::Poll(PollSet* ps, long timeout_ms) {
  auto& items = ps->items;
  auto& fds = ps->pollfds;
  fds.resize(items.size());
  bool ready = false;
  for (size_t i = 0; i < items.size(); ++i) {
    zmq_pollitem_t& item = items[i];
    item.revents = 0;
    fds[i] = {item.fd, POLLIN, 0};
    if (item.socket == nullptr) continue;
    size_t size = sizeof(fds[i].fd);
    if (zmq_getsockopt(item.socket, ZMQ_FD, &fds[i].fd, &size) != 0) return -1;
    // Touched since its last read: ready now, or its descriptor is exact
    // once ZMQ_EVENTS has processed the socket's pending commands.
    if (i < kFixedItems && (touched_ & (1u << i)) != 0) {
      item.revents = SocketEvents(item.socket) & (item.events | ZMQ_POLLERR);
      ready |= item.revents != 0;
    }
  }
  touched_ = 0;
  int rc =
      poll(fds.data(), fds.size(), ready ? 0 : static_cast<int>(timeout_ms));
  if (rc < 0 && errno != EINTR) return -1;
  int n = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    zmq_pollitem_t& item = items[i];
    const short got = rc > 0 ? fds[i].revents : 0;
    if (item.socket == nullptr) {
      if (got & (POLLIN | POLLERR | POLLHUP)) item.revents |= ZMQ_POLLIN;
    } else if (got != 0) {
      // The socket's mailbox signalled: read what changed.
      item.revents = SocketEvents(item.socket) & (item.events | ZMQ_POLLERR);
    }
    n += item.revents != 0;
  }
  return n;
}

void Coordinator::Impl::ServeReady(const PollSet& ps, bool completed,
                                   absl::Time* next_tick) {
  const auto& items = ps.items;
  frontend_->BeginTurn(absl::Now());
  // Closed connections before requests (coordinator/frontend.cc).
  if (items[kEventsItem].revents & ZMQ_POLLIN)
    frontend_->DrainEvents(/*tcp=*/false);
  if (items[kTcpEventsItem].revents & ZMQ_POLLIN)
    frontend_->DrainEvents(/*tcp=*/true);
  if (items[kFrontendItem].revents & ZMQ_POLLIN)
    frontend_->DrainRequests(/*tcp=*/false);
  if (items[kTcpFrontendItem].revents & ZMQ_POLLIN)
    frontend_->DrainRequests(/*tcp=*/true);
  if (items[kBackendItem].revents & ZMQ_POLLIN) DrainBackend();
  if (completed || (items[kCompletionItem].revents & ZMQ_POLLIN) ||
      frontend_->completions_owed()) {
    completion_.Drain();
    frontend_->OnCompletions();
    actors_->CheckInits();
  }
  const bool writable =
      ((items[kFrontendItem].revents | items[kTcpFrontendItem].revents) &
       ZMQ_POLLOUT) != 0;
  frontend_->Pump(absl::Now(), writable);
  SetGatherMode(frontend_->watched() >= kGatherAbove);
  MarkFrontendTouched();
  for (size_t i = ps.workers_at; i < ps.clients_at; ++i) {
    if (items[i].revents & ZMQ_POLLIN) {
      supervisor_->OnExit(ps.who[i - ps.workers_at]);
      *next_tick = absl::Now();  // so the restart's tick comes on time
    }
  }
  for (size_t i = ps.clients_at; i < items.size(); ++i) {
    if (items[i].revents & ZMQ_POLLIN)
      OnLocalClientExit(ps.client_ids[i - ps.clients_at]);
  }
}

absl::Status Coordinator::Impl::Run() {
  PollSet ps;
  absl::Time next_tick = absl::Now();
  while (!stop_requested_) {
    FillPollSet(&ps);
    absl::Time now = absl::Now();
    absl::StatusOr<bool> completed =
        PollOnce(&ps, now, NextWake(now, next_tick));
    if (!completed.ok()) return completed.status();
    if (ps.items[kStopItem].revents & ZMQ_POLLIN) break;  // stop_
    ServeReady(ps, *completed, &next_tick);
    now = absl::Now();
    CheckTimeouts(now);
    frontend_->Tick(now);
    MarkFrontendTouched();
    if (now >= next_tick) {
      next_tick = std::min(supervisor_->Tick(now), now + absl::Seconds(1));
    }
  }
  return absl::OkStatus();
}

}  // namespace shoal::coordinator
