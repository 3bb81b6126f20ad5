#include "collectives/hierarchical/hierarchical_communicator.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "collectives/reduce/reduce_kernels.h"

namespace shoal::collectives {

namespace {

const uint8_t* Bytes(const void* p) { return static_cast<const uint8_t*>(p); }
uint8_t* Bytes(void* p) { return static_cast<uint8_t*>(p); }

// A copy of `s` that shares no reference-counted state with it. The watcher
// hands a failure to other threads (each part's Abort, unreported_), and the
// parts wake their callers through gloo, which is not built with
// ThreadSanitizer: a shared absl::Status representation freed on another
// thread then looks like a race to it.
absl::Status Unshared(const absl::Status& s) {
  return absl::Status(s.code(), std::string(s.message()));
}

}  // namespace

std::string GlooListenAddress() {
  const char* forced = std::getenv("SHOAL_GLOO_HOSTNAME");
  if (forced != nullptr && *forced != '\0') return forced;
  const char* head = std::getenv("MASTER_ADDR");
  std::string address = "127.0.0.1";
  if (head == nullptr || *head == '\0') return address;
  // MASTER_ADDR is what `shoal launch --coordinator` named: an address or a
  // host name. A UDP "connection" sends nothing: it only asks the kernel for
  // the route, whose source address is the one the head node (and so the
  // others) reach. Never the wildcard: a rank listens on one interface.
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(head, "9", &hints, &found) != 0) return address;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage me = {};
    socklen_t len = sizeof(me);
    char text[INET6_ADDRSTRLEN] = {};
    const void* ip =
        a->ai_family == AF_INET
            ? static_cast<const void*>(
                  &reinterpret_cast<sockaddr_in*>(&me)->sin_addr)
            : static_cast<const void*>(
                  &reinterpret_cast<sockaddr_in6*>(&me)->sin6_addr);
    const bool ok =
        connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&me), &len) == 0 &&
        inet_ntop(a->ai_family, ip, text, sizeof(text)) != nullptr;
    close(fd);
    if (ok && std::string(text) != "0.0.0.0" && std::string(text) != "::") {
      address = text;
      break;
    }
  }
  freeaddrinfo(found);
  return address;
}

bool HierarchicalCommunicator::Fits(const std::vector<int>& node_of) {
  if (node_of.empty()) return false;
  int local_size = 0;
  while (local_size < static_cast<int>(node_of.size()) &&
         node_of[local_size] == node_of[0]) {
    ++local_size;
  }
  if (node_of.size() % local_size != 0) return false;
  std::vector<int> seen;
  for (size_t block = 0; block < node_of.size(); block += local_size) {
    const int node = node_of[block];
    if (std::find(seen.begin(), seen.end(), node) != seen.end()) return false;
    seen.push_back(node);
    for (int k = 0; k < local_size; ++k) {
      if (node_of[block + k] != node) return false;
    }
  }
  return true;
}

HierarchicalCommunicator::HierarchicalCommunicator(
    int rank, const HierarchicalOptions& options, GlooCommunicator* flat)
    : rank_(rank),
      world_(static_cast<int>(options.node_of.size())),
      o_(options),
      flat_(flat) {}

HierarchicalCommunicator::~HierarchicalCommunicator() {
  {
    MutexLock lock(&watch_mu_);
    stop_watching_ = true;
    watch_cv_.SignalAll();
  }
  if (watcher_.joinable()) watcher_.join();
}

// Counts a running call for the watcher.
class HierarchicalCommunicator::Watching {
 public:
  explicit Watching(HierarchicalCommunicator* c) : c_(c) {
    MutexLock lock(&c_->watch_mu_);
    ++c_->calls_started_;
    ++c_->calls_;
    // Only a watcher waiting for a call is woken: one in its 10 ms poll
    // wait is left alone (waking it at every call of a burst of small ones
    // put one more thread on the cores per call).
    if (c_->watcher_idle_) c_->watch_cv_.SignalAll();
  }
  ~Watching() {
    MutexLock lock(&c_->watch_mu_);
    --c_->calls_;
  }

 private:
  HierarchicalCommunicator* const c_;
};

