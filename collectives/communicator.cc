#include "collectives/communicator.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/mutex.h"
#include "base/status_macros.h"
#include "collectives/gloo_communicator.h"
#include "collectives/hierarchical_communicator.h"
#include "collectives/host_collectives.h"
#include "collectives/kv_rendezvous.h"
#include "collectives/nccl_communicator.h"
#include "collectives/shm_communicator.h"
#include "gpu/device_pointer.h"

namespace shoal::collectives {

namespace {

// The shm backend's tuning knobs, like NCCL's NCCL_* variables: every rank
// must see the same values (shoal launch passes its environment to all).
absl::Status ApplyTuningEnv(collectives::ShmCommOptions& o) {
  const std::pair<const char*, uint64_t*> knobs[] = {
      {"SHOAL_COLL_SLOT_BYTES", &o.slot_bytes},
      {"SHOAL_COLL_ONE_STEP_BYTES", &o.one_step_bytes},
      {"SHOAL_COLL_STREAM_BYTES", &o.stream_bytes},
      {"SHOAL_COLL_P2P_BYTES", &o.p2p_bytes},
  };
  for (const auto& [name, value] : knobs) {
    const char* text = std::getenv(name);
    if (text == nullptr || *text == '\0') continue;
    if (!absl::SimpleAtoi(text, value)) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, "=", text, ": expected a number of bytes"));
    }
  }
  const char* spin = std::getenv("SHOAL_COLL_SPIN_US");
  if (spin != nullptr && *spin != '\0') {
    int64_t us = 0;
    if (!absl::SimpleAtoi(spin, &us) || us < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "SHOAL_COLL_SPIN_US=", spin, ": expected microseconds (>= 0)"));
    }
    o.spin = absl::Microseconds(us);
  }
  return absl::OkStatus();
}

// This machine, as the ranks of a rendezvous compare it: the host name (the
// UTS namespace, for containers) and the boot id (the kernel).
std::string MachineId() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string boot;
  std::getline(in, boot);
  return absl::StrCat(host, "/", boot);
}

}  // namespace

namespace internal {

struct WorkState {
  Mutex mu;
  CondVar cv;
  bool done ABSL_GUARDED_BY(mu) = false;
  absl::Status status ABSL_GUARDED_BY(mu);
  // NCCL work finishes on the GPU: waiting means synchronising its stream.
  std::function<absl::Status(absl::Duration)> wait_device;
  std::function<absl::StatusOr<bool>()> test_device;

  void Finish(absl::Status s) ABSL_LOCKS_EXCLUDED(mu) {
    MutexLock lock(&mu);
    done = true;
    status = std::move(s);
    cv.SignalAll();
  }
};

}  // namespace internal

absl::Status Work::Wait(absl::Duration timeout) {
  if (state_ == nullptr) return absl::FailedPreconditionError("an empty Work");
  if (state_->wait_device) return state_->wait_device(timeout);
  MutexLock lock(&state_->mu);
  const absl::Time deadline = timeout == absl::InfiniteDuration()
                                  ? absl::InfiniteFuture()
                                  : absl::Now() + timeout;
  while (!state_->done) {
    if (deadline == absl::InfiniteFuture()) {
      state_->cv.Wait(&state_->mu);
    } else if (state_->cv.WaitWithDeadline(&state_->mu, deadline) &&
               !state_->done) {
      return absl::DeadlineExceededError("the collective has not finished");
    }
  }
  return state_->status;
}

bool Work::Test() {
  if (state_ == nullptr) return true;
  if (state_->test_device) {
    absl::StatusOr<bool> done = state_->test_device();
    return !done.ok() || *done;
  }
  MutexLock lock(&state_->mu);
  return state_->done;
}

