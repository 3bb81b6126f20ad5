// ShmCommunicator: collectives among the processes of one node through a
// shared-memory segment — no byte goes through a socket.
//
// Every rank copies its data into its slot of the segment, the ranks meet at
// a step counter (spinning briefly, then sleeping on a futex), and each reads
// the others' slots directly: all_reduce is a reduce-scatter (each rank
// reduces its slice of every slot, with vectorised kernels) followed by an
// all-gather, in chunks of the slot size, with two buffers used alternately so
// that a chunk can be written while the previous one is still being read.
// Small all_reduces take one step: each rank reduces everything itself.
//
// All ranks must call the same collectives in the same order with matching
// counts and dtypes; a mismatch is detected and reported (InvalidArgument) by
// every rank. No rank hangs when another goes wrong: a rank that dies makes
// the others' calls fail with Unavailable; one that stalls past the timeout,
// with DeadlineExceeded on every waiting rank (naming the stalled rank); a
// rank that fails otherwise passes its error's code on to the others. The
// communicator is unusable afterwards.
// Not thread-safe: one call at a time per communicator.
#ifndef SHOAL_COLLECTIVES_SHM_SHM_COMMUNICATOR_H_
#define SHOAL_COLLECTIVES_SHM_SHM_COMMUNICATOR_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collectives/reduce_op.h"
#include "collectives/rendezvous.h"
#include "ipc/tensor_meta.h"

namespace shoal::collectives {

struct ShmCommOptions {
  // Bytes per rank per buffer (two buffers per rank). Larger transfers are
  // pipelined in chunks of this size. Default 512 KiB (stays in cache).
  uint64_t slot_bytes = 512 << 10;
  // Point-to-point chunk (send/recv), per ordered pair, two buffers. Default
  // 256 KiB.
  uint64_t p2p_bytes = 256 << 10;
  // Longest a call waits for the other ranks. Default 5 min.
  absl::Duration timeout = absl::Minutes(5);
  // How long a waiting rank spins (yielding the CPU) before it sleeps.
  // Default 200 µs.
  absl::Duration spin = absl::Microseconds(200);
  // How many times a waiting rank polls with the CPU's pause hint before it
  // starts yielding (4000: ~100-200 µs, so a peer on another core is caught
  // without a system call). Where ranks outnumber cores, a pause loop keeps
  // the very rank it waits for off the CPU: there fewer (down to 0: yield
  // at once, as Open MPI's mpi_yield_when_idle) is faster.
  int spin_pauses = 4000;
  // All_reduces up to this many bytes take the one-step path (one sync,
  // every rank reduces everything); larger ones reduce-scatter + all-gather
  // (two syncs, each rank reduces 1/n). Measured crossover here: 16-32 KiB.
  // Default 16 KiB.
  uint64_t one_step_bytes = 16 << 10;
  // Out-of-place reduction results at least this big are written with
  // non-temporal stores (they would not stay cached anyway). Default 16 MiB.
  uint64_t stream_bytes = 16 << 20;
};

class ShmCommunicator {
 public:
  // Collective over `world` ranks (all on this node) of the job `job_id`:
  // rank 0 creates the segment and publishes its name through `rendezvous`
  // under "__shoal/coll/<name>"; the others open it; once all have (a
  // rendezvous barrier), rank 0 unlinks it (it lives on while mapped, and a
  // crash leaves nothing behind) and deletes the key. `rendezvous` is used
  // only during the call. Ranks may be processes (KvRendezvous) or threads
  // of one process (InMemoryRendezvous, each thread its own rank).
  // Errors: InvalidArgument (bad rank/world/options), DeadlineExceeded (a rank
  // did not come), segment errors, the rendezvous's errors.
  static absl::StatusOr<std::unique_ptr<ShmCommunicator>> Create(
      Rendezvous& rendezvous, const std::string& job_id,
      const std::string& name, int rank, int world,
      const ShmCommOptions& options = {});
  ~ShmCommunicator();

  int rank() const { return rank_; }
  int size() const { return world_; }

  // in == out means in-place. Counts are elements. Reductions need a
  // reducible dtype (f16, bf16, f32, f64, i32, i64); the rest move bytes of
  // any dtype. A `timeout` of ZeroDuration means the communicator's default.
  absl::Status AllReduce(const void* in, void* out, int64_t count, DType dtype,
                         ReduceOp op,
                         absl::Duration timeout = absl::ZeroDuration());
  // `in` matters on the root only; every rank's `out` receives it.
  absl::Status Broadcast(const void* in, void* out, int64_t count, DType dtype,
                         int root,
                         absl::Duration timeout = absl::ZeroDuration());
  // The reduction arrives in the root's `out` only.
  absl::Status Reduce(const void* in, void* out, int64_t count, DType dtype,
                      ReduceOp op, int root,
                      absl::Duration timeout = absl::ZeroDuration());
  // out (world × count) = every rank's in (count), in rank order.
  absl::Status AllGather(const void* in, void* out, int64_t count, DType dtype,
                         absl::Duration timeout = absl::ZeroDuration());
  // in (world × count): block k goes, reduced over ranks, to rank k's out.
  absl::Status ReduceScatter(const void* in, void* out, int64_t count,
                             DType dtype, ReduceOp op,
                             absl::Duration timeout = absl::ZeroDuration());
  // in and out (world × count): block k of rank r's in → block r of rank k's
  // out.
  absl::Status AllToAll(const void* in, void* out, int64_t count, DType dtype,
                        absl::Duration timeout = absl::ZeroDuration());
  // Point to point: a Send must be matched by the peer's Recv of the same size.
  absl::Status Send(const void* in, int64_t count, DType dtype, int peer,
                    absl::Duration timeout = absl::ZeroDuration());
  absl::Status Recv(void* out, int64_t count, DType dtype, int peer,
                    absl::Duration timeout = absl::ZeroDuration());
  absl::Status Barrier(absl::Duration timeout = absl::ZeroDuration());

  // Fails the communicator with `why` (the first failure wins) as a failed
  // call would: every rank waiting in a call, or calling later, gets its
  // code and reason. For a caller that failed elsewhere (the hierarchical
  // backend, between nodes) and must not leave its node's ranks waiting.
  // Returns the first failure. Thread-safe.
  absl::Status Abort(absl::Status why);
  // What a waiting call would report about the other ranks, without
  // waiting: Unavailable naming a rank that died, or the code and reason of
  // one that failed its communicator; OK if none has. For a caller blocked
  // elsewhere (the hierarchical backend, in a step between nodes) that must
  // notice a failure on its node. Thread-safe; only reads the segment.
  absl::Status PeerFailed() const;

  class Impl;

 private:
  ShmCommunicator(std::unique_ptr<Impl> impl, int rank, int world);
  std::unique_ptr<Impl> impl_;
  int rank_;
  int world_;
};

}  // namespace shoal::collectives

#endif  // SHOAL_COLLECTIVES_SHM_SHM_COMMUNICATOR_H_
