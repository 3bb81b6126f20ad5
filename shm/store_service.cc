#include "shm/store_service.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <algorithm>
#include <cerrno>
#include <list>
#include <map>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/overloaded.h"
#include "base/process_info.h"
#include "base/runtime_dir.h"
#include "base/status_macros.h"
#include "ipc/router.h"
#include "ipc/socket.h"
#include "observe/timeline_ring.h"
#include "shm/allocator.h"
#include "shm/layout.h"
#include "shm/object_table.h"
#include "shm/prefaulter.h"
#include "shm/robust_lock.h"
#include "shm/segment.h"
#include "shm/store_service_impl.h"

namespace shoal::shm {
namespace {

uint32_t DefaultMaxObjects(uint64_t bytes) {
  return static_cast<uint32_t>(
      std::clamp<uint64_t>(bytes >> 16, uint64_t{4096}, uint64_t{1} << 20));
}

// Fills in the defaults of `options` (store size, object count) and lays the
// segment out. Errors: InvalidArgument (no clients or references allowed),
// and those of DefaultStoreBytes and ComputeLayout.
absl::StatusOr<Layout> ResolveLayout(StoreOptions* options) {
  if (options->store_bytes == 0) {
    SHOAL_ASSIGN_OR_RETURN(options->store_bytes, DefaultStoreBytes());
  }
  options->store_bytes = AlignUp(options->store_bytes, kPageSize);
  if (options->max_objects == 0)
    options->max_objects = DefaultMaxObjects(options->store_bytes);
  if (options->initial_refs_per_client == 0 || options->max_clients == 0) {
    return absl::InvalidArgumentError(
        "max_clients and initial_refs_per_client must be positive");
  }
  LayoutParams params{options->store_bytes, options->max_objects,
                      options->max_clients,
                      2 * options->initial_refs_per_client};
  return ComputeLayout(params);
}

}  // namespace

// ---- construction -----------------------------------------------------------

absl::StatusOr<std::unique_ptr<StoreService::Impl>> StoreService::Impl::Create(
    StoreOptions options) {
  SHOAL_ASSIGN_OR_RETURN(const std::string name,
                         SegmentNameForJob(options.job_id));
  SHOAL_ASSIGN_OR_RETURN(const Layout layout, ResolveLayout(&options));
  std::unique_ptr<Impl> impl(new Impl(std::move(options)));
  SHOAL_RETURN_IF_ERROR(impl->CreateSegment(name, layout));
  SHOAL_RETURN_IF_ERROR(impl->MakeSpillFolder());
  SHOAL_RETURN_IF_ERROR(impl->BindSocket());
  SHOAL_ASSIGN_OR_RETURN(impl->stop_, EventFd::Create());
  return impl;
}

absl::Status StoreService::Impl::CreateSegment(const std::string& name,
                                               const Layout& layout) {
  for (const std::string& stale : Segment::RemoveStale()) {
    SHOAL_LOG(INFO, "removed stale store segment /dev/shm/%s", stale);
  }
  // The rings of jobs killed whole: their stores' segments went just now (a
  // live store's node still reads its dead workers' rings).
  const std::vector<std::string> rings =
      observe::RemoveEndedJobsRings([](const std::string& job) {
        absl::StatusOr<std::string> store = SegmentNameForJob(job);
        struct stat st;
        return !store.ok() ||
               stat(absl::StrCat("/dev/shm/", *store).c_str(), &st) == 0;
      });
  if (!rings.empty()) {
    SHOAL_LOG(INFO, "removed %d timeline rings of ended jobs (%s, ...)",
              static_cast<int>(rings.size()), rings.front());
  }
  SHOAL_ASSIGN_OR_RETURN(segment_, Segment::Create(name, options_.store_bytes));

  uint8_t* base = segment_->base();
  auto* h = reinterpret_cast<SegmentHeader*>(base);
  segment_->InitPrefix(options_.job_id, kLayoutVersion, sizeof(SegmentHeader));
  SHOAL_RETURN_IF_ERROR(InitRobustLock(&h->lock));
  // Allocate the index's pages now, in one kernel call: clients map them with
  // MAP_POPULATE at connect instead of faulting in a fresh page inside a get
  // (a fault on a fresh shared page costs several times a whole warm get).
  // The object table (tens of MiB for a large store) and
  // the client slots are left to be allocated as they are first written: the
  // service writes an entry before any client reads it, and start-up stays
  // independent of the store's size.
  if (fallocate(segment_->fd(), 0, static_cast<off_t>(layout.index_offset),
                static_cast<off_t>(layout.clients_offset -
                                   layout.index_offset)) != 0) {
    return SHOAL_ERRNO("allocating the store's index in /dev/shm");
  }
  table_ = std::make_unique<ObjectTable>(base);
  table_->Format(layout);
  allocator_ = std::make_unique<ArenaAllocator>(
      layout.arena_offset, layout.arena_bytes, kDataAlignment);
  free_entries_.reserve(layout.max_objects);
  for (uint32_t i = layout.max_objects; i-- > 0;) free_entries_.push_back(i);
  segment_->Publish(kSegmentMagic);

  prefaulter_ = std::make_unique<Prefaulter>(
      segment_->fd(), layout.arena_offset, layout.arena_bytes,
      options_.prefault_ahead_bytes);
  return absl::OkStatus();
}

absl::Status StoreService::Impl::BindSocket() {
  endpoint_ = options_.endpoint;
  if (endpoint_.empty()) {
    SHOAL_ASSIGN_OR_RETURN(const std::string dir, JobDir(options_.job_id));
    endpoint_ = absl::StrCat("ipc://", dir, "/store.sock");
  }
  if (absl::StartsWith(endpoint_, "ipc://")) {
    socket_path_ = endpoint_.substr(6);
    unlink(socket_path_.c_str());  // a dead store's socket file
  }
  ipc::SocketOptions sockopts;
  // ZeroMQ drops a peer that sends more than this; keep it well above the
  // protocol limit so an oversized request gets an error reply instead.
  sockopts.max_msg_bytes =
      4 * static_cast<int64_t>(options_.limits.max_frame_bytes);
  SHOAL_ASSIGN_OR_RETURN(socket_, ipc::Socket::Create(ZMQ_ROUTER, sockopts));
  SHOAL_RETURN_IF_ERROR(socket_.Bind(endpoint_));
  SHOAL_ASSIGN_OR_RETURN(endpoint_, socket_.LastEndpoint());
  return absl::OkStatus();
}

StoreService::Impl::~Impl() {
  if (segment_ != nullptr) segment_->MarkClosed();
  if (spills_ > 0 || restores_ > 0) {
    SHOAL_LOG(INFO,
              "store: spilled %d objects (%d bytes), read back %d (%d bytes)",
              spills_.load(), spilled_bytes_.load(), restores_.load(),
              restored_bytes_.load());
  }
  spill_io_.reset();  // finishes the file it is writing or reading
  spill_.reset();     // removes the spill folder and every file in it
  for (auto& [slot, c] : clients_) {
    if (c.pidfd >= 0) close(c.pidfd);
  }
  prefaulter_.reset();
  socket_.Close();
  if (!socket_path_.empty()) unlink(socket_path_.c_str());
}

// ---- event loop -------------------------------------------------------------

absl::Status StoreService::Impl::Run() {
  absl::Time next_sweep = absl::Now() + options_.sweep_interval;
  std::vector<zmq_pollitem_t> items;
  // The client each pidfd item watches: its slot and session, since the
  // requests served before the pidfds are looked at may release it
  // (ReleaseExitedClients, a disconnect) and give its slot to another.
  std::vector<std::pair<uint32_t, uint64_t>> item_client;
  while (true) {
    items.clear();
    item_client.clear();
    items.push_back({socket_.raw(), 0, ZMQ_POLLIN, 0});
    items.push_back({nullptr, stop_.fd(), ZMQ_POLLIN, 0});
    if (spill_io_ != nullptr) {
      items.push_back({nullptr, spill_io_->fd(), ZMQ_POLLIN, 0});
    }
    const size_t first_client = items.size();
    for (const auto& [slot, c] : clients_) {
      if (c.pidfd < 0) continue;
      items.push_back({nullptr, c.pidfd, ZMQ_POLLIN, 0});
      item_client.emplace_back(slot, c.session);
    }
    absl::Time now = absl::Now();
    absl::Time wake = next_sweep;
    for (const auto& [key, p] : pending_) {
      if (p.deadline) wake = std::min(wake, *p.deadline);
    }
    const int rc = zmq_poll(
        items.data(), static_cast<int>(items.size()),
        ipc::PollTimeoutMs(std::max(absl::ZeroDuration(), wake - now)));
    if (rc < 0 && zmq_errno() != EINTR) {
      return ipc::ZmqStatus("zmq_poll", __FILE__, __LINE__);
    }
    if (items[1].revents & ZMQ_POLLIN) return absl::OkStatus();
    if (items[0].revents & ZMQ_POLLIN) DrainSocket();
    // Spill files written or read (or moves a handler finished itself).
    if ((first_client > 2 && (items[2].revents & ZMQ_POLLIN)) ||
        moves_finished_) {
      OnMovesDone();
    }
    for (size_t i = first_client; i < items.size(); ++i) {
      if (!(items[i].revents & ZMQ_POLLIN)) continue;
      const auto [slot, session] = item_client[i - first_client];
      auto c = clients_.find(slot);
      if (c != clients_.end() && c->second.session == session) {
        ReleaseClient(slot, "its process exited");
      }
    }
    now = absl::Now();
    ExpireWaiters(now);
    if (now >= next_sweep) {
      Sweep();
      next_sweep = now + options_.sweep_interval;
    }
  }
}

void StoreService::Impl::DrainSocket() {
  // A bounded batch, so that pidfd events and deadlines are not starved.
  ipc::ServeRequestsWithPeer(
      socket_, options_.limits, /*max_requests=*/256,
      [&](const std::string& routing_id, const ipc::RequestPeer& peer,
          uint64_t request_id, const ipc::Message& body) {
        return Dispatch(routing_id, peer, request_id, body);
      });
}

StoreService::Impl::Reply StoreService::Impl::Dispatch(
    const std::string& routing_id, const ipc::RequestPeer& peer,
    uint64_t request_id, const ipc::Message& body) {
  if (const auto* m = std::get_if<ipc::StoreConnectRequest>(&body)) {
    return OnConnect(routing_id, peer, *m);
  }
  auto it = slot_of_.find(routing_id);
  if (it == slot_of_.end()) {
    if (std::holds_alternative<ipc::ReclaimHint>(body) ||
        std::holds_alternative<ipc::SealedNotice>(body)) {
      return std::nullopt;
    }
    return ipc::Message(ipc::ErrorReply{absl::FailedPreconditionError(
        absl::StrCat("send store_connect before ", ipc::MessageName(body)))});
  }
  const uint32_t slot = it->second;
  Reply reply = std::visit(
      Overloaded{
          [&](const ipc::StoreDisconnectRequest&) {
            return OnDisconnect(slot);
          },
          [&](const ipc::CreateRequest& m) {
            return OnCreate(routing_id, request_id, slot, m);
          },
          [&](const ipc::SealedNotice& m) -> Reply {
            OnSealed(m);
            return std::nullopt;
          },
          [&](const ipc::AbortRequest& m) { return OnAbort(slot, m); },
          [&](const ipc::GetRequest& m) {
            return OnGet(routing_id, request_id, slot, m);
          },
          [&](const ipc::ReleaseRequest& m) { return OnRelease(slot, m); },
          [&](const ipc::DeleteRequest& m) { return OnDelete(m); },
          [&](const ipc::ContainsRequest& m) { return OnContains(m); },
          [&](const ipc::StoreStatsRequest&) { return OnStats(); },
          [&](const ipc::StoreAccountRequest& m) { return OnAccount(m); },
          [&](const ipc::StoreRefRoomRequest& m) { return OnRefRoom(m); },
          [&](const ipc::ReclaimHint& m) -> Reply {
            OnReclaimHint(m);
            return std::nullopt;
          },
          [&](const auto& other) -> Reply {
            return ipc::Message(
                ipc::ErrorReply{absl::InvalidArgumentError(absl::StrCat(
                    "the store does not serve ", ipc::MessageName(body)))});
          },
      },
      body);
  return reply;
}

// ---- StoreService
// -------------------------------------------------------------

StoreService::StoreService(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}
StoreService::~StoreService() = default;

absl::StatusOr<std::unique_ptr<StoreService>> StoreService::Create(
    StoreOptions options) {
  SHOAL_ASSIGN_OR_RETURN(std::unique_ptr<Impl> impl,
                         Impl::Create(std::move(options)));
  return std::unique_ptr<StoreService>(new StoreService(std::move(impl)));
}

absl::Status StoreService::Run() { return impl_->Run(); }
void StoreService::Stop() { impl_->Stop(); }
absl::StatusOr<ipc::StoreStats> StoreService::Stats() const {
  return impl_->Stats();
}
const std::string& StoreService::endpoint() const { return impl_->endpoint(); }
const std::string& StoreService::segment_name() const {
  return impl_->segment_name();
}
uint64_t StoreService::segment_bytes() const { return impl_->segment_bytes(); }

}  // namespace shoal::shm
