// Waits and pushed results of the frontend's clients, without periodic
// scans. Every remote task is in tasks_ and, until it finishes, in its
// flow's watch order (the order its principal submitted it in; the task
// table serves flows fairly, each flow's tasks roughly in order). When our
// task client's doorbell rings (the completion eventfd), the ring count says
// how many of our tasks finished since the last look; OnCompletions walks
// the front of each flow's order (its running tasks and those just
// finished) until it has found that many, so a completion costs a few Polls
// per busy flow, not a scan of every waiting task; a burst is taken a slice
// a turn (the turn shape's `finished`). A completion it misses is found by the
// next Sweep's whole walk. Deadlines of waits are a timer queue: the event loop
// sleeps until the earliest.
//
// A pushed task's result goes to its session's `ready` queue and is taken
// from the table only when the session has room in its reply budget
// (PushReady): a client that does not read leaves its results in the table,
// where they wait for it (never dropped).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <iterator>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "coordinator/frontend.h"
#include "tasks/task_results.h"

namespace shoal::coordinator {
namespace {

// Results per pushed WaitReply.
constexpr size_t kResultsPerPush = 64;

}  // namespace

void Frontend::AddWait(Session& s, PendingWait wait) {
  const uint64_t serial = next_wait_++;
  if (wait.request.timeout_ms > 0) {
    wait.deadline = wait_deadlines_.emplace(
        absl::Now() + absl::Milliseconds(wait.request.timeout_ms), serial);
  }
  wait.session = s.serial;
  wait.done = 0;
  for (uint64_t id : wait.request.task_ids) {
    RemoteTask& t = tasks_.at(id);  // REQUIRES: checked by CheckOwner
    if (t.done) {
      ++wait.done;
    } else {
      t.waits.push_back(serial);
    }
  }
  Principal& p = *s.principal;
  ++p.waits;
  p.wait_ids += wait.request.task_ids.size();
  s.waits.insert(serial);
  const bool satisfied = wait.done >= wait.want;
  waits_.emplace(serial, std::move(wait));
  if (satisfied) FinishWait(serial);
}

void Frontend::DropWait(uint64_t serial) {
  auto it = waits_.find(serial);
  if (it == waits_.end()) return;
  PendingWait& w = it->second;
  if (w.deadline) wait_deadlines_.erase(*w.deadline);
  for (uint64_t id : w.request.task_ids) {
    auto t = tasks_.find(id);
    if (t == tasks_.end()) continue;
    std::vector<uint64_t>& waits = t->second.waits;
    waits.erase(std::remove(waits.begin(), waits.end(), serial), waits.end());
  }
  if (Session* s = sessions_.BySerial(w.session)) {
    s->waits.erase(serial);
    --s->principal->waits;
    s->principal->wait_ids -= w.request.task_ids.size();
  }
  waits_.erase(it);
}

void Frontend::FinishWait(uint64_t serial) {
  auto it = waits_.find(serial);
  if (it == waits_.end()) return;
  const uint64_t session = it->second.session;
  const uint64_t request_id = it->second.request_id;
  const ipc::WaitRequest request = it->second.request;
  DropWait(serial);
  Session* s = sessions_.BySerial(session);
  if (s == nullptr) return;
  std::optional<ipc::Message> reply = TryWait(*s, request, /*force=*/true);
  if (reply) Reply(*s, request_id, *std::move(reply));
}

std::optional<ipc::Message> Frontend::TryWait(Session& s,
                                              const ipc::WaitRequest& m,
                                              bool force) {
  size_t done = 0;
  for (uint64_t id : m.task_ids) {
    if (absl::Status owner = CheckOwner(s, id); !owner.ok())
      return ipc::ErrorReply{owner};
    absl::StatusOr<tasks::TaskState> st = table_->Poll(id);
    if (!st.ok()) return ipc::ErrorReply{st.status()};
    if (*st == tasks::TaskState::kDone) ++done;
  }
  const size_t want = m.min_done == 0
                          ? m.task_ids.size()
                          : std::min<size_t>(m.min_done, m.task_ids.size());
  if (done < want && !force) return std::nullopt;
  ipc::WaitReply reply;
  for (uint64_t id : m.task_ids) {
    absl::StatusOr<tasks::TaskState> st = table_->Poll(id);
    if (!st.ok() || *st != tasks::TaskState::kDone) continue;
    reply.results.push_back(TakeFor(s, id, m.release));
  }
  return reply;
}

void Frontend::ExpireWaits(absl::Time now) {
  while (!wait_deadlines_.empty() && wait_deadlines_.begin()->first <= now)
    FinishWait(wait_deadlines_.begin()->second);
}

void Frontend::SendHeldIds(Session& s, const std::set<uint64_t>& answered) {
  std::vector<std::pair<uint64_t, uint64_t>> held;
  held.swap(s.held_ids);
  holding_ids_.erase(s.serial);
  for (const auto& [request, task] : held) {
    if (answered.count(task) != 0) continue;
    Reply(s, request, ipc::SubmitReply{{task}});
  }
}

void Frontend::SendAllHeldIds() {
  for (uint64_t serial : std::set<uint64_t>(holding_ids_)) {
    if (Session* s = sessions_.BySerial(serial)) SendHeldIds(*s, {});
  }
  holding_ids_.clear();
  held_until_ = absl::InfiniteFuture();
}

void Frontend::PushReady(Session& s) {
  // Taken first, so that held ids (which go before any result) know which
  // tasks this round answers.
  std::vector<std::pair<uint64_t, ipc::WaitReply>> pushes;
  std::set<uint64_t> answered;
  while (!s.ready.empty() && !OverBudget(s)) {
    const uint64_t request = s.ready.front().first;
    ipc::WaitReply reply;
    uint64_t bytes = 0;
    while (!s.ready.empty() && s.ready.front().first == request &&
           reply.results.size() < kResultsPerPush) {
      const uint64_t id = s.ready.front().second;
      s.ready.pop_front();
      if (tasks_.count(id) == 0) continue;  // released or expired meanwhile
      reply.results.push_back(TakeFor(s, id, /*release=*/true));
      answered.insert(id);
      for (const Value& v : reply.results.back().outputs) {
        if (const auto* t = std::get_if<TensorValue>(&v))
          bytes += t->data.size();
      }
    }
    if (reply.results.empty()) continue;
    pushes.emplace_back(request, std::move(reply));
    // Counted now, so that the loop stops at the budget.
    if (bytes + s.outstanding() > options_.max_reply_bytes_per_client) break;
  }
  if (!s.held_ids.empty()) SendHeldIds(s, answered);
  for (auto& [request, reply] : pushes) Reply(s, request, std::move(reply));
  if (s.ready.empty()) {
    waiting_budget_.erase(s.serial);
  } else {
    waiting_budget_.insert(s.serial);
  }
}

void Frontend::OnCompletions() {
  const uint32_t rings = table_->ClientRings(own_client_);
  const uint64_t rung = uint64_t{rings - rings_seen_} + completions_owed_;
  rings_seen_ = rings;
  // At most the turn shape's `finished`, so a burst of completions does not
  // hold up the requests waiting to be read; the flows are walked from
  // where the last look stopped, so none waits for the others' bursts.
  const size_t want =
      static_cast<size_t>(std::min<uint64_t>(rung, turn_.finished));
  // Each flow's front holds its running tasks and those that finished since
  // the last look: at most the workers' count plus the rings.
  const size_t look_ahead = want + tasks::kMaxTaskWorkers;
  std::vector<uint64_t> finished;
  auto it = watch_order_.lower_bound(next_flow_);
  for (size_t flows = watch_order_.size(); flows > 0 && finished.size() < want;
       --flows) {
    if (it == watch_order_.end()) it = watch_order_.begin();
    CollectFinished(it->second, look_ahead, want, &finished);
    it = it->second.empty() ? watch_order_.erase(it) : std::next(it);
  }
  next_flow_ = it == watch_order_.end() ? 0 : it->first;
  completions_owed_ = 0;
  if (finished.size() == want && want < rung) {
    completions_owed_ = rung - want;  // the next turn goes on
  } else if (finished.size() < rung) {
    completions_missed_ = true;
  }
  MarkFinished(finished);
}

void Frontend::CollectFinished(std::deque<uint64_t>& order, size_t look_ahead,
                               size_t most, std::vector<uint64_t>* finished) {
  size_t kept = 0, i = 0, open = 0;
  for (; i < order.size() && open < look_ahead && finished->size() < most;
       ++i) {
    const uint64_t id = order[i];
    auto t = tasks_.find(id);
    if (t == tasks_.end() || t->second.done) continue;
    absl::StatusOr<tasks::TaskState> st = table_->Poll(id);
    if (!st.ok() || *st == tasks::TaskState::kDone) {
      finished->push_back(id);
      continue;
    }
    order[kept++] = id;
    ++open;
  }
  order.erase(order.begin() + static_cast<std::ptrdiff_t>(kept),
              order.begin() + static_cast<std::ptrdiff_t>(i));
}

void Frontend::FindMissedCompletions() {
  completions_missed_ = false;
  std::vector<uint64_t> finished;
  for (auto it = watch_order_.begin(); it != watch_order_.end();) {
    CollectFinished(it->second, SIZE_MAX, SIZE_MAX, &finished);
    it = it->second.empty() ? watch_order_.erase(it) : std::next(it);
  }
  MarkFinished(finished);
}

void Frontend::MarkFinished(const std::vector<uint64_t>& finished) {
  std::vector<uint64_t> due;
  std::set<uint64_t> pushing;  // sessions with results to push
  for (uint64_t id : finished) {
    auto it = tasks_.find(id);
    if (it == tasks_.end()) continue;
    RemoteTask& t = it->second;
    t.done = true;
    t.finished = absl::Now();
    --unfinished_;
    Session* s = sessions_.BySerial(t.session);
    if (s != nullptr) {
      ++s->principal->finished;
      --s->unfinished;
    }
    for (uint64_t serial : t.waits) {
      auto w = waits_.find(serial);
      if (w != waits_.end() && ++w->second.done >= w->second.want)
        due.push_back(serial);
    }
    t.waits.clear();
    if (s == nullptr) continue;
    if (t.push_request != 0) {
      s->ready.emplace_back(t.push_request, id);
      pushing.insert(s->serial);
    } else {
      CountFinished(id);
    }
  }
  for (uint64_t serial : pushing) {
    if (Session* s = sessions_.BySerial(serial)) PushReady(*s);
  }
  for (uint64_t serial : due) FinishWait(serial);
}

}  // namespace shoal::coordinator
