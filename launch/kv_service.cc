#include "launch/kv_service.h"

#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include <atomic>
#include <list>
#include <map>
#include <optional>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "base/event_fd.h"
#include "base/log.h"
#include "base/overloaded.h"
#include "base/status_macros.h"
#include "ipc/curve.h"
#include "ipc/protocol.h"
#include "ipc/router.h"
#include "ipc/socket.h"

namespace shoal::launch {
namespace {

// REQUIRES: timeout_ms ≤ kMaxKvWaitMs (CheckWait).
std::optional<absl::Time> DeadlineFor(int64_t timeout_ms) {
  if (timeout_ms < 0) return std::nullopt;
  return absl::Now() + absl::Milliseconds(timeout_ms);
}

// A wait taken from the wire. Errors: InvalidArgument past kMaxKvWaitMs.
absl::Status CheckWait(int64_t timeout_ms) {
  if (timeout_ms <= kMaxKvWaitMs) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("a wait of ", timeout_ms, " ms exceeds the limit of ",
                   kMaxKvWaitMs, " ms (use a negative wait for no limit)"));
}

size_t KeyBytes(const std::vector<std::string>& keys) {
  size_t n = 0;
  for (const std::string& k : keys) n += k.size();
  return n;
}

absl::Status ConfigureServerSecurity(ipc::Socket& socket,
                                     const KvServiceOptions& o) {
  if (o.curve_secret_key.empty()) {
    if (ipc::IsLoopbackEndpoint(o.endpoint)) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(
        "the key-value service binds ", o.endpoint,
        ", which is not loopback, only with a job secret (curve_secret_key)"));
  }
  if (!ipc::IsValidZ85Key(o.curve_secret_key)) {
    return absl::InvalidArgumentError(
        "the key-value service's secret is not a Z85 CURVE key");
  }
  // No ZAP domain: a client that completes the handshake knew the server's
  // public key, which only the secret gives (see the header).
  const int one = 1;
  if (zmq_setsockopt(socket.raw(), ZMQ_CURVE_SERVER, &one, sizeof(one)) < 0 ||
      zmq_setsockopt(socket.raw(), ZMQ_CURVE_SECRETKEY,
                     o.curve_secret_key.c_str(),
                     o.curve_secret_key.size() + 1) < 0) {
    return ipc::ZmqStatus("zmq_setsockopt(CURVE server)", __FILE__, __LINE__);
  }
  return absl::OkStatus();
}

}  // namespace

class KvService::Impl {
 public:
  explicit Impl(KvServiceOptions o) : o_(std::move(o)) {}
  ~Impl() {
    // Stop the monitor before closing its reader: libzmq's I/O thread sends
    // events blocking, and would hang on a reader that is gone.
    if (socket_.raw() != nullptr) zmq_socket_monitor(socket_.raw(), nullptr, 0);
    socket_.Close();
    monitor_.Close();
  }

  absl::Status Init() {
    ipc::SocketOptions so;
    so.max_msg_bytes = static_cast<int64_t>(o_.max_value_bytes) + (1 << 20);
    limits_.max_frame_bytes = o_.max_value_bytes + (64 << 10);
    SHOAL_ASSIGN_OR_RETURN(socket_, ipc::Socket::Create(ZMQ_ROUTER, so));
    SHOAL_RETURN_IF_ERROR(ConfigureServerSecurity(socket_, o_));
    SHOAL_RETURN_IF_ERROR(StartMonitor());
    SHOAL_RETURN_IF_ERROR(socket_.Bind(o_.endpoint));
    SHOAL_ASSIGN_OR_RETURN(endpoint_, socket_.LastEndpoint());
    SHOAL_ASSIGN_OR_RETURN(stop_, EventFd::Create());
    return absl::OkStatus();
  }

  absl::Status Run();
  void Stop() { stop_.Signal(); }
  const std::string& endpoint() const { return endpoint_; }

 private:
  // A request that waits: a get or wait for keys, or a barrier participant.
  struct Waiter {
    std::string routing_id;
    int peer_fd = -1;  // its connection (dropped when that closes)
    uint64_t request_id = 0;
    std::vector<std::string> keys;  // all must exist (get: one)
    bool is_get = false;
    std::optional<absl::Time> deadline;
  };
  struct Barrier {
    uint32_t world = 0;
    std::list<Waiter> arrived;
  };