class Communicator::Impl {
 public:
  // What one collective does on each backend.
  struct Op {
    // The buffer whose location picks the backend, and the op's other one
    // (null if it has none); the shm backend refuses either on a GPU.
    const void* locate = nullptr;
    const void* other = nullptr;
    // Host buffers: the shm, gloo or hierarchical backend.
    std::function<absl::Status(HostCollectives&, absl::Duration)> shm;
    std::function<absl::Status(collectives::NcclCommunicator&, void*)> nccl;
    // Which shm lane runs it: 0 for collectives, kSendLane/kRecvLane + 2 ×
    // peer for point-to-point, so that a posted send and a posted receive
    // progress together (a ring exchange of big messages cannot deadlock).
    int lane = 0;
  };
  static constexpr int kSendLane = 1, kRecvLane = 2;

  // Exactly one of `job` and `rendezvous` is set: a launched job's
  // communicator, or one made through a Rendezvous.
  Impl(launch::Job* job, std::shared_ptr<Rendezvous> rendezvous,
       std::vector<int> ranks, int rank, CommunicatorOptions o)
      : job_(job),
        rendezvous_(std::move(rendezvous)),
        ranks_(std::move(ranks)),
        rank_(rank),
        o_(std::move(o)) {}
  ~Impl() {
    {
      MutexLock lock(&mu_);
      stop_ = true;
      cv_.SignalAll();
    }
    for (auto& [id, lane] : lanes_) {
      if (lane.worker.joinable()) lane.worker.join();
    }
  }

  absl::Status Init() {
    // The shm backend needs every member on this node.
    const std::string node_key =
        absl::StrCat("__shoal/coll/", o_.name, "/node/");
    SHOAL_RETURN_IF_ERROR(job_->kv().Set(absl::StrCat(node_key, rank_),
                                         absl::StrCat(job_->node_rank())));
    bool one_node = true;
    for (int r = 0; r < size(); ++r) {
      SHOAL_ASSIGN_OR_RETURN(
          std::string node,
          job_->kv().Get(absl::StrCat(node_key, r), o_.timeout));
      if (node != absl::StrCat(job_->node_rank())) one_node = false;
    }
    collectives::ShmCommOptions so;
    so.slot_bytes = o_.shm_slot_bytes;
    so.timeout = o_.timeout;
    SHOAL_RETURN_IF_ERROR(ApplyTuningEnv(so));
    SHOAL_ASSIGN_OR_RETURN(force_gloo_, ForceGlooFromEnv());
    collectives::KvRendezvous rendezvous(job_->kv());
    if (!one_node) {
      shm_error_ = absl::FailedPreconditionError(absl::StrCat(
          "communicator '", o_.name,
          "' spans nodes: the shm backend needs all its ranks on one node "
          "(host buffers go through the hierarchical or gloo backend)"));
      std::vector<int> node_of;
      for (int r = 0; r < size(); ++r) {
        SHOAL_ASSIGN_OR_RETURN(
            std::string node,
            job_->kv().Get(absl::StrCat(node_key, r), o_.timeout));
        int id = 0;
        if (!absl::SimpleAtoi(node, &id)) {
          return absl::InternalError(
              absl::StrCat("rank ", r, " recorded node '", node, "'"));
        }
        node_of.push_back(id);
      }
      return InitAcrossNodes(rendezvous, std::move(node_of), job_->job_id(),
                             so);
    }
    SHOAL_ASSIGN_OR_RETURN(
        shm_, collectives::ShmCommunicator::Create(rendezvous, job_->job_id(),
                                                   o_.name, rank_, size(), so));
    if (force_gloo_) SHOAL_RETURN_IF_ERROR(CreateFlatGloo(rendezvous));
    return absl::OkStatus();
  }