void HierarchicalCommunicator::Watch() {
  // Often enough to fail well within any timeout; each poll reads the
  // node's control blocks and checks L-1 pids.
  constexpr absl::Duration kPoll = absl::Milliseconds(10);
  // How long a connection must stay gone under one call before the call is
  // failed: gloo itself reports a lost peer within milliseconds where it
  // can, and a call that succeeded as its peer closed returns at once.
  constexpr absl::Duration kLostGrace = absl::Milliseconds(200);
  // A node partner that ended is not always a failure: one that finished
  // its part of the call (a barrier's last step is between nodes) may exit
  // while this rank still finishes its step between nodes, and failing
  // then would fail a call that succeeds. A real loss also reaches this
  // rank through that step (the other node's ranks abort and close their
  // connections), so the watcher, a backstop, acts on its node's report
  // only once it lasted this long under one call.
  constexpr absl::Duration kLocalGrace = absl::Seconds(2);
  uint64_t local_call = 0;  // the call under which the report was first seen
  absl::Time local_since = absl::InfiniteFuture();
  while (true) {
    uint64_t call = 0;
    {
      MutexLock lock(&watch_mu_);
      while (!stop_watching_ && calls_ == 0) {
        watcher_idle_ = true;
        watch_cv_.Wait(&watch_mu_);
      }
      watcher_idle_ = false;
      if (stop_watching_) return;
      watch_cv_.WaitWithDeadline(&watch_mu_, absl::Now() + kPoll);
      if (stop_watching_) return;
      if (calls_ == 0) continue;
      call = calls_started_;
    }
    absl::Status s = shm_->PeerFailed();
    const absl::Time now = absl::Now();
    if (s.ok() || call != local_call) local_since = absl::InfiniteFuture();
    local_call = call;
    if (!s.ok() && local_since == absl::InfiniteFuture()) local_since = now;
    if (!s.ok() && now - local_since < kLocalGrace) s = absl::OkStatus();
    if (!s.ok()) s = WithinNode(std::move(s));
    // A connection to another node gone under a running gloo step: gloo
    // may never fail that step (gloo_connections.h).
    if (s.ok()) s = column_->CheckConnections(kLostGrace);
    if (s.ok()) s = flat_->CheckConnections(kLostGrace);
    if (!s.ok()) {
      {
        // The running call returns it (rather than a part's
        // FailedPrecondition), or else the next call does (Report).
        MutexLock lock(&watch_mu_);
        if (!reported_) unreported_ = Unshared(s);
      }
      Fail(std::move(s), false).IgnoreError();
      return;  // failed for good: nothing more to watch
    }
  }
}

