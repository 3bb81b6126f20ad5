// Fair admission: which request the frontend serves next, and how much of
// the event loop's turn requests may take.
//
// The coordinator serves every client on one thread, and libzmq's ROUTER
// hands it requests one per connection in turn, whatever each carries: a
// request of one task and a batch of hundreds cost the thread very
// differently. So requests are weighed (RequestCost: a unit per task they
// submit or name, and one per 64 KiB) and the heavy ones are admitted by
// deficit round robin over the sessions that have some waiting (Shreedhar and
// Varghese's DRR):
//
// - a light request (at most kLightCost) of a session with nothing parked
//   is served when it is read, as is any request while the turn has time
//   left and no other session has requests parked;
// - otherwise a heavy request is parked behind its session's others, and
//   ServeParked serves parked requests round the sessions, each visit
//   adding kQuantum to the session's credit and serving its requests in
//   order while their cost fits the credit;
// - a turn's requests stop when its time (its TurnShape's budget: short
//   when clients share the frontend, long for a lone one) is spent: reading
//   stops, and what is parked goes on in the next turn, from the session
//   where this one stopped. ServeParked has a slice of its own in every
//   turn (the same budget), so parked requests always move;
// - in a turn whose first request comes from a session that has all the
//   frontend's work (no other session has tasks unfinished, requests
//   parked or replies unsent), that session's heavy requests are served as
//   read for kSoloTurnBudget, until a request of another session is read:
//   a lone client pipelining batches does not have them parked for the
//   sake of no one. (Reading still stops with the turn, so that its
//   completions are answered as often as anyone's.)
//
// So a client of light requests waits behind at most one turn of others'
// work, however large their batches, and the sessions sending batches share
// what is left in proportion to their tasks. A request is served whole: a
// batch larger than a turn holds the loop for its own length.
//
// A session over max_reply_bytes_per_client (Session::outstanding) has all
// its requests parked until its client reads its replies. Parked requests
// are bounded per principal in number and bytes: a principal over them
// while over its reply budget breaks the protocol, and the connection the
// request came on is closed. Otherwise a request that finds the bounds full
// is served at once instead of parked, after its session's parked ones.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/frontend.h"

