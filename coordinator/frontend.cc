// The frontend's sockets, how a request finds its session, and how sessions
// end (coordinator/frontend.h). Requests are served in frontend_requests.cc,
// results in frontend_results.cc and frontend_watch.cc, replies sent in
// frontend_outbox.cc.
//
// Connections: libzmq 4.3.4 as Debian builds it has no ZMQ_ROUTER_NOTIFY, so
// closed connections come from a socket monitor (ZMQ_EVENT_DISCONNECTED,
// whose value is the connection's descriptor) and each request's descriptor
// from ZMQ_SRCFD. After reading each request the frontend reads the events
// queued so far: libzmq queues a disconnect before it closes the descriptor,
// so the disconnect of a descriptor the kernel reused for the request's
// connection is handled before that request. TCP peers are probed with TCP
// keepalive: a host that vanishes without closing is noticed within about
// 16 s of silence. No ZMTP heartbeats: libzmq 4.3.4 runs a connection's
// heartbeat timer after it has stopped reading the connection (its queue to
// us full) and seen it reset, and aborts (stream_engine_base.cpp:331).
#include "coordinator/frontend.h"

#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "base/log.h"
#include "base/process_info.h"
#include "base/status_macros.h"
#include "ipc/protocol.h"

namespace shoal::coordinator {
namespace {

constexpr int kKeepaliveIdleS = 10;
constexpr int kKeepaliveIntervalS = 2;
constexpr int kKeepaliveProbes = 3;
// A connection that has not completed its CURVE handshake in this long is
// closed (libzmq's default is 30 s).
constexpr int kHandshakeMs = 5000;
// Requests read per socket per call.
constexpr int kRequestsPerDrain = 256;

// One request: its frames' count, the routing id, the body, and the body's
// metadata (CURVE user id, peer address, descriptor).
struct Incoming {
  size_t frames = 0;
  std::string routing_id;
  std::string body;
  std::string user_id;
  std::string address;
  int fd = -1;
};

bool Receive(void* socket, Incoming* in) {
  *in = Incoming();
  int more = 1;
  while (more) {
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    if (zmq_msg_recv(&msg, socket, ZMQ_DONTWAIT) < 0) {
      zmq_msg_close(&msg);
      return in->frames > 0;
    }
    const absl::string_view data(static_cast<const char*>(zmq_msg_data(&msg)),
                                 zmq_msg_size(&msg));
    if (in->frames == 0) {
      in->routing_id = std::string(data);
    } else if (in->frames == 1) {
      in->body = std::string(data);
      const char* user = zmq_msg_gets(&msg, "User-Id");
      in->user_id = user != nullptr ? user : "";
      const char* address = zmq_msg_gets(&msg, "Peer-Address");
      in->address = address != nullptr ? address : "";
      in->fd = zmq_msg_get(&msg, ZMQ_SRCFD);
    }
    ++in->frames;
    more = zmq_msg_more(&msg);
    zmq_msg_close(&msg);
  }
  return true;
}

}  // namespace

Frontend::Frontend(const CoordinatorOptions& options, std::string job_dir,
                   tasks::TaskTable* table, uint32_t own_client,
                   shm::StoreClient* store, std::string store_endpoint,
                   FrontendHost* host)
    : options_(options),
      job_dir_(std::move(job_dir)),
      store_endpoint_(std::move(store_endpoint)),
      table_(table),
      own_client_(own_client),
      store_(store),
      host_(host),
      guard_(options.connection_limits),
      boot_id_(BootId()) {
  rings_seen_ = table_->ClientRings(own_client_);
}

Frontend::~Frontend() { Close(); }

absl::Status Frontend::Start() {
  ipc::SocketOptions so;
  so.max_msg_bytes = static_cast<int64_t>(2 * options_.max_request_bytes);
  // Replies libzmq queues per client before one is kept for POLLOUT
  // (Session::out); lowered by tests (SHOAL_FRONTEND_SEND_HWM).
  if (const char* hwm = std::getenv("SHOAL_FRONTEND_SEND_HWM"); hwm != nullptr)
    (void)absl::SimpleAtoi(hwm, &so.send_hwm);
  // The owner's socket: in the job folder (mode 0700), so only the owner (and
  // root) can connect; no ZAP domain, so ZeroMQ asks no ZAP handler.
  SHOAL_ASSIGN_OR_RETURN(ipc_, ipc::Socket::Create(ZMQ_ROUTER, so));
  ipc_endpoint_ = absl::StrCat("ipc://", job_dir_, "/client.sock");
  unlink(absl::StrCat(job_dir_, "/client.sock").c_str());
  SHOAL_RETURN_IF_ERROR(Monitor(/*tcp=*/false));
  SHOAL_RETURN_IF_ERROR(ipc_.Bind(ipc_endpoint_));
  SHOAL_ASSIGN_OR_RETURN(tcp_, ipc::Socket::Create(ZMQ_ROUTER, so));
  std::string host = options_.bind, port = "0";
  if (size_t colon = options_.bind.rfind(':'); colon != std::string::npos) {
    host = options_.bind.substr(0, colon);
    port = options_.bind.substr(colon + 1);
  }
  if (host.empty()) host = "127.0.0.1";
  const std::string bind =
      absl::StrCat("tcp://", host, ":", port == "0" ? "*" : port);
  // TCP needs credentials even on loopback (any local user can reach it):
  // CURVE, with the owner's client key in the job folder.
  if (!options_.insecure) {
    SHOAL_RETURN_IF_ERROR(ConfigureCurve());
  } else {
    SHOAL_LOG(WARNING,
              "the frontend listens on %s without CURVE (--insecure): anyone "
              "who can reach it can run tasks as this user",
              bind);
  }
  SHOAL_RETURN_IF_ERROR(Monitor(/*tcp=*/true));
  SHOAL_RETURN_IF_ERROR(tcp_.Bind(bind));
  SHOAL_ASSIGN_OR_RETURN(tcp_endpoint_, tcp_.LastEndpoint());
  DrainEvents(/*tcp=*/true);  // LISTENING: the guard's listening socket
  return absl::OkStatus();
}

void Frontend::Close() {
  // Monitors stopped first: libzmq blocks the thread that emits an event
  // while the monitor has no reader.
  if (ipc_) zmq_socket_monitor(ipc_.raw(), nullptr, 0);
  if (tcp_) zmq_socket_monitor(tcp_.raw(), nullptr, 0);
  ipc_.Close();
  tcp_.Close();
  ipc_events_.Close();
  tcp_events_.Close();
  zap_.reset();
  if (!ipc_endpoint_.empty())
    unlink(absl::StrCat(job_dir_, "/client.sock").c_str());
}

absl::StatusOr<ipc::CurveKeyPair> Frontend::OwnerClientKeys() {
  owner_key_file_ = absl::StrCat(job_dir_, "/client.key");
  absl::StatusOr<ipc::CurveKeyPair> keys = ipc::ReadKeyPair(owner_key_file_);
  if (!absl::IsNotFound(keys.status())) return keys;
  SHOAL_ASSIGN_OR_RETURN(ipc::CurveKeyPair fresh, ipc::GenerateCurveKeyPair());
  SHOAL_RETURN_IF_ERROR(ipc::WriteKeyPair(owner_key_file_, fresh));
  return fresh;
}

absl::Status Frontend::ConfigureCurve() {
  const std::string key_file = options_.server_key_file.empty()
                                   ? absl::StrCat(job_dir_, "/server.key")
                                   : options_.server_key_file;
  absl::StatusOr<ipc::CurveKeyPair> keys = ipc::ReadKeyPair(key_file);
  if (absl::IsNotFound(keys.status())) {
    SHOAL_ASSIGN_OR_RETURN(ipc::CurveKeyPair fresh,
                           ipc::GenerateCurveKeyPair());
    SHOAL_RETURN_IF_ERROR(ipc::WriteKeyPair(key_file, fresh));
    keys = fresh;
  }
  if (!keys.ok()) return keys.status();
  SHOAL_ASSIGN_OR_RETURN(const ipc::CurveKeyPair owner, OwnerClientKeys());
  owner_public_key_ = owner.public_key;
  std::vector<std::string> allowed;
  if (!options_.client_keys_file.empty()) {
    SHOAL_ASSIGN_OR_RETURN(allowed,
                           ipc::ReadPublicKeys(options_.client_keys_file));
  }
  const bool loopback =
      ipc::IsLoopbackEndpoint(absl::StrCat("tcp://", options_.bind));
  if (allowed.empty() && !loopback) {
    return absl::InvalidArgumentError(
        absl::StrCat("binding to ", options_.bind,
                     " (not loopback) needs CURVE: pass --client-keys FILE "
                     "with the public keys of the clients to admit (or "
                     "--insecure to accept anyone)"));
  }
  allowed.push_back(owner.public_key);
  SHOAL_ASSIGN_OR_RETURN(zap_, ipc::ZapAuthenticator::Start(allowed));
  SHOAL_RETURN_IF_ERROR(ipc::ConfigureCurveServer(tcp_, *keys));
  server_public_key_ = keys->public_key;
  return absl::OkStatus();
}

absl::Status Frontend::Monitor(bool tcp) {
  ipc::Socket& socket = tcp ? tcp_ : ipc_;
  ipc::Socket& events = tcp ? tcp_events_ : ipc_events_;
  int mask = ZMQ_EVENT_DISCONNECTED;
  if (tcp) {
    SHOAL_ZMQ_CHECK(zmq_setsockopt(socket.raw(), ZMQ_TCP_KEEPALIVE_IDLE,
                                   &kKeepaliveIdleS, sizeof kKeepaliveIdleS));
    SHOAL_ZMQ_CHECK(zmq_setsockopt(socket.raw(), ZMQ_TCP_KEEPALIVE_INTVL,
                                   &kKeepaliveIntervalS,
                                   sizeof kKeepaliveIntervalS));
    SHOAL_ZMQ_CHECK(zmq_setsockopt(socket.raw(), ZMQ_TCP_KEEPALIVE_CNT,
                                   &kKeepaliveProbes, sizeof kKeepaliveProbes));
    SHOAL_ZMQ_CHECK(zmq_setsockopt(socket.raw(), ZMQ_HANDSHAKE_IVL,
                                   &kHandshakeMs, sizeof kHandshakeMs));
    mask |= ipc::ConnectionGuard::MonitorEvents();
  }
  // inproc names are per context: this object's address keeps two
  // coordinators of one process (tests) apart.
  const std::string name =
      absl::StrCat("inproc://shoal-frontend-events-", tcp ? "tcp-" : "ipc-",
                   reinterpret_cast<uintptr_t>(this));
  SHOAL_ZMQ_CHECK(zmq_socket_monitor(socket.raw(), name.c_str(), mask));
  SHOAL_ASSIGN_OR_RETURN(events, ipc::Socket::Create(ZMQ_PAIR));
  return events.Connect(name);
}

void Frontend::DrainEvents(bool tcp) {
  ipc::Socket& events = tcp ? tcp_events_ : ipc_events_;
  if (!events) return;
  touched_ |= tcp ? kTouchedTcpEvents : kTouchedIpcEvents;
  std::vector<std::string> frames;
  const absl::Time now = absl::Now();
  while (events.Recv(&frames, absl::ZeroDuration()).ok()) {
    std::optional<ipc::MonitorEvent> e = ipc::ParseMonitorEvent(frames);
    if (!e) continue;
    if (tcp) guard_.OnEvent(e->event, e->value, now);
    if (e->event != ZMQ_EVENT_DISCONNECTED) continue;
    for (Session* s : sessions_.OnConnection(tcp, e->value)) {
      if (s->route.fd == e->value && s->route.tcp == tcp) Detach(*s, now);
    }
  }
}

// Replies to a request that reached no session (undecodable, refused, a
// reset session): uncounted, and dropped if the client's queue is full.
static void SendRaw(void* socket, const std::string& routing_id,
                    const std::string& payload) {
  // (The caller's socket is marked touched: SendRaw answers requests.)
  if (zmq_send(socket, routing_id.data(), routing_id.size(),
               ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0)
    return;
  (void)zmq_send(socket, payload.data(), payload.size(), ZMQ_DONTWAIT);
}

ipc::FrontendStats Frontend::Stats() const {
  ipc::FrontendStats st;
  st.set_sessions(static_cast<uint32_t>(sessions_.sessions()));
  st.set_principals(static_cast<uint32_t>(sessions_.principals()));
  st.set_tcp_connections(static_cast<uint32_t>(guard_.open()));
  st.set_requests(requests_);
  st.set_request_bytes(request_bytes_);
  st.set_reply_bytes(reply_bytes_);
  st.set_parked_requests(parked_requests_);
  st.set_shared_turns(shared_turns_);
  for (uint64_t n : errors_) st.add_errors_by_code(n);
  return st;
}

void Frontend::SendRefusal(void* socket, const std::string& routing_id,
                           uint64_t request_id, const absl::Status& status) {
  CountError(status.code());
  SendRaw(socket, routing_id, ipc::EncodeError(request_id, status));
}

void Frontend::DrainRequests(bool tcp) {
  ipc::Socket& socket = tcp ? tcp_ : ipc_;
  touched_ |= tcp ? kTouchedTcp : kTouchedIpc;
  Incoming in;
  for (int i = 0; i < kRequestsPerDrain; ++i) {
    if (i >= turn_.min_reads && TurnSpent()) return;
    if (!Receive(socket.raw(), &in)) return;
    ++requests_;
    request_bytes_ += in.body.size();
    // Disconnects queued before this request was: the descriptor it came on
    // may be a closed connection's, reused.
    DrainEvents(tcp);
    const Route route{tcp, in.routing_id, in.fd};
    const bool owner =
        !tcp || (!owner_public_key_.empty() && in.user_id == owner_public_key_);
    if (tcp && !in.user_id.empty()) {
      if (absl::Status s = guard_.OnRequest(in.fd, in.user_id, owner);
          !s.ok()) {
        SendRefusal(socket.raw(), in.routing_id, 0, s);
        continue;
      }
    }
    if (in.frames != 2) {
      SendRefusal(socket.raw(), in.routing_id, 0,
                  absl::InvalidArgumentError(absl::StrCat(
                      "expected a single-frame message, got ", in.frames - 1)));
      continue;
    }
    std::optional<ipc::Message> decoded;
    std::optional<ipc::EnvelopeHead> head =
        ReadHead(socket.raw(), in.routing_id, in.body, &decoded);
    if (!head) continue;
    const std::string key = owner                 ? std::string("owner")
                            : !in.user_id.empty() ? "k:" + in.user_id
                                                  : "a:" + in.address;
    Principal& p = sessions_.PrincipalOf(key, owner);
    bool moved = false;
    Session* s = SessionFor(route, p, *head, &moved);
    if (s == nullptr) continue;
    NoteSender(*s);
    s->minor = head->minor;
    const uint64_t request_id = head->request_id;
    const bool ack_only = head->body_field == ipc::kSessionAckField;
    // A 1.5 client sends again what a cut connection may have lost: a
    // request id that arrived before is served once. (An acknowledgement
    // with an id fills that id: a request the client could not send.)
    bool duplicate = false;
    if (s->resumable() && s->minor >= 5 && request_id != 0) {
      duplicate = !s->requests.Accept(request_id) && !ack_only;
      if (s->requests.above() > kMaxRequestGap) s->requests.SkipGap();
    }
    if (s->resumable()) {
      Acknowledge(*s, head->ack);
      if (moved) {
        Resend(*s);
        if (s->minor >= 5) SendRequestAck(*s);
      }
    }
    if (ack_only || duplicate) continue;
    Request r{request_id, std::move(in.body), std::move(decoded), 0};
    r.cost = RequestCost(head->items, r.bytes());
    Dispatch(*s, std::move(r));
  }
}

std::optional<ipc::EnvelopeHead> Frontend::ReadHead(
    void* socket, const std::string& routing_id, const std::string& frame,
    std::optional<ipc::Message>* decoded) {
  std::optional<ipc::EnvelopeHead> head;
  if (frame.size() <= options_.max_request_bytes)
    head = ipc::PeekEnvelope(frame);
  if (head && head->major == ipc::kProtocolMajor && head->body_field != 0)
    return head;
  // Not a frame the scan reads as a request: Decode says what is wrong
  // with it, or (a body given twice, which protobuf merges) decodes it.
  ipc::DecodeLimits limits;
  limits.max_frame_bytes = options_.max_request_bytes;
  ipc::DecodeResult d = ipc::Decode(frame, limits);
  if (!d.envelope.ok()) {
    SendRefusal(socket, routing_id, d.request_id, d.envelope.status());
    return std::nullopt;
  }
  ipc::EnvelopeHead h;
  h.major = ipc::kProtocolMajor;
  h.minor = d.envelope->minor;
  h.request_id = d.envelope->request_id;
  h.session = d.envelope->session;
  h.ack = d.envelope->ack;
  h.seq = d.envelope->seq;
  h.body_field = std::holds_alternative<ipc::SessionAck>(d.envelope->body)
                     ? ipc::kSessionAckField
                     : ~0u;
  h.items = ItemsOf(d.envelope->body);
  *decoded = std::move(d.envelope->body);
  return h;
}

void Frontend::SendRequestAck(Session& s) {
  ipc::Envelope e{0, ipc::SessionAck{}};
  e.ack = s.requests.ack();
  absl::StatusOr<std::string> frame = ipc::Encode(e);
  if (!frame.ok()) return;
  SendRaw((s.route.tcp ? tcp_ : ipc_).raw(), s.route.routing_id, *frame);
}

Session* Frontend::SessionFor(const Route& route, Principal& p,
                              const ipc::EnvelopeHead& e, bool* moved) {
  void* socket = (route.tcp ? tcp_ : ipc_).raw();
  if (e.session != 0) {
    Session* s = sessions_.Resumable(p, e.session);
    if (s == nullptr) {
      SendRefusal(
          socket, route.routing_id, e.request_id,
          ipc::MarkSessionReset(absl::AbortedError(absl::StrCat(
              "the node does not know this client's session ", e.session,
              ": it ended (its connection stayed closed longer than "
              "the resume grace, or it broke the protocol), or the "
              "node restarted; its tasks and results are gone. Say "
              "hello again for a new session"))));
      return nullptr;
    }
    if (!s->attached || s->route.fd != route.fd || s->route.tcp != route.tcp ||
        s->route.routing_id != route.routing_id) {
      sessions_.Reroute(*s, route);
      s->attached = true;
      *moved = true;
    }
    return s;
  }
  bool fresh = false;
  Session& s = sessions_.LegacySession(p, route, &fresh);
  if (fresh && p.sessions.size() > options_.max_sessions_per_client) {
    RemoveSession(s);
    SendRefusal(socket, route.routing_id, e.request_id,
                absl::ResourceExhaustedError(absl::StrCat(
                    "this client has ", p.sessions.size(),
                    " sessions open: over the limit max_sessions_per_client = ",
                    options_.max_sessions_per_client)));
    return nullptr;
  }
  if (s.route.fd != route.fd) sessions_.Reroute(s, route);
  s.attached = true;
  return &s;
}

void Frontend::CloseConnection(const Route& route, const std::string& why) {
  SHOAL_LOG(WARNING, "closing a frontend client's connection: %s", why);
  if (route.fd >= 0 && shutdown(route.fd, SHUT_RDWR) != 0 && errno != ENOTCONN)
    SHOAL_LOG(DEBUG, "shutdown(%d): %s", route.fd, std::strerror(errno));
}

bool Frontend::LocalClientExited(const Session& s) {
  // A process whose connections closed may still be exiting (files close
  // before it is a zombie): the caller asks again on later ticks.
  return s.local_pid > 0 && !ProcessIsAlive(s.local_pid, s.local_start_ticks);
}

void Frontend::Detach(Session& s, absl::Time now) {
  // A client of this machine that exited is not coming back.
  const bool gone = LocalClientExited(s);
  if (!s.resumable() || gone) {
    SHOAL_LOG(DEBUG,
              "a frontend client's connection closed: freeing its %d tasks "
              "and %d outputs",
              s.tasks.size(), s.outputs.size());
    EndSession(s, "its connection closed");
    return;
  }
  sessions_.Unroute(s);
  s.attached = false;
  s.detached_at = now;
  // What libzmq held for the old connection is lost with it: everything
  // not acknowledged goes again once the client is back.
  s.unsent = 0;
  if (unsent_.erase(s.serial) != 0) --unsent_sessions_;
}

void Frontend::EndSession(Session& s, const std::string& why) {
  s.ended = true;
  Principal& p = *s.principal;
  for (uint64_t serial : std::set<uint64_t>(s.waits)) DropWait(serial);
  for (uint64_t id : std::vector<uint64_t>(s.tasks.begin(), s.tasks.end()))
    DropTask(id);
  for (const auto& [id, held] : s.outputs) {
    ReleaseOutputs(p, {Value{ObjectValue{id, TensorMeta{}, held.first}}});
    p.held_bytes -= std::min(p.held_bytes, held.first);
  }
  s.outputs.clear();
  for (const Request& r : s.parked) {
    --p.parked;
    p.parked_bytes -= r.bytes();
  }
  s.parked.clear();
  host_->EndActorsOfSession(s.serial);
  if (unsent_.erase(s.serial) != 0) --unsent_sessions_;
  waiting_budget_.erase(s.serial);
  parked_.erase(s.serial);
  holding_ids_.erase(s.serial);
  SHOAL_LOG(DEBUG, "a frontend session ended: %s", why);
  RemoveSession(s);
}

void Frontend::Tick(absl::Time now) {
  ExpireWaits(now);
  if (!holding_ids_.empty() && now >= held_until_) SendAllHeldIds();
  // The scans over every task and session run on a period of their own,
  // not on every turn of the event loop (a turn per request under load).
  if (now >= next_sweep_) {
    next_sweep_ = now + kSweepPeriod;
    Sweep(now);
  }
  EndExpiring();
  while (!orphaned_waits_.empty()) {
    std::vector<uint64_t> serials;
    serials.swap(orphaned_waits_);
    for (uint64_t serial : serials) FinishWait(serial);
  }
}

void Frontend::Sweep(absl::Time now) {
  if (completions_missed_) FindMissedCompletions();
  ExpireResults(now);
  guard_.Tick(now);
  // Sessions past their grace end a few per turn (EndExpiring): ending one
  // frees its tasks, outputs and waits.
  const bool collect = expiring_.empty();
  // One look at /proc per client process, however many of its sessions
  // wait to resume (a client that reconnects again and again leaves one
  // each).
  std::map<std::pair<pid_t, uint64_t>, bool> exited;
  auto exited_by = [&exited](const Session& s) {
    if (s.local_pid <= 0) return false;
    auto [it, fresh] =
        exited.try_emplace({s.local_pid, s.local_start_ticks}, false);
    if (fresh) it->second = LocalClientExited(s);
    return it->second;
  };
  std::vector<Session*> idle;
  for (auto& [serial, s] : sessions_.all()) {
    if (s->resumable() && !s->attached) {
      if (collect &&
          (now - s->detached_at > options_.resume_grace || exited_by(*s)))
        expiring_.push_back(serial);
    } else if (!s->resumable() && s->tasks.empty() && s->outputs.empty() &&
               s->waits.empty() && s->parked.empty() && s->out.empty() &&
               s->held_ids.empty() && s->ready.empty() && s->actors == 0 &&
               s->zmq->queued.load() == 0) {
      idle.push_back(s.get());
    }
  }
  for (Session* s : idle) RemoveSession(*s);
}

void Frontend::EndExpiring() {
  for (bool first = true; !expiring_.empty() && (first || !TurnSpent());) {
    const uint64_t serial = expiring_.back();
    expiring_.pop_back();
    Session* s = sessions_.BySerial(serial);
    if (s == nullptr || s->attached) continue;  // gone, or its client is back
    first = false;
    EndSession(*s, absl::StrCat("its connection stayed closed longer than ",
                                absl::FormatDuration(options_.resume_grace)));
  }
}

absl::Time Frontend::NextWake(absl::Time now) const {
  absl::Time wake = absl::InfiniteFuture();
  if (!wait_deadlines_.empty()) wake = wait_deadlines_.begin()->first;
  if (!holding_ids_.empty()) wake = std::min(wake, held_until_);
  // Budgets free as libzmq writes (on its own thread): look again soon.
  if (!waiting_budget_.empty() || !parked_.empty() || !orphaned_waits_.empty())
    wake = std::min(wake, now + absl::Milliseconds(10));
  if (unsent_sessions_ > 0 && stalled_)
    wake = std::min(wake, now + absl::Milliseconds(1));
  if (parked_waiting_ || !expiring_.empty() || completions_owed_ > 0)
    wake = now;
  return wake;
}

void Frontend::Pump(absl::Time now, bool writable) {
  if (unsent_sessions_ > 0) {
    bool progress = false;
    for (uint64_t serial : std::set<uint64_t>(unsent_)) {
      if (Session* s = sessions_.BySerial(serial)) progress |= Flush(*s);
    }
    if (progress) {
      stalled_ = false;
    } else if (writable) {
      stalled_ = true;
    }
  }
  for (uint64_t serial : std::set<uint64_t>(waiting_budget_)) {
    if (Session* s = sessions_.BySerial(serial)) PushReady(*s);
  }
  ServeParked();
  while (!orphaned_waits_.empty()) {
    std::vector<uint64_t> serials;
    serials.swap(orphaned_waits_);
    for (uint64_t serial : serials) FinishWait(serial);
  }
  (void)now;
}

bool Frontend::TakeSpinRequest(uint64_t* task) {
  const bool spin = spin_;
  *task = spin_task_;
  spin_ = false;
  spin_task_ = 0;
  return spin;
}

}  // namespace shoal::coordinator
