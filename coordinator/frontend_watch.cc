// Waits and pushed results of remote clients, without periodic scans: a task
// someone waits for is in watched_ (by id, with its push and its waits), in
// the order it was watched. When our task client's doorbell rings (the
// completion_ eventfd), the ring count says how many of our tasks finished
// since the last look; OnCompletions walks the watch order from its front
// until it has found that many finished ones (completions come roughly in
// submission order), so a completion costs about one Poll, not a scan of
// every waiting request. Deadlines of waits are a timer queue: the event
// loop sleeps until the earliest.
#include <algorithm>
#include <map>
#include <utility>

#include "coordinator/coordinator_impl.h"
#include "tasks/task_results.h"

namespace shoal::coordinator {

void Coordinator::Impl::Watch(uint64_t id,
                              std::shared_ptr<const PushTarget> push,
                              uint64_t serial) {
  auto [it, fresh] = watched_.try_emplace(id);
  if (fresh) watch_order_.push_back(id);
  if (push) {
    it->second.push = std::move(push);
  } else {
    it->second.waits.push_back(serial);
  }
}

void Coordinator::Impl::CountUncollected(uint64_t id) {
  auto task = remote_tasks_.find(id);
  if (task == remote_tasks_.end()) return;
  auto p = peers_.find(task->second.peer);
  if (p == peers_.end() || p->second.held_bytes.count(id) != 0) return;
  // Read without taking: the peer collects it later as before.
  const ipc::TaskResult r = ResultOf(id, /*release=*/false);
  uint64_t bytes = 0;
  for (const Value& v : r.outputs) {
    if (const auto* o = std::get_if<ObjectValue>(&v)) bytes += o->nbytes;
  }
  p->second.Hold(id, bytes);
}

void Coordinator::Impl::Unwatch(const PendingWait& wait, uint64_t serial) {
  for (uint64_t id : wait.request.task_ids) {
    auto it = watched_.find(id);
    if (it == watched_.end()) continue;
    std::vector<uint64_t>& waits = it->second.waits;
    waits.erase(std::remove(waits.begin(), waits.end(), serial), waits.end());
    if (waits.empty() && !it->second.push && !it->second.quota)
      watched_.erase(it);
  }
}

void Coordinator::Impl::AddWait(PendingWait wait) {
  const uint64_t serial = next_wait_++;
  if (wait.request.timeout_ms > 0) {
    wait.deadline = wait_deadlines_.emplace(
        absl::Now() + absl::Milliseconds(wait.request.timeout_ms), serial);
  }
  // Counted again here: a task that finished since the caller looked will
  // not be seen by OnCompletions (it is not watched).
  wait.done = 0;
  for (uint64_t id : wait.request.task_ids) {
    absl::StatusOr<tasks::TaskState> st = table_->Poll(id);
    if (st.ok() && *st != tasks::TaskState::kDone) {
      Watch(id, nullptr, serial);
    } else {
      ++wait.done;
    }
  }
  const bool satisfied = wait.done >= wait.want;
  waits_.emplace(serial, std::move(wait));
  if (satisfied) FinishWait(serial);
}

void Coordinator::Impl::FinishWait(uint64_t serial) {
  auto it = waits_.find(serial);
  if (it == waits_.end()) return;
  PendingWait wait = std::move(it->second);
  waits_.erase(it);
  if (wait.deadline) wait_deadlines_.erase(*wait.deadline);
  Unwatch(wait, serial);
  std::optional<ipc::Message> reply =
      TryWait(wait.peer, wait.request, /*force=*/true);
  if (reply) Reply(wait.peer, wait.request_id, *std::move(reply));
}

void Coordinator::Impl::SendHeldIds(const std::set<uint64_t>& answered) {
  std::vector<HeldIds> held;
  held.swap(held_ids_);
  held_until_ = absl::InfiniteFuture();
  for (const HeldIds& h : held) {
    if (answered.count(h.task_id) != 0) continue;
    Reply(h.peer, h.request_id, ipc::SubmitReply{{h.task_id}});
  }
}

void Coordinator::Impl::OnCompletions() {
  const uint32_t rings = table_->ClientRings(own_client_);
  const uint32_t rung = rings - rings_seen_;
  rings_seen_ = rings;
  // Finished watched tasks, found from the front of the watch order. Rings
  // of tasks nobody watches count too, so a short find means a full walk.
  std::vector<uint64_t> finished;
  size_t live = 0;
  for (size_t i = 0; i < watch_order_.size() && finished.size() < rung; ++i) {
    const uint64_t id = watch_order_[i];
    if (watched_.count(id) == 0) continue;
    ++live;
    absl::StatusOr<tasks::TaskState> st = table_->Poll(id);
    if (!st.ok() || *st == tasks::TaskState::kDone) finished.push_back(id);
  }
  // Pushed results, one WaitReply per submit request per round.
  std::map<std::pair<std::string, uint64_t>,
           std::pair<std::shared_ptr<const PushTarget>, ipc::WaitReply>>
      pushes;
  std::vector<uint64_t> due;
  std::set<uint64_t> pushed;  // tasks whose results go below
  for (uint64_t id : finished) {
    auto it = watched_.find(id);
    if (it == watched_.end()) continue;
    TaskWatch watch = std::move(it->second);
    watched_.erase(it);
    for (uint64_t serial : watch.waits) {
      auto w = waits_.find(serial);
      if (w != waits_.end() && ++w->second.done >= w->second.want)
        due.push_back(serial);
    }
    if (!watch.push) {
      if (watch.quota) CountUncollected(id);
      continue;
    }
    const PushTarget& to = *watch.push;
    if (CheckOwner(to.peer, id).ok()) {
      auto& [target, reply] = pushes[{to.peer.key(), to.request_id}];
      target = watch.push;
      reply.results.push_back(TakeFor(StateOf(to.peer), id, true));
      pushed.insert(id);
    }
  }
  // Held ids before any result; a held task pushed now needs none.
  if (!held_ids_.empty()) SendHeldIds(pushed);
  for (auto& [key, push] : pushes) {
    Reply(push.first->peer, push.first->request_id, std::move(push.second));
  }
  for (uint64_t serial : due) FinishWait(serial);
  // Drop stale ids from the front; compact when most of the order is stale.
  while (!watch_order_.empty() && watched_.count(watch_order_.front()) == 0)
    watch_order_.pop_front();
  if (watch_order_.size() > 2 * watched_.size() + 4096) {
    std::deque<uint64_t> kept;
    for (uint64_t id : watch_order_) {
      if (watched_.count(id) != 0) kept.push_back(id);
    }
    watch_order_.swap(kept);
  }
  (void)live;
}

std::optional<absl::Time> Coordinator::Impl::ExpireWaits(absl::Time now) {
  while (!wait_deadlines_.empty() && wait_deadlines_.begin()->first <= now) {
    FinishWait(wait_deadlines_.begin()->second);
  }
  if (wait_deadlines_.empty()) return std::nullopt;
  return wait_deadlines_.begin()->first;
}

void Coordinator::Impl::AnswerOrphanedWaits() {
  while (!orphaned_waits_.empty()) {
    std::vector<uint64_t> serials;
    serials.swap(orphaned_waits_);
    for (uint64_t serial : serials) FinishWait(serial);
  }
}

}  // namespace shoal::coordinator