absl::StatusOr<std::unique_ptr<HierarchicalCommunicator>>
HierarchicalCommunicator::Create(Rendezvous& rendezvous,
                                 const std::string& name, int rank,
                                 GlooCommunicator* flat,
                                 const HierarchicalOptions& options) {
  const int world = static_cast<int>(options.node_of.size());
  if (!Fits(options.node_of) || rank < 0 || rank >= world || flat == nullptr ||
      flat->size() != world) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hierarchical communicator '", name, "': rank ", rank, " of ", world,
        ": the ranks must form equal blocks by node"));
  }
  HierarchicalOptions o = options;
  const char* leaders = std::getenv("SHOAL_COLL_HIER_LEADERS");
  if (leaders != nullptr && std::string(leaders) == "1") o.leaders_only = true;
  const char* small = std::getenv("SHOAL_COLL_HIER_SMALL");
  if (small != nullptr && std::string(small) == "leaders") {
    o.small_through_leaders = true;
  } else if (small != nullptr && std::string(small) == "columns") {
    o.small_through_leaders = false;
  }
  const char* exchange_bytes = std::getenv("SHOAL_COLL_HIER_EXCHANGE_BYTES");
  if (exchange_bytes != nullptr && *exchange_bytes != '\0' &&
      !absl::SimpleAtoi(exchange_bytes, &o.exchange_bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("SHOAL_COLL_HIER_EXCHANGE_BYTES=", exchange_bytes,
                     ": expected a number of bytes"));
  }
  const char* piece = std::getenv("SHOAL_COLL_HIER_PIECE_BYTES");
  if (piece != nullptr && *piece != '\0' &&
      !absl::SimpleAtoi(piece, &o.pipeline_piece_bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SHOAL_COLL_HIER_PIECE_BYTES=", piece, ": expected a number of bytes"));
  }
  const char* small_bytes = std::getenv("SHOAL_COLL_HIER_SMALL_BYTES");
  if (small_bytes != nullptr && *small_bytes != '\0' &&
      !absl::SimpleAtoi(small_bytes, &o.small_bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("SHOAL_COLL_HIER_SMALL_BYTES=", small_bytes,
                     ": expected a number of bytes"));
  }
  const int nodes = world / static_cast<int>(std::count(options.node_of.begin(),
                                                        options.node_of.end(),
                                                        options.node_of[0]));
  if (o.small_bytes == 0) {
    o.small_bytes = (uint64_t{64} << 10) / std::max(nodes - 1, 1);
  }
  // Only 2 nodes take the exchange for large buffers (with more, each rank
  // would send its slice to every other node).
  if (nodes != 2) o.exchange_bytes = 0;
  // Without the sync mode (SHOAL_COLL_HIER_SYNC=0, for comparison) the
  // exchange stages world x its bound in registered buffers: the bound
  // measured before the sync mode's sockets were sized, 2 MiB.
  const char* sync = std::getenv("SHOAL_COLL_HIER_SYNC");
  const bool sync_mode = sync == nullptr || std::string(sync) != "0";
  if (!sync_mode)
    o.exchange_bytes = std::min<uint64_t>(o.exchange_bytes, 2 << 20);
  // The columns' exchange: the small buffers, and on 2 nodes large ones.
  o.gloo.exchange_bytes = std::max(o.small_bytes, o.exchange_bytes);
  if (o.job_ranks.size() != options.node_of.size()) {
    o.job_ranks.clear();
    for (int r = 0; r < world; ++r) o.job_ranks.push_back(r);
  }
  std::unique_ptr<HierarchicalCommunicator> c(
      new HierarchicalCommunicator(rank, o, flat));
  const std::vector<int>& node_of = options.node_of;
  c->local_size_ =
      static_cast<int>(std::count(node_of.begin(), node_of.end(), node_of[0]));
  c->nodes_ = world / c->local_size_;
  c->node_ = rank / c->local_size_;
  c->local_ = rank % c->local_size_;
  // Where a node's ranks have fewer than two cores each, a rank waiting in
  // shm (for its leader's network step, or a partner) that polls with the
  // pause hint holds a core the ranks and the kernel's network processing
  // it waits for need: it yields at once instead, as Open MPI's ranks do
  // with mpi_yield_when_idle (docs/collectives.md, the waits).
  // SHOAL_COLL_SPIN_PAUSES, when set, decides.
  ShmCommOptions shm_options = options.shm;
  const char* pauses = std::getenv("SHOAL_COLL_SPIN_PAUSES");
  cpu_set_t cpus;
  if ((pauses == nullptr || *pauses == '\0') &&
      sched_getaffinity(0, sizeof(cpus), &cpus) == 0 &&
      CPU_COUNT(&cpus) < 2 * c->local_size_) {
    shm_options.spin_pauses = 0;
  }
  SHOAL_ASSIGN_OR_RETURN(
      c->shm_,
      ShmCommunicator::Create(rendezvous, options.job_id,
                              absl::StrCat(name, ".node", node_of[rank]),
                              c->local_, c->local_size_, shm_options));
  // The columns that run the small exchange (the leaders', or every one in
  // the columns' variant) read their sockets on the caller's thread (gloo's
  // sync mode); SHOAL_COLL_HIER_SYNC=0 keeps them on gloo's event loop, for
  // comparison. Every rank of a column decides alike.
  GlooCommOptions column_options = o.gloo;
  column_options.sync_exchange =
      sync_mode &&
      (!o.small_through_leaders || c->local_ == 0 || o.exchange_bytes > 0);
  SHOAL_ASSIGN_OR_RETURN(c->column_,
                         GlooCommunicator::Create(
                             rendezvous, absl::StrCat(name, ".col", c->local_),
                             c->node_, c->nodes_, column_options));
  HierarchicalCommunicator* self = c.get();
  c->watcher_ = std::thread([self] { self->Watch(); });
  return c;
}