  void Drain();
  // Watches the socket's connections: a closed one drops its waits.
  absl::Status StartMonitor();
  void DrainMonitor();
  void DropWaitersOf(int peer_fd);
  std::optional<ipc::Message> Handle(const std::string& routing_id, int peer_fd,
                                     uint64_t request_id,
                                     const ipc::Message& body);
  // One per request. Each returns the reply, or nullopt when the caller waits
  // (as a Waiter, or a barrier participant) and is answered later.
  std::optional<ipc::Message> SetKey(const ipc::KvSetRequest& m);
  std::optional<ipc::Message> GetKey(const ipc::KvGetRequest& m,
                                     const Waiter& who);
  std::optional<ipc::Message> AddToKey(const ipc::KvAddRequest& m);
  std::optional<ipc::Message> CompareAndSet(
      const ipc::KvCompareAndSetRequest& m);
  std::optional<ipc::Message> DeleteKeys(const ipc::KvDeleteRequest& m);
  std::optional<ipc::Message> ListKeys(const ipc::KvListRequest& m);
  std::optional<ipc::Message> WaitForKeys(const ipc::KvWaitRequest& m,
                                          const Waiter& who);
  std::optional<ipc::Message> ArriveAtBarrier(const ipc::BarrierRequest& m,
                                              const Waiter& who);
  // Takes `bytes` of the total budget. Errors: ResourceExhausted naming it.
  absl::Status Charge(size_t bytes);
  void Refund(size_t bytes) { held_bytes_ -= std::min(bytes, held_bytes_); }
  void AddWaiter(Waiter w) {
    held_bytes_ += KeyBytes(w.keys);
    waiters_.push_back(std::move(w));
  }
  std::list<Waiter>::iterator EraseWaiter(std::list<Waiter>::iterator it) {
    Refund(KeyBytes(it->keys));
    return waiters_.erase(it);
  }
  void Reply(const std::string& routing_id, uint64_t request_id,
             ipc::Message body) {
    ipc::SendReply(socket_, routing_id, request_id, std::move(body));
  }
  absl::Status Put(const std::string& key, std::string value);
  // Replies to waiters whose keys now all exist.
  void WakeWaiters();
  // Replies DeadlineExceeded to waiters and barrier participants past their
  // deadline; returns the next deadline.
  std::optional<absl::Time> Expire(absl::Time now);
  bool AllExist(const std::vector<std::string>& keys) const {
    for (const std::string& k : keys) {
      if (data_.count(k) == 0) return false;
    }
    return true;
  }

  KvServiceOptions o_;
  ipc::DecodeLimits limits_;
  ipc::Socket socket_;
  ipc::Socket monitor_;  // ZMQ_PAIR: the socket monitor's events
  std::string endpoint_;
  size_t held_bytes_ = 0;  // keys + values held + keys waited for
  EventFd stop_;
  std::map<std::string, std::string> data_;
  std::list<Waiter> waiters_;
  std::map<std::string, Barrier> barriers_;
};

absl::Status KvService::Impl::Run() {
  while (true) {
    zmq_pollitem_t items[] = {{socket_.raw(), 0, ZMQ_POLLIN, 0},
                              {nullptr, stop_.fd(), ZMQ_POLLIN, 0},
                              {monitor_.raw(), 0, ZMQ_POLLIN, 0}};
    const std::optional<absl::Time> next = Expire(absl::Now());
    const absl::Duration wait =
        next ? std::max(absl::ZeroDuration(), *next - absl::Now())
             : absl::InfiniteDuration();
    const int rc = zmq_poll(items, 3, ipc::PollTimeoutMs(wait));
    if (rc < 0 && zmq_errno() != EINTR)
      return ipc::ZmqStatus("zmq_poll", __FILE__, __LINE__);
    if (items[1].revents & ZMQ_POLLIN) return absl::OkStatus();
    // Closed connections first: a request read afterwards on a reused
    // descriptor is then never mistaken for one of the closed connection's.
    DrainMonitor();
    if (items[0].revents & ZMQ_POLLIN) Drain();
  }
}

void KvService::Impl::Drain() {
  ipc::ServeRequestsWithPeer(
      socket_, limits_, /*max_requests=*/1024,
      [&](const std::string& routing_id, const ipc::RequestPeer& peer,
          uint64_t request_id, const ipc::Message& body) {
        return Handle(routing_id, peer.fd, request_id, body);
      });
}

