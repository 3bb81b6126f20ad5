// HierarchicalCommunicator: collectives on host buffers across nodes — shared
// memory within each node (ShmCommunicator), gloo over TCP between nodes
// (GlooCommunicator), so that only the bytes that must cross the network do.
//
// Shape: the communicator's ranks form N nodes of L ranks each, in blocks
// (ranks n·L … n·L+L−1 on node n: what `shoal launch` gives). Local rank k of
// every node belongs to "column" k, a gloo communicator of N ranks. Large
// all_reduce:
//   1. reduce_scatter within the node (shm): local rank k holds the node's
//      sum of slice k (1/L of the buffer);
//   2. all_reduce of slice k within column k (between nodes: on 2 nodes the
//      sync-mode exchange, else gloo's ring): all L local ranks use the
//      network at once, each with 1/L of the bytes;
//   3. all_gather within the node (shm).
// Small all_reduce (≤ small_bytes): shm reduce to the node leader (local
// rank 0), one exchange among the leaders (each sends its node's sum to the
// other leaders at once and reduces them in node order), shm broadcast.
// Broadcast and reduce go through the root's column and the nodes' shm;
// all_gather is a node all_gather then a column all_gather of node blocks;
// reduce_scatter is an all_reduce of the whole input; all_to_all, and
// send/recv to another node, use a flat gloo communicator of all ranks
// (send/recv within the node, shm). kAvg reduces as a sum everywhere and
// divides once at the end, so every dtype gives the shm backend's results.
//
// Failure: a failure in any part (a rank died on this node, a peer's
// connection closed, a timeout, a mismatch) aborts all three parts: this
// node's shm ranks get its reason, and closing the gloo connections makes the
// ranks on other nodes that wait on this one fail at once (naming this node),
// so every rank fails within the timeout. A rank blocked in a step between
// nodes learns of its node's failures from a watcher thread that, while a
// call runs, checks the node's ranks every few milliseconds and aborts the
// gloo parts (gloo alone may leave it waiting until its timeout). Shm errors
// name the job ranks behind the node's local ranks. After a failure,
// FailedPrecondition.
//
// Thread safety: one collective at a time; Send and Recv may run beside it
// on other threads.
#ifndef SHOAL_COLLECTIVES_HIERARCHICAL_HIERARCHICAL_COMMUNICATOR_H_
#define SHOAL_COLLECTIVES_HIERARCHICAL_HIERARCHICAL_COMMUNICATOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/mutex.h"
#include "collectives/gloo/gloo_communicator.h"
#include "collectives/host_collectives.h"
#include "collectives/phase_times.h"
#include "collectives/rendezvous.h"
#include "collectives/shm/shm_communicator.h"