// ---- failure ---------------------------------------------------------------

absl::Status HierarchicalCommunicator::WithinNode(absl::Status s) const {
  const int first = node_ * local_size_;
  return absl::Status(
      s.code(),
      absl::StrCat("within node ", o_.node_of[rank_], " (local ranks 0-",
                   local_size_ - 1, " are ranks ", o_.job_ranks[first], "-",
                   o_.job_ranks[first + local_size_ - 1], "): ", s.message()));
}

absl::Status HierarchicalCommunicator::Fail(absl::Status s, bool from_shm) {
  if (s.code() == absl::StatusCode::kFailedPrecondition) return s;
  if (from_shm) s = WithinNode(std::move(s));
  shm_->Abort(Unshared(s)).IgnoreError();
  column_->Abort(Unshared(s)).IgnoreError();
  flat_->Abort(Unshared(s)).IgnoreError();
  return s;
}

absl::Status HierarchicalCommunicator::Report(absl::Status s) {
  if (!s.ok()) {
    MutexLock lock(&watch_mu_);
    // A part refusing because the watcher failed it: the watcher's reason.
    if (s.code() == absl::StatusCode::kFailedPrecondition &&
        !unreported_.ok()) {
      s = unreported_;
    }
    reported_ = true;
    unreported_ = absl::OkStatus();
  }
  return s;
}

absl::Status HierarchicalCommunicator::TakeUnreported() {
  MutexLock lock(&watch_mu_);
  absl::Status s = std::move(unreported_);
  unreported_ = absl::OkStatus();
  if (!s.ok()) reported_ = true;
  return s;
}

absl::Duration HierarchicalCommunicator::Left(absl::Time deadline) {
  return std::max(deadline - absl::Now(), absl::Milliseconds(1));
}

absl::Time HierarchicalCommunicator::DeadlineFor(absl::Duration timeout) const {
  if (timeout == absl::ZeroDuration()) timeout = o_.gloo.timeout;
  return absl::Now() + timeout;
}

ReduceOp HierarchicalCommunicator::Combine(ReduceOp op) {
  return op == ReduceOp::kAvg ? ReduceOp::kSum : op;
}

// ---- collectives -----------------------------------------------------------

