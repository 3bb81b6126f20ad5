// Communicator::Impl: what stands behind a Communicator — its backends,
// created in communicator_backends.cc (which ranks share a node, the shm,
// flat gloo and hierarchical backends, NCCL's lazy creation), and the
// dispatch of each call to one of them on the caller's thread or a lane's
// worker thread (communicator.cc). Private to the communicator library.
#ifndef SHOAL_COLLECTIVES_COMMUNICATOR_IMPL_H_
#define SHOAL_COLLECTIVES_COMMUNICATOR_IMPL_H_

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/mutex.h"
#include "collectives/communicator.h"
#include "collectives/gloo/gloo_communicator.h"
#include "collectives/hierarchical/hierarchical_communicator.h"
#include "collectives/host_collectives.h"
#include "collectives/nccl/nccl_communicator.h"
#include "collectives/rendezvous.h"
#include "collectives/shm/shm_communicator.h"
#include "launch/job.h"

namespace shoal::collectives {

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
    // For the timeline: the op's name and the bytes of its input buffer.
    const char* name = "collective";
    uint64_t bytes = 0;
    const char* backend_name = "shm";  // set by Run
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
  ~Impl();

  // Init for Create and CreateGroup (a launched job's ranks): the shm
  // backend on one node, else the backends across nodes.
  absl::Status Init();

  // A communicator across nodes (`node_of`: any id per rank, equal for the
  // same node): flat gloo among all ranks, and over it the hierarchical
  // backend where the ranks form equal blocks by node.
  absl::Status InitAcrossNodes(Rendezvous& rendezvous, std::vector<int> node_of,
                               const std::string& job_id,
                               const collectives::ShmCommOptions& so);

  // The flat gloo backend (all ranks in one gloo context). Collective. With
  // `node_of`, error messages name the node and ranks behind an address.
  absl::Status CreateFlatGloo(Rendezvous& rendezvous,
                              const std::vector<int>* node_of = nullptr);

  // SHOAL_COLLECTIVES_BACKEND: "gloo" sends host buffers through flat gloo
  // (for comparison); "" or "auto" picks by placement.
  static absl::StatusOr<bool> ForceGlooFromEnv();

  // Init for CreateWithRendezvous: every rank records its machine (host
  // name + boot id); all on one: the shm backend; else the machines are the
  // nodes (numbered in the order of their first rank) and host buffers take
  // the hierarchical backend (or flat gloo), as in a launched job.
  absl::Status InitWithRendezvous(const std::string& job_id);

  int rank() const { return rank_; }
  int size() const { return static_cast<int>(ranks_.size()); }
  int job_rank(int r) const { return ranks_.at(r); }

  absl::StatusOr<Work> Run(Op op, const CallOptions& call, bool async)
      ABSL_LOCKS_EXCLUDED(mu_);

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
  void Worker(Lane& lane) ABSL_LOCKS_EXCLUDED(mu_);

  // The host backend for `backend` (kAuto: hierarchical across nodes, shm
  // within one, or flat gloo when SHOAL_COLLECTIVES_BACKEND=gloo). kGloo on a
  // one-node communicator creates flat gloo at its first use (collective:
  // every rank makes the same call).
  // `name` (when not null) gets the backend's name for the timeline.
  absl::StatusOr<HostCollectives*> HostBackend(CollectiveBackend backend,
                                               const char** name = nullptr)
      ABSL_LOCKS_EXCLUDED(mu_, backends_mu_);

  absl::StatusOr<Work> RunNccl(Op& op, const CallOptions& call,
                               absl::Duration timeout, bool async);

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
  // Why the NCCL communicator could not be made, once it could not: later
  // device calls return it instead of making it again under the same name,
  // whose rendezvous key may still hold the failed attempt's id (ranks that
  // read different ids would wait for each other until the timeout).
  absl::Status nccl_failed_;

  Mutex mu_;
  CondVar cv_;
  // std::map: a Lane's address stays put while its worker runs.
  std::map<int, Lane> lanes_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread worker_;
};

}  // namespace shoal::collectives

#endif  // SHOAL_COLLECTIVES_COMMUNICATOR_IMPL_H_