  // A communicator across nodes (`node_of`: any id per rank, equal for the
  // same node): flat gloo among all ranks, and over it the hierarchical
  // backend where the ranks form equal blocks by node.
  absl::Status InitAcrossNodes(Rendezvous& rendezvous, std::vector<int> node_of,
                               const std::string& job_id,
                               const collectives::ShmCommOptions& so) {
    HierarchicalOptions ho;
    ho.node_of = std::move(node_of);
    SHOAL_RETURN_IF_ERROR(CreateFlatGloo(rendezvous, &ho.node_of));
    if (!HierarchicalCommunicator::Fits(ho.node_of)) return absl::OkStatus();
    ho.job_ranks = ranks_;
    ho.job_id = job_id;
    ho.shm = so;
    ho.gloo = gloo_options_;
    SHOAL_ASSIGN_OR_RETURN(hierarchical_,
                           HierarchicalCommunicator::Create(
                               rendezvous, o_.name, rank_, gloo_.get(), ho));
    return absl::OkStatus();
  }

  // The flat gloo backend (all ranks in one gloo context). Collective. With
  // `node_of`, error messages name the node and ranks behind an address.
  absl::Status CreateFlatGloo(Rendezvous& rendezvous,
                              const std::vector<int>* node_of = nullptr) {
    gloo_options_.hostname = GlooListenAddress();
    gloo_options_.timeout = o_.timeout;
    const std::string addr_key =
        absl::StrCat("__shoal/coll/", o_.name, "/address/");
    SHOAL_RETURN_IF_ERROR(
        rendezvous.Set(absl::StrCat(addr_key, rank_), gloo_options_.hostname));
    std::map<std::string, std::vector<int>> ranks_at;
    std::map<std::string, int> node_at;
    for (int r = 0; r < size(); ++r) {
      SHOAL_ASSIGN_OR_RETURN(
          std::string address,
          rendezvous.Get(absl::StrCat(addr_key, r), o_.timeout));
      ranks_at[address].push_back(job_rank(r));
      if (node_of != nullptr) node_at[address] = (*node_of)[r];
    }
    for (const auto& [address, ranks] : ranks_at) {
      gloo_options_.peer_names[address] = absl::StrCat(
          node_at.count(address) ? absl::StrCat("node ", node_at[address], " ")
                                 : "",
          "(ranks ", absl::StrJoin(ranks, ", "), ")");
    }
    SHOAL_ASSIGN_OR_RETURN(
        gloo_, GlooCommunicator::Create(rendezvous, o_.name + ".flat", rank_,
                                        size(), gloo_options_));
    // Used directly (forced, or ranks that do not form equal blocks by
    // node), flat gloo watches its own connections; under the hierarchical
    // backend, that backend's watcher does.
    if (force_gloo_ || node_of == nullptr ||
        !HierarchicalCommunicator::Fits(*node_of)) {
      gloo_->StartWatching();
    }
    return absl::OkStatus();
  }

  // SHOAL_COLLECTIVES_BACKEND: "gloo" sends host buffers through flat gloo
  // (for comparison); "" or "auto" picks by placement.
  static absl::StatusOr<bool> ForceGlooFromEnv() {
    const char* text = std::getenv("SHOAL_COLLECTIVES_BACKEND");
    const std::string value = text == nullptr ? "" : text;
    if (value.empty() || value == "auto") return false;
    if (value == "gloo") return true;
    return absl::InvalidArgumentError(absl::StrCat(
        "SHOAL_COLLECTIVES_BACKEND=", value, ": expected gloo or auto"));
  }