absl::Status HierarchicalCommunicator::AllReduce(const void* in, void* out,
                                                 int64_t count, DType dtype,
                                                 ReduceOp op,
                                                 absl::Duration timeout) {
  small_times_.Start();
  const Watching watching(this);
  SHOAL_RETURN_IF_ERROR(TakeUnreported());
  const absl::Time deadline = DeadlineFor(timeout);
  const ReduceOp combine = Combine(op);
  const size_t es = DTypeSize(dtype);
  const int64_t slice = count / local_size_;
  const bool small = static_cast<uint64_t>(count) * es <= o_.small_bytes;
  if (small && o_.small_through_leaders) {
    small_times_.Lap(0);
    SHOAL_RETURN_IF_ERROR(
        Shm(shm_->Reduce(in, out, count, dtype, combine, 0, Left(deadline))));
    small_times_.Lap(1);
    if (local_ == 0) {
      SHOAL_RETURN_IF_ERROR(Net(column_->ExchangeAllReduce(
          out, out, count, dtype, combine, Left(deadline))));
    }
    small_times_.Lap(2);
    SHOAL_RETURN_IF_ERROR(
        Shm(shm_->Broadcast(out, out, count, dtype, 0, Left(deadline))));
    small_times_.Lap(3);
  } else if (small || slice == 0) {
    // Every local rank ends up with the node's sum, and every column
    // reduces the same values in the same order: all ranks get identical
    // results.
    SHOAL_RETURN_IF_ERROR(
        Shm(shm_->AllReduce(in, out, count, dtype, combine, Left(deadline))));
    SHOAL_RETURN_IF_ERROR(Net(column_->ExchangeAllReduce(
        out, out, count, dtype, combine, Left(deadline))));
  } else if (o_.leaders_only) {
    SHOAL_RETURN_IF_ERROR(
        Shm(shm_->Reduce(in, out, count, dtype, combine, 0, Left(deadline))));
    if (local_ == 0) {
      SHOAL_RETURN_IF_ERROR(Net(
          column_->AllReduce(out, out, count, dtype, combine, Left(deadline))));
    }
    SHOAL_RETURN_IF_ERROR(
        Shm(shm_->Broadcast(out, out, count, dtype, 0, Left(deadline))));
  } else if (o_.pipeline_piece_bytes > 0 && column_->has_sync_exchange() &&
             static_cast<uint64_t>(count) * es <= o_.exchange_bytes) {
    SHOAL_RETURN_IF_ERROR(
        PipelinedColumns(in, out, count, dtype, combine, deadline));
  } else {
    column_times_.Start();
    uint8_t* mine = Bytes(out) + local_ * slice * es;
    column_times_.Lap(0);
    SHOAL_RETURN_IF_ERROR(Shm(
        shm_->ReduceScatter(in, mine, slice, dtype, combine, Left(deadline))));
    column_times_.Lap(1);
    if (static_cast<uint64_t>(count) * es <= o_.exchange_bytes) {
      SHOAL_RETURN_IF_ERROR(Net(column_->ExchangeAllReduce(
          mine, mine, slice, dtype, combine, Left(deadline))));
    } else {
      SHOAL_RETURN_IF_ERROR(Net(column_->AllReduce(mine, mine, slice, dtype,
                                                   combine, Left(deadline))));
    }
    column_times_.Lap(2);
    SHOAL_RETURN_IF_ERROR(
        Shm(shm_->AllGather(mine, out, slice, dtype, Left(deadline))));
    column_times_.Lap(3);
    // The last count % L elements: a tiny all_reduce of their own (in place,
    // they are still this rank's input).
    const int64_t done = slice * local_size_;
    if (done < count) {
      uint8_t* tail = Bytes(out) + done * es;
      SHOAL_RETURN_IF_ERROR(
          Shm(shm_->AllReduce(Bytes(in) + done * es, tail, count - done, dtype,
                              combine, Left(deadline))));
      // A few elements: the exchange (one step) where the column has it.
      SHOAL_RETURN_IF_ERROR(Net(column_->ExchangeAllReduce(
          tail, tail, count - done, dtype, combine, Left(deadline))));
    }
  }
  if (op == ReduceOp::kAvg) return DivideInPlace(dtype, out, count, world_);
  return absl::OkStatus();
}

absl::Status HierarchicalCommunicator::Broadcast(const void* in, void* out,
                                                 int64_t count, DType dtype,
                                                 int root,
                                                 absl::Duration timeout) {
  const Watching watching(this);
  SHOAL_RETURN_IF_ERROR(TakeUnreported());
  if (root < 0 || root >= world_)
    return absl::InvalidArgumentError(absl::StrCat("broadcast: root ", root));
  const absl::Time deadline = DeadlineFor(timeout);
  const int root_local = root % local_size_;
  if (rank_ == root && in != out && count > 0)
    std::memmove(out, in, count * DTypeSize(dtype));
  // The root's column carries it to every node, then each node's shm.
  if (local_ == root_local) {
    SHOAL_RETURN_IF_ERROR(Net(column_->Broadcast(
        out, out, count, dtype, root / local_size_, Left(deadline))));
  }
  return Shm(
      shm_->Broadcast(out, out, count, dtype, root_local, Left(deadline)));
}

absl::Status HierarchicalCommunicator::Reduce(const void* in, void* out,
                                              int64_t count, DType dtype,
                                              ReduceOp op, int root,
                                              absl::Duration timeout) {
  const Watching watching(this);
  SHOAL_RETURN_IF_ERROR(TakeUnreported());
  if (root < 0 || root >= world_)
    return absl::InvalidArgumentError(absl::StrCat("reduce: root ", root));
  const absl::Time deadline = DeadlineFor(timeout);
  const ReduceOp combine = Combine(op);
  const int root_local = root % local_size_;
  // Each node reduces to its rank in the root's column, which reduces
  // between nodes to the root.
  std::vector<uint8_t> scratch;
  void* partial = out;
  if (rank_ != root && local_ == root_local) {
    scratch.resize(count * DTypeSize(dtype));
    partial = scratch.data();
  }
  SHOAL_RETURN_IF_ERROR(Shm(shm_->Reduce(in, partial, count, dtype, combine,
                                         root_local, Left(deadline))));
  if (local_ == root_local) {
    SHOAL_RETURN_IF_ERROR(
        Net(column_->Reduce(partial, partial, count, dtype, combine,
                            root / local_size_, Left(deadline))));
  }
  if (rank_ == root && op == ReduceOp::kAvg)
    return DivideInPlace(dtype, out, count, world_);
  return absl::OkStatus();
}

