// The coordinator's frontend sockets and the clients on them: reading
// requests (with the CURVE key each came with), who may do what, quotas, and
// back-pressure in bytes on replies (docs/security.md).
//
// Replies go out zero-copy: ZeroMQ calls FreeReply on its I/O thread once it
// has written a reply to the kernel (or dropped it with its connection), so a
// peer's ReplyBytes counts exactly what the coordinator still holds for it. A
// peer over options_.max_reply_bytes_per_client has its requests parked until
// it reads; one that stays over for options_.slow_client_grace is dropped.
#include <zmq.h>

#include <cerrno>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "base/log.h"
#include "coordinator/coordinator_impl.h"
#include "ipc/protocol.h"
#include "ipc/task_payload.h"
#include "tasks/task_results.h"

namespace shoal::coordinator {
namespace {

// Most requests a parked peer may have waiting; more and it is dropped.
constexpr size_t kMaxParkedRequests = 256;

struct ReplyInFlight {
  std::string payload;
  std::shared_ptr<void> counter_owner;
  std::atomic<int64_t>* counter = nullptr;
};

void FreeReply(void* /*data*/, void* hint) {
  auto* r = static_cast<ReplyInFlight*>(hint);
  r->counter->fetch_sub(static_cast<int64_t>(r->payload.size()),
                        std::memory_order_relaxed);
  delete r;
}

// One frame of a multipart receive, with the "User-Id" metadata of the body.
absl::Status RecvRequest(void* socket, std::string* routing_id,
                         std::string* body, std::string* user_id, int* fd,
                         size_t* frames) {
  *frames = 0;
  int more = 1;
  while (more) {
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    if (zmq_msg_recv(&msg, socket, ZMQ_DONTWAIT) < 0) {
      zmq_msg_close(&msg);
      return absl::UnavailableError("nothing to read");
    }
    const std::string data(static_cast<const char*>(zmq_msg_data(&msg)),
                           zmq_msg_size(&msg));
    if (*frames == 0) {
      *routing_id = data;
    } else if (*frames == 1) {
      *body = data;
      const char* user = zmq_msg_gets(&msg, "User-Id");
      *user_id = user != nullptr ? user : "";
      *fd = zmq_msg_get(&msg, ZMQ_SRCFD);
    }
    ++*frames;
    more = zmq_msg_more(&msg);
    zmq_msg_close(&msg);
  }
  return absl::OkStatus();
}

// "py:a.b:f" → "a.b"; "" for names that are not by module.
std::string PythonModuleOf(absl::string_view function) {
  absl::string_view rest = function;
  if (!absl::ConsumePrefix(&rest, "py:")) return "";
  absl::ConsumeSuffix(&rest, "!");
  const size_t colon = rest.find(':');
  return colon == absl::string_view::npos ? std::string(rest)
                                          : std::string(rest.substr(0, colon));
}

}  // namespace

Coordinator::Impl::PeerState& Coordinator::Impl::StateOf(const Peer& peer) {
  auto [it, fresh] = peers_.try_emplace(peer.key());
  if (fresh) {
    it->second.peer = peer;
    if (peer.fd >= 0) peers_by_fd_[{peer.tcp, peer.fd}].insert(it->first);
  }
  return it->second;
}

void Coordinator::Impl::DropTask(uint64_t id) {
  absl::StatusOr<tasks::TaskState> st = table_->Poll(id);
  if (st.ok() && *st == tasks::TaskState::kDone) {
    auto task = remote_tasks_.find(id);
    ReleaseOutputs(task != remote_tasks_.end() ? task->second.peer : "",
                   ResultOf(id, /*release=*/true).outputs);
  } else {
    (void)table_->Release(own_client_, id);
  }
  ForgetTask(id);
}

void Coordinator::Impl::ForgetTask(uint64_t id) {
  if (auto w = watched_.find(id); w != watched_.end()) {
    // Its waits are answered later (AnswerOrphanedWaits): this task is then
    // unknown to them.
    for (uint64_t serial : w->second.waits) orphaned_waits_.push_back(serial);
    watched_.erase(w);
  }
  auto it = remote_tasks_.find(id);
  if (it == remote_tasks_.end()) return;
  if (auto p = peers_.find(it->second.peer); p != peers_.end()) {
    p->second.tasks.erase(id);
    p->second.Unhold(id);
  }
  remote_tasks_.erase(it);
}

absl::Status Coordinator::Impl::CheckFunction(const Peer& peer,
                                              const std::string& function) {
  if (const size_t at = function.find("@actor="); at != std::string::npos) {
    uint32_t actor = 0;
    if (!absl::SimpleAtoi(function.substr(at + 7), &actor)) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", function, "' names no actor"));
    }
    auto a = actors_.find(actor);
    if (!peer.owner && (a == actors_.end() || a->second.creator != peer.key()))
      return absl::PermissionDeniedError(
          absl::StrCat("actor ", actor, " is not this client's"));
  }
  if (options_.allowed_modules.empty() || !absl::StartsWith(function, "py:"))
    return absl::OkStatus();
  const std::string module = PythonModuleOf(function);
  if (absl::StartsWith(function, "py:=") ||
      absl::StartsWith(function, "py:#") || absl::EndsWith(function, "!")) {
    return absl::PermissionDeniedError(absl::StrCat(
        "'", function,
        "' carries pickled code or arguments, which this node refuses: it "
        "admits only Python modules under --allow-modules"));
  }
  for (const std::string& prefix : options_.allowed_modules) {
    if (module == prefix || absl::StartsWith(module, absl::StrCat(prefix, ".")))
      return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrCat(
      "module '", module, "' is not in this node's --allow-modules list"));
}