  // Init for CreateWithRendezvous: every rank records its machine (host
  // name + boot id); all on one: the shm backend; else the machines are the
  // nodes (numbered in the order of their first rank) and host buffers take
  // the hierarchical backend (or flat gloo), as in a launched job.
  absl::Status InitWithRendezvous(const std::string& job_id) {
    Rendezvous& rendezvous = *rendezvous_;
    const std::string machine_key =
        absl::StrCat("__shoal/coll/", o_.name, "/machine/");
    SHOAL_RETURN_IF_ERROR(
        rendezvous.Set(absl::StrCat(machine_key, rank_), MachineId()));
    std::vector<std::string> machines;
    std::vector<int> node_of;
    for (int r = 0; r < size(); ++r) {
      SHOAL_ASSIGN_OR_RETURN(
          std::string theirs,
          rendezvous.Get(absl::StrCat(machine_key, r), o_.timeout));
      auto known = std::find(machines.begin(), machines.end(), theirs);
      node_of.push_back(static_cast<int>(known - machines.begin()));
      if (known == machines.end()) machines.push_back(std::move(theirs));
    }
    collectives::ShmCommOptions so;
    so.slot_bytes = o_.shm_slot_bytes;
    so.timeout = o_.timeout;
    SHOAL_RETURN_IF_ERROR(ApplyTuningEnv(so));
    SHOAL_ASSIGN_OR_RETURN(force_gloo_, ForceGlooFromEnv());
    if (machines.size() > 1) {
      shm_error_ = absl::FailedPreconditionError(absl::StrCat(
          "communicator '", o_.name, "' spans ", machines.size(),
          " machines: the shm backend needs all its ranks on one (host "
          "buffers go through the hierarchical or gloo backend)"));
      return InitAcrossNodes(rendezvous, std::move(node_of), job_id, so);
    }
    SHOAL_ASSIGN_OR_RETURN(
        shm_, collectives::ShmCommunicator::Create(rendezvous, job_id, o_.name,
                                                   rank_, size(), so));
    if (force_gloo_) SHOAL_RETURN_IF_ERROR(CreateFlatGloo(rendezvous));
    return absl::OkStatus();
  }

  int rank() const { return rank_; }
  int size() const { return static_cast<int>(ranks_.size()); }
  int job_rank(int r) const { return ranks_.at(r); }

  absl::StatusOr<Work> Run(Op op, const CallOptions& call, bool async)
      ABSL_LOCKS_EXCLUDED(mu_) {
    CollectiveBackend backend = call.backend;
    if (backend == CollectiveBackend::kAuto && op.locate != nullptr &&
        gpu::DeviceOfPointer(op.locate) >= 0) {
      backend = CollectiveBackend::kNccl;
    }
    const absl::Duration timeout = call.timeout.value_or(o_.timeout);
    if (backend == CollectiveBackend::kNccl)
      return RunNccl(op, call, timeout, async);
    HostCollectives* host = nullptr;
    SHOAL_ASSIGN_OR_RETURN(host, HostBackend(backend));
    // The host backends read and write with the CPU: a device pointer (asked
    // for explicitly, or missed by the automatic choice) is refused, never
    // touched.
    SHOAL_RETURN_IF_ERROR(gpu::CheckHostMemory("collective on a host backend",
                                               {op.locate, op.other}));
    auto state = std::make_shared<internal::WorkState>();
    {
      MutexLock lock(&mu_);
      Lane& lane = lanes_[op.lane];
      if (!async && lane.queue.empty() && !lane.busy) {
        // Nothing queued: run on the caller's thread (no hand-off latency).
        lane.busy = true;
        mu_.Unlock();
        absl::Status s = op.shm(*host, timeout);
        mu_.Lock();
        lane.busy = false;
        cv_.SignalAll();
        state->Finish(s);
        if (!s.ok()) return s;
        return Work(state);
      }
      if (!lane.worker.joinable()) {
        lane.worker = std::thread([this, &lane] { Worker(lane); });
      }
      lane.queue.push_back({std::move(op), state, timeout, host});
      cv_.SignalAll();
    }
    Work work(state);
    if (!async) SHOAL_RETURN_IF_ERROR(work.Wait());
    return work;
  }

 private:
  struct Queued {
    Op op;
    std::shared_ptr<internal::WorkState> state;
    absl::Duration timeout;
    HostCollectives* host = nullptr;
  };
  struct Lane {
    std::deque<Queued> queue;
    bool busy = false;
    std::thread worker;
  };

