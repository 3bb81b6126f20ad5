#include "launch/kv_service.h"

#include <unistd.h>
#include <zmq.h>

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
#include "ipc/protocol.h"
#include "ipc/router.h"
#include "ipc/socket.h"

namespace shoal::launch {
namespace {

std::optional<absl::Time> DeadlineFor(int64_t timeout_ms) {
  if (timeout_ms < 0) return std::nullopt;
  return absl::Now() + absl::Milliseconds(timeout_ms);
}

}  // namespace

class KvService::Impl {
 public:
  explicit Impl(KvServiceOptions o) : o_(std::move(o)) {}
  ~Impl() { socket_.Close(); }

  absl::Status Init() {
    ipc::SocketOptions so;
    so.max_msg_bytes = static_cast<int64_t>(o_.max_value_bytes) + (1 << 20);
    limits_.max_frame_bytes = o_.max_value_bytes + (64 << 10);
    SHOAL_ASSIGN_OR_RETURN(socket_, ipc::Socket::Create(ZMQ_ROUTER, so));
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
  std::optional<ipc::Message> Handle(const std::string& routing_id,
                                     uint64_t request_id,
                                     const ipc::Message& body);
  // One per request. Each returns the reply, or nullopt when the caller waits
  // (as a Waiter, or a barrier participant) and is answered later.
  std::optional<ipc::Message> SetKey(const ipc::KvSetRequest& m);
  std::optional<ipc::Message> GetKey(const ipc::KvGetRequest& m,
                                     const std::string& routing_id,
                                     uint64_t request_id);
  std::optional<ipc::Message> AddToKey(const ipc::KvAddRequest& m);
  std::optional<ipc::Message> CompareAndSet(
      const ipc::KvCompareAndSetRequest& m);
  std::optional<ipc::Message> DeleteKeys(const ipc::KvDeleteRequest& m);
  std::optional<ipc::Message> ListKeys(const ipc::KvListRequest& m);
  std::optional<ipc::Message> WaitForKeys(const ipc::KvWaitRequest& m,
                                          const std::string& routing_id,
                                          uint64_t request_id);
  std::optional<ipc::Message> ArriveAtBarrier(const ipc::BarrierRequest& m,
                                              const std::string& routing_id,
                                              uint64_t request_id);
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
  std::string endpoint_;
  EventFd stop_;
  std::map<std::string, std::string> data_;
  std::list<Waiter> waiters_;
  std::map<std::string, Barrier> barriers_;
};

absl::Status KvService::Impl::Run() {
  while (true) {
    zmq_pollitem_t items[] = {{socket_.raw(), 0, ZMQ_POLLIN, 0},
                              {nullptr, stop_.fd(), ZMQ_POLLIN, 0}};
    const std::optional<absl::Time> next = Expire(absl::Now());
    const absl::Duration wait =
        next ? std::max(absl::ZeroDuration(), *next - absl::Now())
             : absl::InfiniteDuration();
    const int rc = zmq_poll(items, 2, ipc::PollTimeoutMs(wait));
    if (rc < 0 && zmq_errno() != EINTR)
      return ipc::ZmqStatus("zmq_poll", __FILE__, __LINE__);
    if (items[1].revents & ZMQ_POLLIN) return absl::OkStatus();
    if (items[0].revents & ZMQ_POLLIN) Drain();
  }
}

void KvService::Impl::Drain() {
  ipc::ServeRequests(socket_, limits_, /*max_requests=*/1024,
                     [&](const std::string& routing_id, uint64_t request_id,
                         const ipc::Message& body) {
                       return Handle(routing_id, request_id, body);
                     });
}

absl::Status KvService::Impl::Put(const std::string& key, std::string value) {
  if (value.size() > o_.max_value_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("a value of ", value.size(),
                     " bytes exceeds the limit of ", o_.max_value_bytes));
  }
  if (data_.size() >= o_.max_keys && data_.count(key) == 0) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the key-value store holds its limit of ", o_.max_keys, " keys"));
  }
  data_[key] = std::move(value);
  return absl::OkStatus();
}

std::optional<ipc::Message> KvService::Impl::Handle(
    const std::string& routing_id, uint64_t request_id,
    const ipc::Message& body) {
  std::optional<ipc::Message> reply = std::visit(
      Overloaded{
          [&](const ipc::KvSetRequest& m) { return SetKey(m); },
          [&](const ipc::KvGetRequest& m) {
            return GetKey(m, routing_id, request_id);
          },
          [&](const ipc::KvAddRequest& m) { return AddToKey(m); },
          [&](const ipc::KvCompareAndSetRequest& m) {
            return CompareAndSet(m);
          },
          [&](const ipc::KvDeleteRequest& m) { return DeleteKeys(m); },
          [&](const ipc::KvListRequest& m) { return ListKeys(m); },
          [&](const ipc::KvWaitRequest& m) {
            return WaitForKeys(m, routing_id, request_id);
          },
          [&](const ipc::BarrierRequest& m) {
            return ArriveAtBarrier(m, routing_id, request_id);
          },
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

std::optional<ipc::Message> KvService::Impl::GetKey(
    const ipc::KvGetRequest& m, const std::string& routing_id,
    uint64_t request_id) {
  auto it = data_.find(m.key);
  if (it != data_.end()) return ipc::KvValue{true, it->second, 0};
  if (m.timeout_ms == 0) return ipc::KvValue{false, "", 0};
  waiters_.push_back(
      {routing_id, request_id, {m.key}, true, DeadlineFor(m.timeout_ms)});
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
  value += m.delta;
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
  if (!m.prefix) return ipc::KvValue{data_.erase(m.key) > 0, "", 0};
  uint64_t n = 0;
  for (auto it = data_.lower_bound(m.key);
       it != data_.end() && absl::StartsWith(it->first, m.key);) {
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
    const ipc::KvWaitRequest& m, const std::string& routing_id,
    uint64_t request_id) {
  if (AllExist(m.keys)) return ipc::OkReply{};
  waiters_.push_back(
      {routing_id, request_id, m.keys, false, DeadlineFor(m.timeout_ms)});
  return std::nullopt;
}

// The last participant to arrive releases them all.
std::optional<ipc::Message> KvService::Impl::ArriveAtBarrier(
    const ipc::BarrierRequest& m, const std::string& routing_id,
    uint64_t request_id) {
  Barrier& b = barriers_[m.name];
  if (b.arrived.empty()) b.world = m.world;
  if (b.world != m.world) {
    return ipc::ErrorReply{absl::InvalidArgumentError(
        absl::StrCat("barrier '", m.name, "' is for ", b.world,
                     " processes, this caller says ", m.world))};
  }
  b.arrived.push_back(
      {routing_id, request_id, {}, false, DeadlineFor(m.timeout_ms)});
  if (b.arrived.size() < b.world) return std::nullopt;
  for (const Waiter& w : b.arrived)
    Reply(w.routing_id, w.request_id, ipc::OkReply{});
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
    it = waiters_.erase(it);
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
      it = waiters_.erase(it);
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