absl::Status Coordinator::Impl::CheckQuota(PeerState& state, size_t count) {
  const uint64_t owned = state.tasks.size();
  const uint64_t cheap_limit =
      std::min(options_.max_queued_per_client, options_.max_held_per_client);
  uint64_t held_bytes = state.held_total;
  for (const auto& [id, held] : state.outputs) held_bytes += held.first;
  if (held_bytes > options_.max_store_bytes_per_client) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "this client holds ", held_bytes,
        " bytes of results in the store: "
        "over the limit max_store_bytes_per_client = ",
        options_.max_store_bytes_per_client, " (release results)"));
  }
  if (owned + count <= cheap_limit) return absl::OkStatus();
  uint64_t queued = 0, held = 0;
  for (uint64_t id : state.tasks) {
    absl::StatusOr<tasks::TaskState> st = table_->Poll(id);
    if (!st.ok()) continue;
    (*st == tasks::TaskState::kDone ? held : queued) += 1;
  }
  if (queued + count > options_.max_queued_per_client) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "this client has ", queued, " tasks queued or running and submits ",
        count, ": over the limit max_queued_per_client = ",
        options_.max_queued_per_client));
  }
  if (held > options_.max_held_per_client) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "this client holds ", held,
        " results: over the limit "
        "max_held_per_client = ",
        options_.max_held_per_client, " (wait with release, or release them)"));
  }
  return absl::OkStatus();
}

ipc::Message Coordinator::Impl::OnReleaseOutput(const Peer& peer,
                                                const ObjectId& id) {
  PeerState& state = StateOf(peer);
  auto it = state.outputs.find(id);
  if (it == state.outputs.end()) {
    return ipc::ErrorReply{absl::NotFoundError(absl::StrCat(
        "object ", id.ToHex(), " is not an output this client holds"))};
  }
  ReleaseOutputs(peer.key(),
                 {Value{ObjectValue{id, TensorMeta{}, it->second.first}}});
  state.outputs.erase(it);
  return ipc::OkReply{};
}

void Coordinator::Impl::ExpireOutputs(absl::Time now) {
  for (auto& [key, state] : peers_) {
    for (auto it = state.outputs.begin(); it != state.outputs.end();) {
      if (now - it->second.second <= options_.remote_result_ttl) {
        ++it;
        continue;
      }
      ReleaseOutputs(key, {Value{ObjectValue{it->first, TensorMeta{}, 0}}});
      it = state.outputs.erase(it);
    }
  }
}

void Coordinator::Impl::DrainFrontend(bool tcp) {
  ipc::Socket& socket = tcp ? tcp_frontend_ : frontend_;
  MarkTouched(tcp ? kTcpFrontendItem : kFrontendItem);
  ipc::DecodeLimits limits;
  limits.max_frame_bytes = 64 << 20;
  std::string routing_id, body, user_id;
  for (int i = 0; i < 256; ++i) {
    size_t frames = 0;
    int fd = -1;
    if (!RecvRequest(socket.raw(), &routing_id, &body, &user_id, &fd, &frames)
             .ok())
      return;
    // Disconnects queued before this request was: the descriptor it came on
    // may be a closed connection's, reused (frontend_sessions.cc).
    DrainFrontendEvents(tcp);
    Peer peer;
    peer.tcp = tcp;
    peer.routing_id = routing_id;
    peer.user_id = user_id;
    peer.fd = fd;
    peer.owner =
        !tcp || (!owner_public_key_.empty() && user_id == owner_public_key_);
    if (tcp && !user_id.empty()) {
      if (absl::Status s = connections_.OnRequest(fd, user_id, peer.owner);
          !s.ok()) {
        Reply(peer, 0, ipc::ErrorReply{s});
        continue;
      }
    }
    if (frames != 2) {
      if (frames > 0) {
        Reply(peer, 0,
              ipc::ErrorReply{absl::InvalidArgumentError(absl::StrCat(
                  "expected a single-frame message, got ", frames - 1))});
      }
      continue;
    }
    ipc::DecodeResult decoded = ipc::Decode(body, limits);
    if (!decoded.envelope.ok()) {
      Reply(peer, decoded.request_id,
            ipc::ErrorReply{decoded.envelope.status()});
      continue;
    }
    Dispatch(peer, decoded.envelope->request_id,
             std::move(decoded.envelope->body));
  }
}