absl::Status HierarchicalCommunicator::AllGather(const void* in, void* out,
                                                 int64_t count, DType dtype,
                                                 absl::Duration timeout) {
  const Watching watching(this);
  SHOAL_RETURN_IF_ERROR(TakeUnreported());
  const absl::Time deadline = DeadlineFor(timeout);
  const size_t node_bytes = count * DTypeSize(dtype) * local_size_;
  uint8_t* node_block = Bytes(out) + node_ * node_bytes;
  // In place (in = out + rank·count) is the shm backend's in-place form too.
  SHOAL_RETURN_IF_ERROR(
      Shm(shm_->AllGather(in, node_block, count, dtype, Left(deadline))));
  return Net(column_->AllGather(node_block, out, count * local_size_, dtype,
                                Left(deadline)));
}

absl::Status HierarchicalCommunicator::ReduceScatter(const void* in, void* out,
                                                     int64_t count, DType dtype,
                                                     ReduceOp op,
                                                     absl::Duration timeout) {
  const Watching watching(this);
  SHOAL_RETURN_IF_ERROR(TakeUnreported());
  if (count < 0)
    return absl::InvalidArgumentError(
        absl::StrCat("reduce_scatter: negative count ", count));
  const size_t block = count * DTypeSize(dtype);
  std::vector<uint8_t> all(block * world_);
  SHOAL_RETURN_IF_ERROR(
      AllReduce(in, all.data(), count * world_, dtype, op, timeout));
  if (block > 0) std::memmove(out, all.data() + rank_ * block, block);
  return absl::OkStatus();
}

absl::Status HierarchicalCommunicator::AllToAll(const void* in, void* out,
                                                int64_t count, DType dtype,
                                                absl::Duration timeout) {
  const Watching watching(this);
  SHOAL_RETURN_IF_ERROR(TakeUnreported());
  return Net(flat_->AllToAll(in, out, count, dtype, timeout));
}

absl::Status HierarchicalCommunicator::Send(const void* in, int64_t count,
                                            DType dtype, int peer,
                                            absl::Duration timeout) {
  const Watching watching(this);
  SHOAL_RETURN_IF_ERROR(TakeUnreported());
  if (peer >= 0 && peer < world_ && peer / local_size_ == node_) {
    return Shm(shm_->Send(in, count, dtype, peer % local_size_, timeout));
  }
  return Net(flat_->Send(in, count, dtype, peer, timeout));
}

absl::Status HierarchicalCommunicator::Recv(void* out, int64_t count,
                                            DType dtype, int peer,
                                            absl::Duration timeout) {
  const Watching watching(this);
  SHOAL_RETURN_IF_ERROR(TakeUnreported());
  if (peer >= 0 && peer < world_ && peer / local_size_ == node_) {
    return Shm(shm_->Recv(out, count, dtype, peer % local_size_, timeout));
  }
  return Net(flat_->Recv(out, count, dtype, peer, timeout));
}

absl::Status HierarchicalCommunicator::Barrier(absl::Duration timeout) {
  const Watching watching(this);
  SHOAL_RETURN_IF_ERROR(TakeUnreported());
  // Everyone on this node arrived; then every column: rank (n, k) passing
  // its column's barrier knows every node's shm barrier was entered.
  const absl::Time deadline = DeadlineFor(timeout);
  SHOAL_RETURN_IF_ERROR(Shm(shm_->Barrier(Left(deadline))));
  return Net(column_->Barrier(Left(deadline)));
}

}  // namespace shoal::collectives