namespace shoal::collectives {

struct HierarchicalOptions {
  // Which node each rank is on (any ids; equal means the same machine).
  std::vector<int> node_of;
  // Job ranks behind the communicator's ranks, for messages. Default: equal.
  std::vector<int> job_ranks;
  // The job id (names the shm segments).
  std::string job_id;
  ShmCommOptions shm;
  // The column communicators' options (hostname, timeout, peer names).
  GlooCommOptions gloo;
  // All_reduces up to this many bytes take the small path (below), whose
  // step between nodes is one exchange (GlooCommunicator::ExchangeAllReduce)
  // instead of a ring. 0 (default): 64 KiB / (nodes − 1) — each leader
  // sends the whole buffer to every other node, so the bound shrinks with
  // more nodes; on 2 nodes, from 256 KiB the columns with their sync-mode
  // exchange (exchange_bytes) are faster than the leaders' exchange
  // (docs/BENCHMARKS.md, W3 across nodes). SHOAL_COLL_HIER_SMALL_BYTES sets
  // it.
  uint64_t small_bytes = 0;
  // The small path: true (default): shm reduce to local rank 0, one
  // exchange among the node leaders only, shm broadcast; false: a one-step
  // shm all_reduce, then every column exchanges the node sums. The columns
  // take one latency fewer but put every rank (and its gloo thread) on the
  // network at once, which costs more where ranks share few cores
  // (docs/BENCHMARKS.md, W3 across nodes). SHOAL_COLL_HIER_SMALL=columns
  // clears it, =leaders sets it.
  bool small_through_leaders = true;
  // Large all_reduce through the node leaders only (shm reduce to local
  // rank 0, gloo among the leaders, shm broadcast) instead of every column:
  // the alternative to the default (docs/collectives.md).
  // Default false; SHOAL_COLL_HIER_LEADERS=1 sets it.
  bool leaders_only = false;
  // On 2 nodes, larger all_reduces up to this many bytes take the columns'
  // step between nodes as the sync-mode exchange (each column rank sends its
  // slice to its peer and reduces both, a chunk at a time, on its own
  // thread) instead of gloo's ring through gloo's event-loop thread: on 2
  // nodes both move the same bytes. Default: no bound: with the sync
  // sockets' buffers sized (GlooCommunicator::SizeSyncSockets) the exchange
  // is faster than the ring at every size (docs/BENCHMARKS.md, W3 across
  // nodes). SHOAL_COLL_HIER_EXCHANGE_BYTES sets it (0: always the ring);
  // without the sync mode (SHOAL_COLL_HIER_SYNC=0) it is at most 2 MiB.
  uint64_t exchange_bytes = ~uint64_t{0};
  // On 2 nodes with the sync exchange, the columns' path as a pipeline of
  // pieces (PipelinedColumns): the bytes of one rank's part of a piece, at
  // most GlooCommunicator::kSyncChunkBytes; 0: the three phases one after
  // the other over the whole buffer. 32 KiB is the fastest of 16/32/64/128
  // KiB at 256 KiB-4 MiB across 2 x 2 ranks (docs/collectives.md).
  // SHOAL_COLL_HIER_PIECE_BYTES sets it.
  uint64_t pipeline_piece_bytes = 32 << 10;
};

class HierarchicalCommunicator : public HostCollectives {
 public:
  // Whether `node_of` has the shape above (N ≥ 1 blocks of one size L).
  static bool Fits(const std::vector<int>& node_of);

  // Collective over every rank of `options.node_of`: creates this node's shm
  // communicator ("<name>.node<id>") and this rank's column
  // ("<name>.col<k>"), meeting through `rendezvous` (used only during the
  // call). `flat` (all ranks, over gloo; not owned, must outlive this) runs
  // all_to_all and send/recv between nodes.
  // Errors: InvalidArgument (a shape Fits refuses, a bad rank), the parts'
  // creation errors.
  static absl::StatusOr<std::unique_ptr<HierarchicalCommunicator>> Create(
      Rendezvous& rendezvous, const std::string& name, int rank,
      GlooCommunicator* flat, const HierarchicalOptions& options);
  ~HierarchicalCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return world_; }

  absl::Status AllReduce(const void* in, void* out, int64_t count, DType dtype,
                         ReduceOp op, absl::Duration timeout) override;
  absl::Status Broadcast(const void* in, void* out, int64_t count, DType dtype,
                         int root, absl::Duration timeout) override;
  absl::Status Reduce(const void* in, void* out, int64_t count, DType dtype,
                      ReduceOp op, int root, absl::Duration timeout) override;
  absl::Status AllGather(const void* in, void* out, int64_t count, DType dtype,
                         absl::Duration timeout) override;
  absl::Status ReduceScatter(const void* in, void* out, int64_t count,
                             DType dtype, ReduceOp op,
                             absl::Duration timeout) override;
  absl::Status AllToAll(const void* in, void* out, int64_t count, DType dtype,
                        absl::Duration timeout) override;
  absl::Status Send(const void* in, int64_t count, DType dtype, int peer,
                    absl::Duration timeout) override;
  absl::Status Recv(void* out, int64_t count, DType dtype, int peer,
                    absl::Duration timeout) override;
  absl::Status Barrier(absl::Duration timeout) override;

 private:
  HierarchicalCommunicator(int rank, const HierarchicalOptions& options,
                           GlooCommunicator* flat);