absl::Status KvService::Impl::StartMonitor() {
  static std::atomic<uint64_t> next{0};
  const std::string endpoint =
      absl::StrCat("inproc://shoal-kv-monitor-", getpid(), "-", next++);
  if (zmq_socket_monitor(socket_.raw(), endpoint.c_str(),
                         ZMQ_EVENT_DISCONNECTED) < 0) {
    return ipc::ZmqStatus("zmq_socket_monitor", __FILE__, __LINE__);
  }
  SHOAL_ASSIGN_OR_RETURN(monitor_, ipc::Socket::Create(ZMQ_PAIR));
  // No limit on queued events: the I/O thread blocks on a full queue.
  const int unlimited = 0;
  zmq_setsockopt(monitor_.raw(), ZMQ_RCVHWM, &unlimited, sizeof(unlimited));
  return monitor_.Connect(endpoint);
}

// An event is two frames: 2 bytes of event id and 4 of value (for
// ZMQ_EVENT_DISCONNECTED, the connection's descriptor), then the endpoint.
void KvService::Impl::DrainMonitor() {
  std::vector<std::string> frames;
  while (true) {
    absl::StatusOr<bool> ready = monitor_.Poll(absl::ZeroDuration());
    if (!ready.ok() || !*ready || !monitor_.Recv(&frames).ok()) return;
    if (frames.empty() || frames[0].size() != 6) continue;
    uint16_t event = 0;
    int32_t value = 0;
    memcpy(&event, frames[0].data(), 2);
    memcpy(&value, frames[0].data() + 2, 4);
    if (event == ZMQ_EVENT_DISCONNECTED) DropWaitersOf(value);
  }
}

void KvService::Impl::DropWaitersOf(int peer_fd) {
  if (peer_fd < 0) return;
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    it = it->peer_fd == peer_fd ? EraseWaiter(it) : std::next(it);
  }
  for (auto b = barriers_.begin(); b != barriers_.end();) {
    b->second.arrived.remove_if([&](const Waiter& w) {
      if (w.peer_fd != peer_fd) return false;
      Refund(KeyBytes(w.keys));
      return true;
    });
    b = b->second.arrived.empty() ? barriers_.erase(b) : std::next(b);
  }
}

absl::Status KvService::Impl::Charge(size_t bytes) {
  if (bytes <= o_.max_total_bytes - std::min(held_bytes_, o_.max_total_bytes)) {
    held_bytes_ += bytes;
    return absl::OkStatus();
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("the key-value store's total budget (max_total_bytes) of ",
                   o_.max_total_bytes, " bytes is spent: it holds ",
                   held_bytes_, " bytes, ", bytes, " more asked"));
}

absl::Status KvService::Impl::Put(const std::string& key, std::string value) {
  if (value.size() > o_.max_value_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("a value of ", value.size(),
                     " bytes exceeds the limit of ", o_.max_value_bytes));
  }
  auto it = data_.find(key);
  if (data_.size() >= o_.max_keys && it == data_.end()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the key-value store holds its limit of ", o_.max_keys, " keys"));
  }
  const size_t old_bytes =
      it == data_.end() ? 0 : it->first.size() + it->second.size();
  Refund(old_bytes);
  absl::Status charged = Charge(key.size() + value.size());
  if (!charged.ok()) {
    held_bytes_ += old_bytes;
    return charged;
  }
  data_[key] = std::move(value);
  return absl::OkStatus();
}

std::optional<ipc::Message> KvService::Impl::Handle(
    const std::string& routing_id, int peer_fd, uint64_t request_id,
    const ipc::Message& body) {
  Waiter who;
  who.routing_id = routing_id;
  who.peer_fd = peer_fd;
  who.request_id = request_id;
  std::optional<ipc::Message> reply = std::visit(
      Overloaded{
          [&](const ipc::KvSetRequest& m) { return SetKey(m); },
          [&](const ipc::KvGetRequest& m) { return GetKey(m, who); },
          [&](const ipc::KvAddRequest& m) { return AddToKey(m); },
          [&](const ipc::KvCompareAndSetRequest& m) {
            return CompareAndSet(m);
          },
          [&](const ipc::KvDeleteRequest& m) { return DeleteKeys(m); },
          [&](const ipc::KvListRequest& m) { return ListKeys(m); },
          [&](const ipc::KvWaitRequest& m) { return WaitForKeys(m, who); },
          [&](const ipc::BarrierRequest& m) { return ArriveAtBarrier(m, who); },
          [&](const auto&) -> std::optional<ipc::Message> {
            return ipc::ErrorReply{absl::InvalidArgumentError(
                absl::StrCat("the key-value store does not serve ",
                             ipc::MessageName(body)))};
          },
      },
      body);
  WakeWaiters();
  return reply;
}