  // `lane` is one of lanes_: its fields are read and written under mu_.
  void Worker(Lane& lane) ABSL_LOCKS_EXCLUDED(mu_) {
    while (true) {
      Queued q;
      {
        MutexLock lock(&mu_);
        while (!stop_ && (lane.queue.empty() || lane.busy)) cv_.Wait(&mu_);
        if (lane.queue.empty()) return;  // stopping, and everything ran
        q = std::move(lane.queue.front());
        lane.queue.pop_front();
        lane.busy = true;
      }
      absl::Status s = q.op.shm(*q.host, q.timeout);
      {
        MutexLock lock(&mu_);
        lane.busy = false;
        cv_.SignalAll();
      }
      q.state->Finish(std::move(s));
    }
  }

  // The host backend for `backend` (kAuto: hierarchical across nodes, shm
  // within one, or flat gloo when SHOAL_COLLECTIVES_BACKEND=gloo). kGloo on a
  // one-node communicator creates flat gloo at its first use (collective:
  // every rank makes the same call).
  absl::StatusOr<HostCollectives*> HostBackend(CollectiveBackend backend)
      ABSL_LOCKS_EXCLUDED(mu_, backends_mu_) {
    MutexLock lock(&backends_mu_);
    if (backend == CollectiveBackend::kAuto && force_gloo_)
      backend = CollectiveBackend::kGloo;
    if (backend == CollectiveBackend::kGloo) {
      if (gloo_ == nullptr) {
        if (job_ == nullptr) {
          return absl::FailedPreconditionError(
              "the gloo backend needs a launched job's communicator");
        }
        collectives::KvRendezvous rendezvous(job_->kv());
        SHOAL_RETURN_IF_ERROR(CreateFlatGloo(rendezvous));
      }
      return gloo_.get();
    }
    if (backend == CollectiveBackend::kAuto && hierarchical_ != nullptr)
      return hierarchical_.get();
    if (backend == CollectiveBackend::kAuto && shm_ == nullptr &&
        gloo_ != nullptr) {
      return gloo_.get();  // across nodes in blocks of unequal size
    }
    if (shm_ == nullptr) return shm_error_;
    if (!shm_host_.has_value()) shm_host_.emplace(shm_.get());
    return &*shm_host_;
  }

  absl::StatusOr<Work> RunNccl(Op& op, const CallOptions& call,
                               absl::Duration timeout, bool async) {
    if (nccl_ == nullptr) {
      collectives::NcclOptions no;
      no.timeout = o_.timeout;
      std::optional<collectives::KvRendezvous> job_kv;
      Rendezvous* rendezvous = rendezvous_.get();
      if (job_ != nullptr) rendezvous = &job_kv.emplace(job_->kv());
      SHOAL_ASSIGN_OR_RETURN(
          nccl_, collectives::NcclCommunicator::Create(
                     *rendezvous, o_.name, rank_, size(), o_.cuda_device, no));
    }
    void* stream = call.stream;
    SHOAL_RETURN_IF_ERROR(op.nccl(*nccl_, stream));
    auto state = std::make_shared<internal::WorkState>();
    collectives::NcclCommunicator* nccl = nccl_.get();
    state->wait_device = [nccl, stream, timeout](absl::Duration t) {
      return nccl->Synchronize(stream, std::min(t, timeout));
    };
    state->test_device = [nccl, stream] { return nccl->Test(stream); };
    Work work(state);
    if (!async) SHOAL_RETURN_IF_ERROR(work.Wait());
    return work;
  }

  launch::Job* job_;
  std::shared_ptr<Rendezvous> rendezvous_;
  std::vector<int> ranks_;
  int rank_;
  CommunicatorOptions o_;
  std::unique_ptr<collectives::ShmCommunicator> shm_;
  absl::Status shm_error_;
  // Serialises HostBackend's lazy creations.
  Mutex backends_mu_;
  std::optional<ShmHostCollectives> shm_host_ ABSL_GUARDED_BY(backends_mu_);
  // Host buffers across nodes (or forced to gloo): flat gloo among all
  // ranks, and the hierarchical backend over it and the node's shm.
  GlooCommOptions gloo_options_;
  bool force_gloo_ = false;
  std::unique_ptr<GlooCommunicator> gloo_;
  std::unique_ptr<HierarchicalCommunicator> hierarchical_;
  std::unique_ptr<collectives::NcclCommunicator> nccl_;

