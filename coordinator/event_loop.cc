// The coordinator's event loop: one thread polls the sockets, the stop and
// completion eventfds, the workers' and local clients' pidfds, and serves
// what became ready. Start-up and exits are in coordinator.cc.

#include <sched.h>
#include <zmq.h>

#include <algorithm>

#include "base/spin_turn.h"
#include "coordinator/coordinator_impl.h"
#include "ipc/router.h"

namespace shoal::coordinator {

void Coordinator::Impl::FillPollSet(PollSet* ps) {
  auto& items = ps->items;
  items.clear();
  // Replies kept for full peer queues go when a socket is writable.
  const short out = unsent_peers_ > 0 && !pollout_stalled_ ? ZMQ_POLLOUT : 0;
  items.push_back(
      {frontend_.raw(), 0, static_cast<short>(ZMQ_POLLIN | out), 0});
  items.push_back({backend_.raw(), 0, ZMQ_POLLIN, 0});
  items.push_back({nullptr, stop_.fd(), ZMQ_POLLIN, 0});
  items.push_back({nullptr, completion_.fd(), ZMQ_POLLIN, 0});
  items.push_back(
      {tcp_frontend_.raw(), 0, static_cast<short>(ZMQ_POLLIN | out), 0});
  items.push_back({frontend_events_.raw(), 0, ZMQ_POLLIN, 0});
  items.push_back({tcp_frontend_events_.raw(), 0, ZMQ_POLLIN, 0});
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

absl::Time Coordinator::Impl::NextWake(absl::Time now, absl::Time next_tick,
                                       bool parked) const {
  // Completions wake the loop (completion_); waits sleep until their
  // deadline (wait_deadlines_), and nothing scans them. A 10 ms tick is
  // left for what only polling sees: cancellations being enforced, parked
  // peers, and task timeouts (CheckTimeouts: the table keeps no deadline
  // queue) while remote clients wait for tasks, as before.
  absl::Time wake = next_tick;
  if (!wait_deadlines_.empty())
    wake = std::min(wake, wait_deadlines_.begin()->first);
  if (!expiring_.empty() || parked || !watched_.empty())
    wake = std::min(wake, now + absl::Milliseconds(10));
  if (unsent_peers_ > 0 && pollout_stalled_)
    wake = std::min(wake, now + absl::Milliseconds(1));
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
  if (spin_for_push_ && SpinAllowed()) {
    const absl::Time until = absl::Now() + spin_for_;
    bool spinning = true;
    while (spinning && !completed && absl::Now() < until) {
      completed = table_->ClientRings(own_client_) != rings_seen_;
      if (!completed) spinning = table_->SpinTurn(busy_spin_ ? spin_task_ : 0);
    }
  }
  spin_for_push_ = false;
  // Without the watcher (few tasks watched) the loop arms the eventfd:
  // a completion after this either shows in the ring count or is written.
  const bool direct = gather_mode_.load() == 0;
  if (direct && !completed)
    completed = table_->ArmClientWakeFd(own_client_) != rings_seen_;
  // A completion already seen is served first; the sockets are polled
  // (without waiting) at the latest by the next call.
  if (completed && !ps->skipped_poll) {
    if (direct) table_->DisarmClientWakeFd(own_client_);
    ps->skipped_poll = true;
    return true;
  }
  ps->skipped_poll = false;
  const int rc = zmq_poll(ps->items.data(), static_cast<int>(ps->items.size()),
                          completed ? 0
                                    : ipc::PollTimeoutMs(std::max(
                                          absl::ZeroDuration(), wake - now)));
  if (direct) table_->DisarmClientWakeFd(own_client_);
  if (rc < 0 && zmq_errno() != EINTR)
    return ipc::ZmqStatus("zmq_poll", __FILE__, __LINE__);
  return completed;
}

void Coordinator::Impl::ServeReady(const PollSet& ps, bool completed,
                                   absl::Time* next_tick) {
  const auto& items = ps.items;
  // Disconnects before requests (frontend_sessions.cc).
  if (items[5].revents & ZMQ_POLLIN) DrainFrontendEvents(/*tcp=*/false);
  if (items[6].revents & ZMQ_POLLIN) DrainFrontendEvents(/*tcp=*/true);
  if (items[0].revents & ZMQ_POLLIN) DrainFrontend(/*tcp=*/false);
  if (items[4].revents & ZMQ_POLLIN) DrainFrontend(/*tcp=*/true);
  if (items[1].revents & ZMQ_POLLIN) DrainBackend();
  if (unsent_peers_ > 0) {
    const bool writable =
        ((items[0].revents | items[4].revents) & ZMQ_POLLOUT) != 0;
    const bool progress = FlushUnsent(absl::Now());
    if (progress) {
      pollout_stalled_ = false;
    } else if (writable) {
      pollout_stalled_ = true;
    }
  }
  if (completed || (items[3].revents & ZMQ_POLLIN)) {
    completion_.Drain();
    OnCompletions();
    CheckActorInits();
  }
  SetGatherMode(watched_.size() >= kGatherAbove);
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
    bool parked = false;
    for (const auto& [key, p] : peers_) parked |= !p.parked.empty();
    absl::StatusOr<bool> completed =
        PollOnce(&ps, now, NextWake(now, next_tick, parked));
    if (!completed.ok()) return completed.status();
    if (ps.items[2].revents & ZMQ_POLLIN) break;  // stop_
    ServeReady(ps, *completed, &next_tick);
    now = absl::Now();
    CheckTimeouts(now);
    ExpireWaits(now);
    AnswerOrphanedWaits();
    if (parked) ServeParked(now);
    if (now >= next_tick) {
      next_tick = std::min(supervisor_->Tick(now), now + absl::Seconds(1));
      ExpireRemoteResults(now);
      ExpireOutputs(now);
      ServeParked(now);
    }
  }
  return absl::OkStatus();
}

}  // namespace shoal::coordinator