std::optional<ipc::Message> KvService::Impl::SetKey(
    const ipc::KvSetRequest& m) {
  absl::Status s = Put(m.key, m.value);
  if (!s.ok()) return ipc::ErrorReply{s};
  return ipc::OkReply{};
}

std::optional<ipc::Message> KvService::Impl::GetKey(const ipc::KvGetRequest& m,
                                                    const Waiter& who) {
  auto it = data_.find(m.key);
  if (it != data_.end()) return ipc::KvValue{true, it->second, 0};
  if (m.timeout_ms == 0) return ipc::KvValue{false, "", 0};
  absl::Status s = CheckWait(m.timeout_ms);
  if (s.ok()) s = Charge(m.key.size());
  if (!s.ok()) return ipc::ErrorReply{s};
  Refund(m.key.size());  // AddWaiter charges it
  Waiter w = who;
  w.keys = {m.key};
  w.is_get = true;
  w.deadline = DeadlineFor(m.timeout_ms);
  AddWaiter(std::move(w));
  return std::nullopt;
}

std::optional<ipc::Message> KvService::Impl::AddToKey(
    const ipc::KvAddRequest& m) {
  int64_t value = 0;
  auto it = data_.find(m.key);
  if (it != data_.end() && !absl::SimpleAtoi(it->second, &value)) {
    return ipc::ErrorReply{absl::InvalidArgumentError(
        absl::StrCat("key '", m.key, "' does not hold an integer"))};
  }
  if (__builtin_add_overflow(value, m.delta, &value)) {
    return ipc::ErrorReply{absl::OutOfRangeError(
        absl::StrCat("adding ", m.delta, " to key '", m.key,
                     "' overflows a 64-bit integer"))};
  }
  absl::Status s = Put(m.key, absl::StrCat(value));
  if (!s.ok()) return ipc::ErrorReply{s};
  return ipc::KvValue{true, absl::StrCat(value), 0};
}

std::optional<ipc::Message> KvService::Impl::CompareAndSet(
    const ipc::KvCompareAndSetRequest& m) {
  auto it = data_.find(m.key);
  const bool matches = it == data_.end()
                           ? m.expect_absent
                           : (!m.expect_absent && it->second == m.expected);
  if (!matches)
    return ipc::KvValue{false, it == data_.end() ? "" : it->second, 0};
  absl::Status s = Put(m.key, m.desired);
  if (!s.ok()) return ipc::ErrorReply{s};
  return ipc::KvValue{true, m.desired, 0};
}

std::optional<ipc::Message> KvService::Impl::DeleteKeys(
    const ipc::KvDeleteRequest& m) {
  if (!m.prefix) {
    auto it = data_.find(m.key);
    if (it == data_.end()) return ipc::KvValue{false, "", 0};
    Refund(it->first.size() + it->second.size());
    data_.erase(it);
    return ipc::KvValue{true, "", 0};
  }
  uint64_t n = 0;
  for (auto it = data_.lower_bound(m.key);
       it != data_.end() && absl::StartsWith(it->first, m.key);) {
    Refund(it->first.size() + it->second.size());
    it = data_.erase(it);
    ++n;
  }
  return ipc::KvValue{n > 0, "", n};
}

std::optional<ipc::Message> KvService::Impl::ListKeys(
    const ipc::KvListRequest& m) {
  ipc::KvListReply r;
  for (auto it = data_.lower_bound(m.prefix);
       it != data_.end() && absl::StartsWith(it->first, m.prefix); ++it) {
    r.entries.emplace_back(it->first, it->second);
  }
  return r;
}