  Mutex mu_;
  CondVar cv_;
  // std::map: a Lane's address stays put while its worker runs.
  std::map<int, Lane> lanes_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread worker_;
};

// ---- creation
// ----------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::Create(
    launch::Job& job, CommunicatorOptions options) {
  std::vector<int> ranks(job.world_size());
  for (int r = 0; r < job.world_size(); ++r) ranks[r] = r;
  if (options.name.empty()) options.name = "world";
  auto impl = std::make_unique<Impl>(&job, nullptr, std::move(ranks),
                                     job.rank(), std::move(options));
  SHOAL_RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<Communicator>(new Communicator(std::move(impl)));
}

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::CreateGroup(
    launch::Job& job, std::vector<int> ranks, CommunicatorOptions options) {
  std::set<int> unique(ranks.begin(), ranks.end());
  if (unique.size() != ranks.size() || ranks.empty()) {
    return absl::InvalidArgumentError(
        "a group's ranks must be distinct and not empty");
  }
  for (int r : ranks) {
    if (r < 0 || r >= job.world_size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", r, " is not in the job"));
    }
  }
  std::sort(ranks.begin(), ranks.end());
  auto me = std::find(ranks.begin(), ranks.end(), job.rank());
  if (me == ranks.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", job.rank(), " is not a member of the group it creates"));
  }
  if (options.name.empty()) {
    // The same members create their groups in the same order: a per-process
    // count of groups with these members names each one.
    static Mutex mu;
    static std::map<std::vector<int>, int>* counts ABSL_PT_GUARDED_BY(mu) =
        new std::map<std::vector<int>, int>;
    MutexLock lock(&mu);
    options.name = absl::StrCat("group-", absl::StrJoin(ranks, "."), "-",
                                (*counts)[ranks]++);
  }
  const int rank = static_cast<int>(me - ranks.begin());
  auto impl = std::make_unique<Impl>(&job, nullptr, std::move(ranks), rank,
                                     std::move(options));
  SHOAL_RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<Communicator>(new Communicator(std::move(impl)));
}

absl::StatusOr<std::unique_ptr<Communicator>>
Communicator::CreateWithRendezvous(std::shared_ptr<Rendezvous> rendezvous,
                                   const std::string& job_id, int rank,
                                   int world, CommunicatorOptions options) {
  if (rendezvous == nullptr) {
    return absl::InvalidArgumentError("no rendezvous");
  }
  if (world < 1 || rank < 0 || rank >= world) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " of a world of ", world));
  }
  if (job_id.empty() || !std::all_of(job_id.begin(), job_id.end(), [](char c) {
        return absl::ascii_isalnum(c) || c == '-' || c == '_';
      })) {
    return absl::InvalidArgumentError(absl::StrCat(
        "job id '", job_id, "': letters, digits, '-' and '_' only"));
  }
  std::vector<int> ranks(world);
  for (int r = 0; r < world; ++r) ranks[r] = r;
  if (options.name.empty()) options.name = "world";
  auto impl =
      std::make_unique<Impl>(nullptr, std::move(rendezvous), std::move(ranks),
                             rank, std::move(options));
  SHOAL_RETURN_IF_ERROR(impl->InitWithRendezvous(job_id));
  return std::unique_ptr<Communicator>(new Communicator(std::move(impl)));
}

Communicator::Communicator(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}
Communicator::~Communicator() = default;

int Communicator::rank() const { return impl_->rank(); }
int Communicator::size() const { return impl_->size(); }
int Communicator::job_rank(int rank) const { return impl_->job_rank(rank); }

// ---- ops
// ---------------------------------------------------------------------------

