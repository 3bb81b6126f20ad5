// NcclCommunicator: one rank of an NCCL communicator, the GPU backend of
// shoal's collectives.
//
// Lifecycle: Create (collective across `world` ranks) -> enqueue operations ->
// Synchronize / Test -> destroy. Every operation enqueues on a CUDA stream and
// returns at once; Synchronize waits with a deadline. An NCCL error or a
// timeout aborts the communicator (ncclCommAbort, so that no rank hangs in a
// collective forever); from then on every call returns FailedPrecondition.
//
// The communicator is created non-blocking (ncclConfig_t::blocking = 0):
// whenever NCCL answers ncclInProgress, the call polls ncclCommGetAsyncError
// until the operation is enqueued, an error arrives or the deadline passes.
//
// Threads: every method but the destructor may be called from any thread,
// at the same time as others (the torch backend's completer thread calls
// Synchronize and Test while the issuing thread enqueues). The NCCL calls on
// the communicator, an abort's included, are made under one lock, so no
// thread ever calls NCCL with a communicator another thread is using or has
// aborted: an enqueue in progress finishes (or fails) before another
// thread's abort frees NCCL's communicator, and every call after the abort
// fails with FailedPrecondition. Synchronize records an event of its own and
// waits for it without the lock, so waiting on one thread does not hold up
// enqueues on another, and no other call moves the point it waits for.
// Operations enqueued from several threads take the order in which they get
// the lock; a collective must still be issued in the same order on every
// rank, which is the callers' business. The destructor runs once no other
// thread uses the object.
// NCCL refuses two ranks on one GPU; `world` == 1 on one GPU is fine.
//
// In a build without CUDA every entry point returns FailedPrecondition("...
// shoal was built without CUDA ...") (gpu::BuiltWithoutCuda).
#ifndef SHOAL_COLLECTIVES_NCCL_NCCL_COMMUNICATOR_H_
#define SHOAL_COLLECTIVES_NCCL_NCCL_COMMUNICATOR_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collectives/reduce_op.h"
#include "collectives/rendezvous.h"
#include "ipc/tensor_meta.h"

namespace shoal::collectives {

struct NcclOptions {
  // Default limit of every call that waits: Create (the unique-id exchange and
  // the communicator's initialisation together), each operation's enqueue,
  // Synchronize, and the flush in the destructor. Default 5 minutes.
  absl::Duration timeout = absl::Minutes(5);
  // The KV key under which rank 0 publishes the ncclUniqueId is
  // key_prefix + comm_name. Default "__shoal/nccl/".
  std::string key_prefix = "__shoal/nccl/";
};

class NcclCommunicator {
 public:
  // Collective: every rank of the communicator calls it with the same
  // `comm_name` and `world`. Rank 0 creates the ncclUniqueId and publishes it
  // with rendezvous.Set(key_prefix + comm_name); the others Get it, waiting up
  // to options.timeout. Once rank 0's initialisation finished (which implies
  // every rank read the id) it deletes the key, as cleanup only: a rank that
  // finished earlier could still read a stale id, so give every communicator
  // of a job its own name (add a generation number when re-creating one).
  // With world == 1 the rendezvous is not touched at all (the id is made
  // locally).
  //
  // `device` is the CUDA device ordinal (as this process sees it); Create makes
  // it current on the calling thread (cudaSetDevice) and leaves it so. The
  // initialisation is polled until done or until options.timeout (counted from
  // the call) passed, and then aborted.
  //
  // Errors: InvalidArgument (rank/world/device out of range, an empty name, a
  // malformed id in
  // the rendezvous), FailedPrecondition (built without CUDA, no GPU visible),
  // DeadlineExceeded (the id did not arrive, or the initialisation did not
  // finish, in time), the rendezvous's errors, the CUDA or NCCL error.
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Create(
      Rendezvous& rendezvous, const std::string& comm_name, int rank, int world,
      int device, NcclOptions options = {});

  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  // A healthy communicator is finalised (pending operations flushed, waiting
  // up to options.timeout, then aborted) and destroyed; an aborted one only
  // releases its stream and event.
  ~NcclCommunicator();

  int rank() const { return rank_; }
  int size() const { return size_; }
  int device() const { return device_; }

  // The communicator's own stream (a cudaStream_t, non-blocking with respect
  // to the legacy default stream). Calls may pass another stream of the same
  // device instead.
  void* stream() const;