std::optional<ipc::Message> KvService::Impl::WaitForKeys(
    const ipc::KvWaitRequest& m, const Waiter& who) {
  if (AllExist(m.keys)) return ipc::OkReply{};
  absl::Status s = CheckWait(m.timeout_ms);
  if (s.ok()) s = Charge(KeyBytes(m.keys));
  if (!s.ok()) return ipc::ErrorReply{s};
  Refund(KeyBytes(m.keys));  // AddWaiter charges it
  Waiter w = who;
  w.keys = m.keys;
  w.deadline = DeadlineFor(m.timeout_ms);
  AddWaiter(std::move(w));
  return std::nullopt;
}

// The last participant to arrive releases them all.
std::optional<ipc::Message> KvService::Impl::ArriveAtBarrier(
    const ipc::BarrierRequest& m, const Waiter& who) {
  absl::Status s = CheckWait(m.timeout_ms);
  auto found = barriers_.find(m.name);
  if (s.ok() && found != barriers_.end() && found->second.world != m.world) {
    s = absl::InvalidArgumentError(
        absl::StrCat("barrier '", m.name, "' is for ", found->second.world,
                     " processes, this caller says ", m.world));
  }
  // Each arrival holds the barrier's name until the barrier opens.
  if (s.ok()) s = Charge(m.name.size());
  if (!s.ok()) return ipc::ErrorReply{s};
  Barrier& b = barriers_[m.name];
  if (b.arrived.empty()) b.world = m.world;
  Waiter w = who;
  w.keys = {m.name};
  w.deadline = DeadlineFor(m.timeout_ms);
  b.arrived.push_back(std::move(w));
  if (b.arrived.size() < b.world) return std::nullopt;
  for (const Waiter& arrived : b.arrived) {
    Refund(m.name.size());
    Reply(arrived.routing_id, arrived.request_id, ipc::OkReply{});
  }
  barriers_.erase(m.name);
  return std::nullopt;
}

void KvService::Impl::WakeWaiters() {
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (!AllExist(it->keys)) {
      ++it;
      continue;
    }
    if (it->is_get) {
      Reply(it->routing_id, it->request_id,
            ipc::KvValue{true, data_[it->keys[0]], 0});
    } else {
      Reply(it->routing_id, it->request_id, ipc::OkReply{});
    }
    it = EraseWaiter(it);
  }
}

std::optional<absl::Time> KvService::Impl::Expire(absl::Time now) {
  std::optional<absl::Time> next;
  auto track = [&](const std::optional<absl::Time>& d) {
    if (d && (!next || *d < *next)) next = d;
  };
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (it->deadline && *it->deadline <= now) {
      std::vector<std::string> missing;
      for (const std::string& k : it->keys) {
        if (data_.count(k) == 0) missing.push_back(k);
      }
      Reply(it->routing_id, it->request_id,
            ipc::ErrorReply{absl::DeadlineExceededError(absl::StrCat(
                "keys not set in time: ", absl::StrJoin(missing, ", ")))});
      it = EraseWaiter(it);
    } else {
      track(it->deadline);
      ++it;
    }
  }
  for (auto b = barriers_.begin(); b != barriers_.end();) {
    for (auto it = b->second.arrived.begin(); it != b->second.arrived.end();) {
      if (it->deadline && *it->deadline <= now) {
        Reply(it->routing_id, it->request_id,
              ipc::ErrorReply{absl::DeadlineExceededError(absl::StrCat(
                  "barrier '", b->first, "': ", b->second.arrived.size(),
                  " of ", b->second.world, " processes arrived in time"))});
        Refund(KeyBytes(it->keys));
        it = b->second.arrived.erase(it);
      } else {
        track(it->deadline);
        ++it;
      }
    }
    b = b->second.arrived.empty() ? barriers_.erase(b) : std::next(b);
  }
  return next;
}

// ---- KvService
// ----------------------------------------------------------------

KvService::KvService(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
KvService::~KvService() = default;

absl::StatusOr<std::unique_ptr<KvService>> KvService::Create(
    const KvServiceOptions& options) {
  auto impl = std::make_unique<Impl>(options);
  SHOAL_RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<KvService>(new KvService(std::move(impl)));
}

absl::Status KvService::Run() { return impl_->Run(); }
void KvService::Stop() { impl_->Stop(); }
const std::string& KvService::endpoint() const { return impl_->endpoint(); }

}  // namespace shoal::launch