namespace {

using Op = Communicator::Impl::Op;

Op AllReduceOp(const void* in, void* out, int64_t count, DType dtype,
               ReduceOp op) {
  return Op{out, in,
            [=](HostCollectives& c, absl::Duration t) {
              return c.AllReduce(in, out, count, dtype, op, t);
            },
            [=](collectives::NcclCommunicator& c, void* s) {
              return c.AllReduce(in, out, count, dtype, op, s);
            }};
}

Op BroadcastOp(const void* in, void* out, int64_t count, DType dtype,
               int root) {
  return Op{out, in,
            [=](HostCollectives& c, absl::Duration t) {
              return c.Broadcast(in, out, count, dtype, root, t);
            },
            [=](collectives::NcclCommunicator& c, void* s) {
              return c.Broadcast(in, out, count, dtype, root, s);
            }};
}

Op ReduceOpFor(const void* in, void* out, int64_t count, DType dtype,
               ReduceOp op, int root) {
  return Op{in, out,
            [=](HostCollectives& c, absl::Duration t) {
              return c.Reduce(in, out, count, dtype, op, root, t);
            },
            [=](collectives::NcclCommunicator& c, void* s) {
              return c.Reduce(in, out, count, dtype, op, root, s);
            }};
}

Op AllGatherOp(const void* in, void* out, int64_t count, DType dtype) {
  return Op{out, in,
            [=](HostCollectives& c, absl::Duration t) {
              return c.AllGather(in, out, count, dtype, t);
            },
            [=](collectives::NcclCommunicator& c, void* s) {
              return c.AllGather(in, out, count, dtype, s);
            }};
}

Op ReduceScatterOp(const void* in, void* out, int64_t count, DType dtype,
                   ReduceOp op) {
  return Op{out, in,
            [=](HostCollectives& c, absl::Duration t) {
              return c.ReduceScatter(in, out, count, dtype, op, t);
            },
            [=](collectives::NcclCommunicator& c, void* s) {
              return c.ReduceScatter(in, out, count, dtype, op, s);
            }};
}

Op AllToAllOp(const void* in, void* out, int64_t count, DType dtype) {
  return Op{out, in,
            [=](HostCollectives& c, absl::Duration t) {
              return c.AllToAll(in, out, count, dtype, t);
            },
            [=](collectives::NcclCommunicator& c, void* s) {
              return c.AllToAll(in, out, count, dtype, s);
            }};
}

Op SendOp(const void* in, int64_t count, DType dtype, int peer) {
  return Op{in, nullptr,
            [=](HostCollectives& c, absl::Duration t) {
              return c.Send(in, count, dtype, peer, t);
            },
            [=](collectives::NcclCommunicator& c, void* s) {
              return c.Send(in, count, dtype, peer, s);
            },
            Communicator::Impl::kSendLane + 2 * peer};
}

Op RecvOp(void* out, int64_t count, DType dtype, int peer) {
  return Op{out, nullptr,
            [=](HostCollectives& c, absl::Duration t) {
              return c.Recv(out, count, dtype, peer, t);
            },
            [=](collectives::NcclCommunicator& c, void* s) {
              return c.Recv(out, count, dtype, peer, s);
            },
            Communicator::Impl::kRecvLane + 2 * peer};
}

}  // namespace