void Coordinator::Impl::Dispatch(const Peer& peer, uint64_t request_id,
                                 ipc::Message body) {
  auto it = peers_.find(peer.key());
  if (it != peers_.end()) {
    PeerState& state = it->second;
    if (peer.fd >= 0 && state.peer.fd != peer.fd) {
      // The same routing id on a new connection (a DEALER with a set id
      // that reconnected): its session follows the new descriptor.
      if (auto old = peers_by_fd_.find({peer.tcp, state.peer.fd});
          old != peers_by_fd_.end())
        old->second.erase(it->first);
      peers_by_fd_[{peer.tcp, peer.fd}].insert(it->first);
      state.peer.fd = peer.fd;
    }
    if (state.dropped) {
      Reply(peer, request_id,
            ipc::ErrorReply{absl::ResourceExhaustedError(
                "this connection was dropped: it did not read its replies "
                "(max_reply_bytes_per_client); reconnect")});
      return;
    }
    const bool over = state.replies->queued.load() >
                      static_cast<int64_t>(options_.max_reply_bytes_per_client);
    if (over || !state.parked.empty()) {
      if (state.parked.size() >= kMaxParkedRequests) {
        DropPeer(state, "too many requests while not reading replies");
        return;
      }
      if (!state.over_since) state.over_since = absl::Now();
      state.parked.emplace_back(request_id, std::move(body));
      return;
    }
  }
  std::optional<ipc::Message> reply = Handle(peer, request_id, body);
  if (reply) Reply(peer, request_id, *std::move(reply));
}

void Coordinator::Impl::Reply(const Peer& peer, uint64_t request_id,
                              ipc::Message body) {
  absl::StatusOr<std::string> frame = ipc::Encode(request_id, std::move(body));
  std::string payload = frame.ok()
                            ? *std::move(frame)
                            : ipc::EncodeError(request_id, frame.status());
  PeerState& state = StateOf(peer);
  // Counted from here until ZeroMQ is done with it (FreeReply), kept or sent.
  state.replies->queued.fetch_add(static_cast<int64_t>(payload.size()),
                                  std::memory_order_relaxed);
  // Behind replies kept for this peer: in order, after them.
  if (state.unsent.empty() && SendReply(state, payload)) return;
  if (state.unsent.empty()) ++unsent_peers_;
  state.unsent.push_back(std::move(payload));
}

