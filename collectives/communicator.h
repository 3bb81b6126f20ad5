// shoal::collectives::Communicator: collectives among the processes of a
// launched job — through shared memory for CPU buffers on one node, through
// NCCL for CUDA buffers — with one API.
//
//   auto job = shoal::launch::Init();
//   auto comm = shoal::collectives::Communicator::Create(**job);
//   (*comm)->AllReduce(grad, grad, n, shoal::DType::kF32,
//   shoal::collectives::ReduceOp::kSum);
//
// The backend follows where the buffer lives (host memory → shm, device memory
// → NCCL), or CallOptions::backend. Every op has a blocking form and an async
// form returning a Work to Wait() on or Test(). Every rank of the
// communicator must issue the same collectives in the same order.
//
// Failure: a rank that dies or stops participating makes every other rank's
// call fail with Unavailable or DeadlineExceeded within the timeout (default 5
// minutes; per communicator and per call) instead of hanging; NCCL errors and
// timeouts abort the NCCL communicator, and an NCCL communicator that could
// not be made (at the first CUDA-buffer call) is not tried again: every later
// CUDA-buffer call returns that error at once. Mismatched counts, dtypes or ops
// across ranks are reported as InvalidArgument by the shm backend. After a
// failure the communicator is unusable; create a new one.
#ifndef SHOAL_COLLECTIVES_COMMUNICATOR_H_
#define SHOAL_COLLECTIVES_COMMUNICATOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collectives/reduce_op.h"
#include "collectives/rendezvous.h"
#include "ipc/tensor_meta.h"
#include "launch/job.h"

namespace shoal::collectives {

// kAuto: by where the buffer lives — device memory → NCCL; host memory → shm
// on one node, hierarchical (shm within nodes, gloo between) across nodes.
// kGloo: host buffers through flat gloo among all ranks (for comparison; also
// SHOAL_COLLECTIVES_BACKEND=gloo).
enum class CollectiveBackend { kAuto, kShm, kNccl, kGloo };

struct CommunicatorOptions {
  // Names the communicator (unique within the job). Default "": "world", or
  // "group-<ranks>" for a group.
  std::string name;
  // Default limit for each call. Default 5 min.
  absl::Duration timeout = absl::Minutes(5);
  // Shared-memory chunk per rank. Default 512 KiB.
  uint64_t shm_slot_bytes = 512 << 10;
  // The CUDA device NCCL uses (an ordinal among this process's visible
  // devices). Default 0: under `shoal launch --nproc-per-node gpu` each
  // process sees just its own GPU.
  int cuda_device = 0;
};

struct CallOptions {
  // This call's limit. Default: the communicator's.
  std::optional<absl::Duration> timeout;
  // Default kAuto: by where `out` (or `in`) lives.
  CollectiveBackend backend = CollectiveBackend::kAuto;
  // NCCL only: the cudaStream_t to enqueue on (default: the communicator's).
  void* stream = nullptr;
};

namespace internal {
struct WorkState;
}

// A pending async collective.
class Work {
 public:
  Work() = default;
  // Waits up to `timeout` for it to finish; returns its status.
  // Errors: the collective's, or DeadlineExceeded if it is still running.
  absl::Status Wait(absl::Duration timeout = absl::InfiniteDuration());
  // Whether it has finished (then Wait returns at once).
  bool Test();