  class Watching;
  // The watcher thread's body: while calls run (calls_ > 0), polls the
  // node's ranks (ShmCommunicator::PeerFailed); a failure fails this
  // communicator, which wakes a call blocked in gloo.
  void Watch() ABSL_LOCKS_EXCLUDED(watch_mu_);
  // Aborts every part with `s` (the shm part's messages first get the job
  // ranks of this node); returns the status to report.
  absl::Status Fail(absl::Status s, bool from_shm);
  // `s` from this node's shm part, naming the job ranks behind its ranks.
  absl::Status WithinNode(absl::Status s) const;
  // Runs one step; a failure fails the whole communicator.
  absl::Status Shm(absl::Status s) {
    return s.ok() ? s : Report(Fail(s, true));
  }
  absl::Status Net(absl::Status s) {
    return s.ok() ? s : Report(Fail(s, false));
  }
  // A failure a call returns: the watcher's need not be returned again.
  absl::Status Report(absl::Status s) ABSL_LOCKS_EXCLUDED(watch_mu_);
  // The failure the watcher found that no call returned yet (then once).
  absl::Status TakeUnreported() ABSL_LOCKS_EXCLUDED(watch_mu_);
  // The rest of a call's time, at least 1 ms.
  static absl::Duration Left(absl::Time deadline);
  absl::Time DeadlineFor(absl::Duration timeout) const;
  // The columns' path on 2 nodes as a pipeline of pieces (AllReduce).
  absl::Status PipelinedColumns(const void* in, void* out, int64_t count,
                                DType dtype, ReduceOp combine,
                                absl::Time deadline);
  // The reduction every step runs (kAvg: kSum, divided at the end).
  static ReduceOp Combine(ReduceOp op);

  const int rank_;
  const int world_;
  const HierarchicalOptions o_;
  int nodes_ = 1;       // N
  int local_size_ = 1;  // L
  int node_ = 0;        // this rank's node index (0..N-1)
  int local_ = 0;       // k
  std::unique_ptr<ShmCommunicator> shm_;
  std::unique_ptr<GlooCommunicator> column_;
  GlooCommunicator* flat_;

  Mutex watch_mu_;
  CondVar watch_cv_;
  int calls_ ABSL_GUARDED_BY(watch_mu_) = 0;
  // Calls started so far: the watcher's "the same call".
  uint64_t calls_started_ ABSL_GUARDED_BY(watch_mu_) = 0;
  bool stop_watching_ ABSL_GUARDED_BY(watch_mu_) = false;
  // The watcher waits for a call to start (not in its poll wait).
  bool watcher_idle_ ABSL_GUARDED_BY(watch_mu_) = false;
  bool reported_ ABSL_GUARDED_BY(watch_mu_) = false;
  absl::Status unreported_ ABSL_GUARDED_BY(watch_mu_);
  // The small path's phases (SHOAL_COLL_TRACE): the shm reduce to the
  // leader, the leaders' exchange (the others: nothing), the shm broadcast.
  PhaseTimes small_times_{
      "small_allreduce",
      {"call_start", "shm_reduce", "exchange", "shm_broadcast"}};
  // The columns' path (larger all_reduces): the shm reduce_scatter, the
  // column's step between nodes, the shm all_gather.
  PhaseTimes column_times_{
      "column_allreduce",
      {"call_start", "shm_reduce_scatter", "between_nodes", "shm_all_gather"}};
  std::thread watcher_;  // started last in Create, joined first
};

// The address this process should listen on for gloo: SHOAL_GLOO_HOSTNAME if
// set, else the local address of the route toward MASTER_ADDR (the head node,
// as `shoal launch` sets it from --coordinator: an address or a host name,
// IPv4 or IPv6), else 127.0.0.1; never the wildcard address unless
// SHOAL_GLOO_HOSTNAME says so. Errors: none (falls back).
std::string GlooListenAddress();

}  // namespace shoal::collectives

#endif  // SHOAL_COLLECTIVES_HIERARCHICAL_HIERARCHICAL_COMMUNICATOR_H_