bool Coordinator::Impl::SendReply(PeerState& state, std::string& payload) {
  const Peer& peer = state.peer;
  void* socket = (peer.tcp ? tcp_frontend_ : frontend_).raw();
  MarkTouched(peer.tcp ? kTcpFrontendItem : kFrontendItem);
  const auto uncount = [&] {
    state.replies->queued.fetch_sub(static_cast<int64_t>(payload.size()),
                                    std::memory_order_relaxed);
  };
  // ROUTER_MANDATORY: EAGAIN when the peer's queue is full (keep it for
  // ZMQ_POLLOUT), EHOSTUNREACH when it is gone (drop it).
  if (zmq_send(socket, peer.routing_id.data(), peer.routing_id.size(),
               ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0) {
    if (zmq_errno() == EAGAIN) return false;
    SHOAL_LOG(DEBUG, "a reply was dropped: %s", zmq_strerror(zmq_errno()));
    uncount();
    return true;
  }
  auto* r = new ReplyInFlight;
  r->payload = std::move(payload);
  r->counter_owner = state.replies;
  r->counter = &state.replies->queued;
  zmq_msg_t msg;
  zmq_msg_init_data(&msg, r->payload.data(), r->payload.size(), FreeReply, r);
  if (zmq_msg_send(&msg, socket, ZMQ_DONTWAIT) < 0) {
    // The routing frame went: the body cannot wait now. Rare (the pipe
    // filled between the two frames is not possible: one thread sends).
    SHOAL_LOG(DEBUG, "a reply was dropped: %s", zmq_strerror(zmq_errno()));
    zmq_msg_close(&msg);  // calls FreeReply
  }
  return true;
}

bool Coordinator::Impl::FlushUnsent(absl::Time now) {
  bool progress = false;
  for (auto& [key, state] : peers_) {
    if (state.unsent.empty()) continue;
    bool sent = false;
    while (!state.unsent.empty() && SendReply(state, state.unsent.front())) {
      state.unsent.pop_front();
      sent = true;
    }
    progress |= sent;
    if (state.unsent.empty()) {
      --unsent_peers_;
      state.unsent_since.reset();
      continue;
    }
    // Kept while the peer reads; one that reads nothing for the grace
    // period while over its reply budget is dropped (its replies too).
    const bool over = state.replies->queued.load() >
                      static_cast<int64_t>(options_.max_reply_bytes_per_client);
    if (!over || sent) {
      state.unsent_since.reset();
    } else if (!state.unsent_since) {
      state.unsent_since = now;
    } else if (now - *state.unsent_since > options_.slow_client_grace) {
      DropPeer(state, "it did not read its pushed results");
    }
  }
  return progress;
}

void Coordinator::Impl::DropUnsent(PeerState& state) {
  if (state.unsent.empty()) return;
  for (const std::string& payload : state.unsent) {
    state.replies->queued.fetch_sub(static_cast<int64_t>(payload.size()),
                                    std::memory_order_relaxed);
  }
  state.unsent.clear();
  state.unsent_since.reset();
  --unsent_peers_;
}

void Coordinator::Impl::ServeParked(absl::Time now) {
  for (auto it = peers_.begin(); it != peers_.end();) {
    PeerState& state = it->second;
    while (!state.parked.empty() &&
           state.replies->queued.load() <=
               static_cast<int64_t>(options_.max_reply_bytes_per_client)) {
      auto [request_id, body] = std::move(state.parked.front());
      state.parked.pop_front();
      const Peer peer = state.peer;
      std::optional<ipc::Message> reply = Handle(peer, request_id, body);
      if (reply) Reply(peer, request_id, *std::move(reply));
    }
    if (state.parked.empty()) {
      state.over_since.reset();
    } else if (state.over_since &&
               now - *state.over_since > options_.slow_client_grace) {
      DropPeer(state, "it did not read its replies");
    }
    // Forget idle peers (a dropped one is remembered while replies to it
    // are still queued: it is refused until then).
    const bool drained = state.replies->queued.load() == 0;
    const bool idle =
        state.dropped ? drained
                      : drained && state.parked.empty() &&
                            state.tasks.empty() && state.actors.empty() &&
                            state.held_bytes.empty() && state.outputs.empty();
    if (idle && state.peer.fd >= 0) {
      auto by_fd = peers_by_fd_.find({state.peer.tcp, state.peer.fd});
      if (by_fd != peers_by_fd_.end()) {
        by_fd->second.erase(it->first);
        if (by_fd->second.empty()) peers_by_fd_.erase(by_fd);
      }
    }
    it = idle ? peers_.erase(it) : std::next(it);
  }
}

void Coordinator::Impl::DropPeer(PeerState& state, const std::string& why) {
  SHOAL_LOG(WARNING,
            "dropping a frontend client (%s): %d requests parked, "
            "%d bytes of replies queued",
            why, state.parked.size(), state.replies->queued.load());
  EndSession(state);
}

void Coordinator::Impl::EndSession(PeerState& state) {
  state.dropped = true;
  DropUnsent(state);
  state.parked.clear();
  state.over_since.reset();
  const std::string key = state.peer.key();
  // Its held task ids go nowhere: its tasks are released below.
  std::erase_if(held_ids_,
                [&](const HeldIds& h) { return h.peer.key() == key; });
  for (auto w = waits_.begin(); w != waits_.end();) {
    if (w->second.peer.key() != key) {
      ++w;
      continue;
    }
    if (w->second.deadline) wait_deadlines_.erase(*w->second.deadline);
    Unwatch(w->second, w->first);
    w = waits_.erase(w);
  }
  const std::set<uint64_t> tasks = state.tasks;
  for (uint64_t id : tasks) {
    DropTask(id);
  }
  for (const auto& [id, held] : state.outputs)
    ReleaseOutputs(key, {Value{ObjectValue{id, TensorMeta{}, held.first}}});
  state.outputs.clear();
  // A detached actor (owner 0) outlives the session that made it, as it
  // outlives its creator's process (docs/actors.md): only a kill or the
  // node's stop ends it. The others end with their client.
  for (uint32_t actor : state.actors) {
    if (auto a = actors_.find(actor);
        a != actors_.end() && !a->second.ended && a->second.owner != 0)
      EndActor(a->second, "its client was dropped");
  }
  state.actors.clear();
}

}  // namespace shoal::coordinator