  // Collective operations. Each enqueues on `stream` (nullptr: stream()) and
  // returns once NCCL has enqueued it; the data moves later (Synchronize).
  // Pointers are device pointers on device(); in == out means in-place.
  // Counts are elements. DType must be f16, bf16, f32, f64, i32 or i64;
  // ReduceOp::kAvg is ncclAvg (integer division for integer types).
  //
  // Errors (all of them): InvalidArgument (a negative count, a null pointer
  // with a non-zero count, an unsupported DType or ReduceOp, root/peer out of
  // range: checked before NCCL is called), FailedPrecondition (aborted
  // before, or built without CUDA), Unavailable (an NCCL error: the
  // communicator is aborted), DeadlineExceeded (NCCL did not finish enqueueing
  // within options.timeout: aborted).

  // out[i] = op over ranks of in[i], on every rank; `count` elements.
  absl::Status AllReduce(const void* in, void* out, int64_t count, DType dtype,
                         ReduceOp op, void* stream = nullptr);
  // out = root's `in` on every rank (`in` is read on the root only).
  absl::Status Broadcast(const void* in, void* out, int64_t count, DType dtype,
                         int root, void* stream = nullptr);
  // Like AllReduce, but only the root's `out` receives the result.
  absl::Status Reduce(const void* in, void* out, int64_t count, DType dtype,
                      ReduceOp op, int root, void* stream = nullptr);
  // out (size() * count_per_rank elements) = the ranks' `in` in rank order.
  // In-place (NCCL's convention): in == out + rank() * count_per_rank.
  absl::Status AllGather(const void* in, void* out, int64_t count_per_rank,
                         DType dtype, void* stream = nullptr);
  // in has size() * count_per_rank elements; out = block rank() of the
  // reduction over ranks. In-place: out == in + rank() * count_per_rank.
  absl::Status ReduceScatter(const void* in, void* out, int64_t count_per_rank,
                             DType dtype, ReduceOp op, void* stream = nullptr);
  // Block r of `in` goes to rank r, block s of `out` comes from rank s (both
  // size() * count_per_rank elements). One NCCL group of send/recv pairs.
  // `in` and `out` must not overlap (in == out: InvalidArgument when
  // size() > 1).
  absl::Status AllToAll(const void* in, void* out, int64_t count_per_rank,
                        DType dtype, void* stream = nullptr);
  // Point-to-point; the peer must call the matching Recv/Send. A rank sending
  // to itself would block its stream (NCCL needs both halves in one group;
  // AllToAll does that).
  absl::Status Send(const void* buf, int64_t count, DType dtype, int peer,
                    void* stream = nullptr);
  absl::Status Recv(void* buf, int64_t count, DType dtype, int peer,
                    void* stream = nullptr);

  // Waits until everything enqueued on `stream` (nullptr: stream()) so far has
  // finished, polling the stream and ncclCommGetAsyncError every ~50 µs for up
  // to `timeout` (default: options.timeout). On an NCCL error or the timeout
  // it aborts the communicator, so that no rank hangs.
  // Errors: FailedPrecondition (aborted before, or built without CUDA),
  // Unavailable (an NCCL error), DeadlineExceeded (not finished in time), the
  // CUDA error (also aborts).
  absl::Status Synchronize(void* stream = nullptr,
                           std::optional<absl::Duration> timeout = {});

  // A non-blocking Synchronize: true when everything enqueued on `stream`
  // so far has finished. Errors: as Synchronize, less DeadlineExceeded.
  absl::StatusOr<bool> Test(void* stream = nullptr);

  // True once the communicator was aborted (by an error or a timeout).
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }

 private:
  struct Impl;  // CUDA/NCCL handles; defined by the .cc of the build.

  NcclCommunicator(int rank, int size, int device, NcclOptions options);
  // Synchronize's wait for its event (a cudaEvent_t) without the lock.
  absl::Status WaitForEvent(const char* what, void* event, absl::Time deadline,
                            absl::Duration limit);

  const int rank_;
  const int size_;
  const int device_;
  const NcclOptions options_;
  std::unique_ptr<Impl> impl_;
  std::atomic<bool> aborted_{false};
};

}  // namespace shoal::collectives

#endif  // SHOAL_COLLECTIVES_NCCL_NCCL_COMMUNICATOR_H_