absl::Status Communicator::AllReduce(const void* in, void* out, int64_t count,
                                     DType dtype, ReduceOp op,
                                     const CallOptions& call) {
  return impl_->Run(AllReduceOp(in, out, count, dtype, op), call, false)
      .status();
}
absl::Status Communicator::Broadcast(const void* in, void* out, int64_t count,
                                     DType dtype, int root,
                                     const CallOptions& call) {
  return impl_->Run(BroadcastOp(in, out, count, dtype, root), call, false)
      .status();
}
absl::Status Communicator::Reduce(const void* in, void* out, int64_t count,
                                  DType dtype, ReduceOp op, int root,
                                  const CallOptions& call) {
  return impl_->Run(ReduceOpFor(in, out, count, dtype, op, root), call, false)
      .status();
}
absl::Status Communicator::AllGather(const void* in, void* out, int64_t count,
                                     DType dtype, const CallOptions& call) {
  return impl_->Run(AllGatherOp(in, out, count, dtype), call, false).status();
}
absl::Status Communicator::ReduceScatter(const void* in, void* out,
                                         int64_t count, DType dtype,
                                         ReduceOp op, const CallOptions& call) {
  return impl_->Run(ReduceScatterOp(in, out, count, dtype, op), call, false)
      .status();
}
absl::Status Communicator::AllToAll(const void* in, void* out, int64_t count,
                                    DType dtype, const CallOptions& call) {
  return impl_->Run(AllToAllOp(in, out, count, dtype), call, false).status();
}
absl::Status Communicator::Send(const void* in, int64_t count, DType dtype,
                                int peer, const CallOptions& call) {
  return impl_->Run(SendOp(in, count, dtype, peer), call, false).status();
}
absl::Status Communicator::Recv(void* out, int64_t count, DType dtype, int peer,
                                const CallOptions& call) {
  return impl_->Run(RecvOp(out, count, dtype, peer), call, false).status();
}
absl::Status Communicator::Barrier(const CallOptions& call) {
  // No buffer: kAuto means the host backend (Run's choice for null).
  const CallOptions& c = call;
  Op op{nullptr, nullptr,
        [](HostCollectives& comm, absl::Duration t) { return comm.Barrier(t); },
        [](collectives::NcclCommunicator& comm, void* s) {
          // A barrier on NCCL: an all_reduce of nothing, synchronised.
          return comm.AllReduce(nullptr, nullptr, 0, DType::kF32,
                                ReduceOp::kSum, s);
        }};
  return impl_->Run(std::move(op), c, false).status();
}

absl::StatusOr<Work> Communicator::AllReduceAsync(const void* in, void* out,
                                                  int64_t count, DType dtype,
                                                  ReduceOp op,
                                                  const CallOptions& call) {
  return impl_->Run(AllReduceOp(in, out, count, dtype, op), call, true);
}
absl::StatusOr<Work> Communicator::BroadcastAsync(const void* in, void* out,
                                                  int64_t count, DType dtype,
                                                  int root,
                                                  const CallOptions& call) {
  return impl_->Run(BroadcastOp(in, out, count, dtype, root), call, true);
}
absl::StatusOr<Work> Communicator::ReduceAsync(const void* in, void* out,
                                               int64_t count, DType dtype,
                                               ReduceOp op, int root,
                                               const CallOptions& call) {
  return impl_->Run(ReduceOpFor(in, out, count, dtype, op, root), call, true);
}
absl::StatusOr<Work> Communicator::AllGatherAsync(const void* in, void* out,
                                                  int64_t count, DType dtype,
                                                  const CallOptions& call) {
  return impl_->Run(AllGatherOp(in, out, count, dtype), call, true);
}
absl::StatusOr<Work> Communicator::ReduceScatterAsync(const void* in, void* out,
                                                      int64_t count,
                                                      DType dtype, ReduceOp op,
                                                      const CallOptions& call) {
  return impl_->Run(ReduceScatterOp(in, out, count, dtype, op), call, true);
}
absl::StatusOr<Work> Communicator::AllToAllAsync(const void* in, void* out,
                                                 int64_t count, DType dtype,
                                                 const CallOptions& call) {
  return impl_->Run(AllToAllOp(in, out, count, dtype), call, true);
}
absl::StatusOr<Work> Communicator::SendAsync(const void* in, int64_t count,
                                             DType dtype, int peer,
                                             const CallOptions& call) {
  return impl_->Run(SendOp(in, count, dtype, peer), call, true);
}
absl::StatusOr<Work> Communicator::RecvAsync(void* out, int64_t count,
                                             DType dtype, int peer,
                                             const CallOptions& call) {
  return impl_->Run(RecvOp(out, count, dtype, peer), call, true);
}

}  // namespace shoal::collectives