namespace shoal::coordinator {

uint64_t Frontend::RequestCost(uint64_t items, uint64_t bytes) {
  return std::max<uint64_t>(1, items) + bytes / kBytesPerCost;
}

uint64_t Frontend::ItemsOf(const ipc::Message& body) {
  if (const auto* r = std::get_if<ipc::SubmitRequest>(&body))
    return r->tasks.size();
  if (const auto* r = std::get_if<ipc::WaitRequest>(&body))
    return r->task_ids.size();
  if (const auto* r = std::get_if<ipc::ReleaseTasksRequest>(&body))
    return r->task_ids.size();
  if (const auto* r = std::get_if<ipc::CancelRequest>(&body))
    return r->task_ids.size();
  return 0;
}

void Frontend::BeginTurn(absl::Time now) {
  const bool shared = SharedTurn();
  shared_turns_ += shared;
  turn_ = shared ? kSharedTurn : kLoneTurn;
  turn_end_ = now + turn_.budget;
  solo_end_ = now + kSoloTurnBudget;
  turn_sender_ = 0;
  solo_ = false;
}

bool Frontend::SharedTurn() const {
  if (parked_.size() > 1 || unsent_sessions_ > 1) return true;
  // Flows whose tasks all finished stay in watch_order_ until OnCompletions
  // next walks past them: only flows with tasks count.
  int busy_flows = 0;
  for (const auto& [account, order] : watch_order_) {
    if (!order.empty() && ++busy_flows > 1) return true;
  }
  return false;
}

bool Frontend::TurnSpent() const { return absl::Now() >= turn_end_; }

bool Frontend::HeavyWaits() const {
  return absl::Now() >= (solo_ ? solo_end_ : turn_end_);
}

void Frontend::NoteSender(const Session& s) {
  if (turn_sender_ == s.serial) return;
  if (turn_sender_ == 0) {
    turn_sender_ = s.serial;
    solo_ = AloneWithWork(s);
    return;
  }
  turn_sender_ = UINT64_MAX;  // shared: no session's serial
  solo_ = false;
}

bool Frontend::AloneWithWork(const Session& s) const {
  if (unfinished_ != s.unfinished || unsent_sessions_ != 0) return false;
  return parked_.empty() ||
         (parked_.size() == 1 && *parked_.begin() == s.serial);
}

bool Frontend::FitsParked(const Principal& p, uint64_t bytes) const {
  return p.parked + 1 <= options_.max_parked_requests_per_client &&
         p.parked_bytes + bytes <= options_.max_parked_bytes_per_client;
}

void Frontend::Dispatch(Session& s, Request r) {
  if (!OverBudget(s) && !s.parked.empty() &&
      !FitsParked(*s.principal, r.bytes())) {
    // Parked for their turn only, and no room for more: the session's
    // requests go now, in order, rather than its client be cut off.
    const uint64_t serial = s.serial;
    ServeAllParked(s);
    if (Session* still = sessions_.BySerial(serial); still != nullptr)
      Serve(*still, r);
    return;
  }
  if (!s.parked.empty() || OverBudget(s)) {
    Park(s, std::move(r));
    return;
  }
  if (r.cost > kLightCost && (!parked_.empty() || HeavyWaits()) &&
      FitsParked(*s.principal, r.bytes())) {
    Park(s, std::move(r));
    parked_waiting_ = true;
    return;
  }
  Serve(s, r);
}

void Frontend::Serve(Session& s, Request& r) {
  if (!r.body) {
    ipc::DecodeLimits limits;
    limits.max_frame_bytes = options_.max_request_bytes;
    ipc::DecodeResult decoded = ipc::Decode(r.frame, limits);
    if (!decoded.envelope.ok()) {
      Reply(s, r.id, ipc::ErrorReply{decoded.envelope.status()});
      return;
    }
    r.body = std::move(decoded.envelope->body);
  }
  const uint64_t serial = s.serial;
  std::optional<ipc::Message> reply = Handle(s, r.id, *r.body);
  Session* still = sessions_.BySerial(serial);
  if (still != nullptr && reply) Reply(*still, r.id, *std::move(reply));
}

bool Frontend::Park(Session& s, Request r) {
  Principal& p = *s.principal;
  if (!FitsParked(p, r.bytes())) {
    const std::string why = absl::StrCat(
        "it sent ", p.parked + 1, " requests (", p.parked_bytes + r.bytes(),
        " bytes) without reading its replies: over max_parked_requests_per_"
        "client = ",
        options_.max_parked_requests_per_client,
        " or max_parked_bytes_per_client = ",
        options_.max_parked_bytes_per_client);
    // Discarded unserved: a resumable session's client sends them again.
    if (s.resumable() && s.minor >= 5) s.requests.Forget(r.id);
    for (const Request& q : s.parked) {
      --p.parked;
      p.parked_bytes -= q.bytes();
      if (s.resumable() && s.minor >= 5) s.requests.Forget(q.id);
    }
    s.parked.clear();
    s.credit = 0;
    parked_.erase(s.serial);
    CloseConnection(s.route, why);
    return false;
  }
  ++p.parked;
  p.parked_bytes += r.bytes();
  ++parked_requests_;
  s.parked.push_back(std::move(r));
  parked_.insert(s.serial);
  return true;
}

Request Frontend::Unpark(Session& s) {
  Request r = std::move(s.parked.front());
  s.parked.pop_front();
  --s.principal->parked;
  s.principal->parked_bytes -= r.bytes();
  return r;
}

void Frontend::ServeAllParked(Session& s) {
  const uint64_t serial = s.serial;
  for (Session* live = &s; live != nullptr && !live->parked.empty();
       live = sessions_.BySerial(serial)) {
    Request r = Unpark(*live);
    Serve(*live, r);
  }
  if (Session* live = sessions_.BySerial(serial); live != nullptr) {
    live->credit = 0;
    parked_.erase(serial);
  }
}

bool Frontend::ServeSessionParked(Session& s, absl::Time until) {
  const uint64_t serial = s.serial;
  Session* live = &s;
  while (!live->parked.empty() && !OverBudget(*live) &&
         live->parked.front().cost <= live->credit) {
    live->credit -= live->parked.front().cost;
    Request r = Unpark(*live);
    Serve(*live, r);
    live = sessions_.BySerial(serial);
    if (live == nullptr) return absl::Now() >= until;
    if (absl::Now() >= until) break;
  }
  if (live->parked.empty()) {
    live->credit = 0;
    parked_.erase(serial);
  }
  return absl::Now() >= until;
}

void Frontend::ServeParked() {
  if (parked_.empty()) {
    parked_waiting_ = false;
    return;
  }
  const absl::Time until = std::max(turn_end_, absl::Now() + turn_.budget);
  // Rounds over the sessions with requests parked, from where the last
  // turn stopped. A round in which no session could be served skips ahead
  // the rounds the nearest one needs to earn its next request, so each
  // round serves a request or makes one servable in the next; nothing is
  // parked meanwhile, and the loop ends.
  for (;;) {
    std::vector<uint64_t> order(parked_.upper_bound(next_parked_),
                                parked_.end());
    order.insert(order.end(), parked_.begin(),
                 parked_.upper_bound(next_parked_));
    uint64_t fewest_quanta = UINT64_MAX;  // to the nearest one's next request
    bool served = false;
    for (uint64_t serial : order) {
      Session* s = sessions_.BySerial(serial);
      if (s == nullptr) {
        parked_.erase(serial);
        continue;
      }
      if (s->parked.empty()) {
        s->credit = 0;
        parked_.erase(serial);
        continue;
      }
      if (OverBudget(*s)) continue;  // until its client reads
      s->credit += kQuantum;
      const uint64_t before = s->parked.size();
      next_parked_ = serial;
      if (ServeSessionParked(*s, until)) {
        parked_waiting_ = true;
        return;
      }
      s = sessions_.BySerial(serial);
      served |= s == nullptr || s->parked.size() < before;
      if (s != nullptr && !s->parked.empty() && !OverBudget(*s) &&
          s->parked.front().cost > s->credit) {
        // Rounds after the next one before its credit covers the request.
        const uint64_t need = s->parked.front().cost - s->credit;
        fewest_quanta = std::min(fewest_quanta, (need - 1) / kQuantum);
      }
    }
    if (fewest_quanta == UINT64_MAX) {  // nothing waits on credit
      parked_waiting_ = false;
      return;
    }
    if (!served && fewest_quanta > 0) {
      for (uint64_t serial : parked_) {
        Session* s = sessions_.BySerial(serial);
        if (s != nullptr && !s->parked.empty() && !OverBudget(*s))
          s->credit += fewest_quanta * kQuantum;
      }
    }
  }
}

}  // namespace shoal::coordinator