 private:
  friend class Communicator;
  explicit Work(std::shared_ptr<internal::WorkState> s)
      : state_(std::move(s)) {}
  std::shared_ptr<internal::WorkState> state_;
};

class Communicator {
 public:
  // All ranks of the job. Collective: every rank calls it.
  // Errors: as the backends' creation (DeadlineExceeded if a rank does not
  // come), InvalidArgument for bad options.
  static absl::StatusOr<std::unique_ptr<Communicator>> Create(
      launch::Job& job, CommunicatorOptions options = {});
  // An explicit group: `ranks` (job ranks, any order, no repeats) must include
  // this process; only the members call it, in the same order as any other
  // group creations they share.
  static absl::StatusOr<std::unique_ptr<Communicator>> CreateGroup(
      launch::Job& job, std::vector<int> ranks,
      CommunicatorOptions options = {});
  // `world` ranks that meet through `rendezvous` instead of a launched job's
  // key-value store (e.g. torch's c10d Store under torchrun). Collective:
  // every rank calls it with the same `job_id` (names the shared-memory
  // segment: letters, digits, '-', '_') and options.name (default "world").
  // The communicator keeps `rendezvous` for NCCL's bootstrap at the first
  // CUDA-buffer call. Each rank records its machine (host name and boot id)
  // through the rendezvous: on one machine host buffers take the shm
  // backend; across machines (each one a node, numbered in the order of its
  // first rank) the hierarchical backend (or flat gloo, where the machines
  // hold unequal blocks of consecutive ranks), listening on
  // GlooListenAddress().
  // Errors: InvalidArgument (bad rank/world/job id/options), DeadlineExceeded
  // (a rank did not come), Unavailable (gloo could not connect), the
  // rendezvous's errors.
  static absl::StatusOr<std::unique_ptr<Communicator>> CreateWithRendezvous(
      std::shared_ptr<Rendezvous> rendezvous, const std::string& job_id,
      int rank, int world, CommunicatorOptions options = {});
  // Finishes queued async work first.
  ~Communicator();

  int rank() const;  // within the communicator
  int size() const;
  // Job rank of a communicator rank.
  int job_rank(int rank) const;

  // `in == out` means in-place. Counts are elements (per rank for the
  // gather/scatter/all-to-all ops: out of AllGather and in of ReduceScatter
  // hold size() × count).
  absl::Status AllReduce(const void* in, void* out, int64_t count, DType dtype,
                         ReduceOp op, const CallOptions& call = {});
  absl::Status Broadcast(const void* in, void* out, int64_t count, DType dtype,
                         int root, const CallOptions& call = {});
  absl::Status Reduce(const void* in, void* out, int64_t count, DType dtype,
                      ReduceOp op, int root, const CallOptions& call = {});
  absl::Status AllGather(const void* in, void* out, int64_t count, DType dtype,
                         const CallOptions& call = {});
  absl::Status ReduceScatter(const void* in, void* out, int64_t count,
                             DType dtype, ReduceOp op,
                             const CallOptions& call = {});
  absl::Status AllToAll(const void* in, void* out, int64_t count, DType dtype,
                        const CallOptions& call = {});
  absl::Status Send(const void* in, int64_t count, DType dtype, int peer,
                    const CallOptions& call = {});
  absl::Status Recv(void* out, int64_t count, DType dtype, int peer,
                    const CallOptions& call = {});
  absl::Status Barrier(const CallOptions& call = {});

  // Async forms: return at once; the buffers must stay valid until the
  // Work finishes. Ops run in the order issued.
  absl::StatusOr<Work> AllReduceAsync(const void* in, void* out, int64_t count,
                                      DType dtype, ReduceOp op,
                                      const CallOptions& call = {});
  absl::StatusOr<Work> BroadcastAsync(const void* in, void* out, int64_t count,
                                      DType dtype, int root,
                                      const CallOptions& call = {});
  absl::StatusOr<Work> ReduceAsync(const void* in, void* out, int64_t count,
                                   DType dtype, ReduceOp op, int root,
                                   const CallOptions& call = {});
  absl::StatusOr<Work> AllGatherAsync(const void* in, void* out, int64_t count,
                                      DType dtype,
                                      const CallOptions& call = {});
  absl::StatusOr<Work> ReduceScatterAsync(const void* in, void* out,
                                          int64_t count, DType dtype,
                                          ReduceOp op,
                                          const CallOptions& call = {});
  absl::StatusOr<Work> AllToAllAsync(const void* in, void* out, int64_t count,
                                     DType dtype, const CallOptions& call = {});
  absl::StatusOr<Work> SendAsync(const void* in, int64_t count, DType dtype,
                                 int peer, const CallOptions& call = {});
  absl::StatusOr<Work> RecvAsync(void* out, int64_t count, DType dtype,
                                 int peer, const CallOptions& call = {});

  class Impl;

 private:
  explicit Communicator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace shoal::collectives

#endif  // SHOAL_COLLECTIVES_COMMUNICATOR_H_
