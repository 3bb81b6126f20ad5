// GlooCommunicator: collectives on host buffers between processes on any
// machines, over gloo's TCP transport (Debian's libgloo). The ranks meet
// through a Rendezvous (the job's key-value store): each publishes its
// listening addresses under "__shoal/gloo/<name>/", and gloo connects a full
// mesh of TCP pairs. Gloo runs the algorithms (ring all_reduce, ...); the
// reductions are shoal's kernels (reduce_kernels.h), so every reducible dtype
// (f16, bf16, f32, f64, i32, i64) and every ReduceOp give the results the shm
// backend gives.
//
// Failure: gloo reports a closed or reset connection, or a timeout, by an
// exception; every verb catches it and returns Unavailable (a peer's
// connection closed: it died, or gave up) or DeadlineExceeded, naming the
// peer's address and, where the caller gave `peer_names`, the rank and node
// behind it. The first failure aborts the communicator: its connections are
// closed at once, so peers blocked on this rank fail now rather than at their
// timeout. Later calls get FailedPrecondition carrying the first error.
//
// Thread safety: one collective at a time; Send and Recv may run on other
// threads beside it (they use their own slot).
#ifndef SHOAL_COLLECTIVES_GLOO_GLOO_COMMUNICATOR_H_
#define SHOAL_COLLECTIVES_GLOO_GLOO_COMMUNICATOR_H_

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/mutex.h"
#include "collectives/gloo/gloo_connections.h"
#include "collectives/host_collectives.h"
#include "collectives/phase_times.h"
#include "collectives/reduce_op.h"
#include "collectives/rendezvous.h"
#include "ipc/tensor_meta.h"

namespace gloo {
class Context;
namespace transport {
class Buffer;
class Device;
class UnboundBuffer;
}  // namespace transport
}  // namespace gloo

namespace shoal::collectives {

struct GlooCommOptions {
  // The address this rank listens on (an IP address or host name that the
  // other ranks can reach). Required.
  std::string hostname;
  // The largest all_reduce ExchangeAllReduce does in one exchange (it
  // stages world × this many bytes). Default 64 KiB.
  uint64_t exchange_bytes = 64 << 10;
  // ExchangeAllReduce goes through a second gloo context whose pairs are in
  // gloo's sync mode: the calling thread writes and reads the sockets
  // itself (gloo_exchange.cc), a chunk at a time. Costs one more connection
  // per peer; every rank must set it alike.
  bool sync_exchange = false;
  // Default limit for each call, and for the rendezvous. Default 5 min.
  absl::Duration timeout = absl::Minutes(5);
  // Names for error messages: a peer's address (as gloo prints it, without
  // the port) → who is there ("node 1 (ranks 2, 3)"). Optional.
  std::map<std::string, std::string> peer_names;
};

class GlooCommunicator : public HostCollectives {
 public:
  // Collective over `world` ranks: each publishes its address through
  // `rendezvous` (used only during the call) and connects to every other,
  // admitting only the other ranks (gloo_admission.h: a filter on each
  // listener, an owner check, per-pair tokens from the rendezvous).
  // Errors: InvalidArgument (bad rank/world/hostname), DeadlineExceeded (a
  // rank did not come or prove itself), Unavailable (gloo could not listen
  // or connect), PermissionDenied (a process that does not hold the job's
  // secret was found in a rank's place; the message names the rank and
  // where the connection came from), FailedPrecondition (a peer's addresses
  // cannot be told from this node's), or another rank's failure, named.
  static absl::StatusOr<std::unique_ptr<GlooCommunicator>> Create(
      Rendezvous& rendezvous, const std::string& name, int rank, int world,
      const GlooCommOptions& options);
  ~GlooCommunicator() override;

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
  // All_reduce of the whole input, then this rank's block: world × the
  // optimal traffic; the hierarchical backend does better between nodes.
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

  // All_reduce for small buffers in one exchange: each rank sends its input
  // to every other rank at once and reduces all of them, in rank order, into
  // `out` — one network latency where the ring takes 2(world−1), and every
  // rank ends with the same bits. The staging buffers are registered with
  // gloo once, at the first call, and reused; each call posts the next
  // call's receives as it ends, so a peer's send finds its receive posted
  // and goes out at once (no ready-to-receive round trip). With
  // `options.sync_exchange`, it goes through pairs in gloo's sync mode
  // instead (no event-loop thread between the socket and the caller), a
  // kSyncChunkBytes chunk at a time. Buffers of more than
  // `options.exchange_bytes` take AllReduce. Same errors as AllReduce.
  absl::Status ExchangeAllReduce(const void* in, void* out, int64_t count,
                                 DType dtype, ReduceOp op,
                                 absl::Duration timeout);
  // The sync-mode exchange as a pipeline stage (2 nodes' columns, see
  // HierarchicalCommunicator::AllReduce): `pieces` pieces, piece k of
  // min(piece, count − k·piece) elements at `base` + k·stride elements.
  // `ready(k)` runs before piece k is sent (it makes piece k's input), and
  // `done(k)` after piece k is reduced in place; between them the network
  // carries the piece while the caller's next ready() works. Their first
  // error ends the call and is returned as is (no gloo failure: the caller
  // aborts). REQUIRES: the communicator has the sync exchange
  // (has_sync_exchange), piece·element ≤ kSyncChunkBytes, `op` not kAvg.
  absl::Status PipelinedExchange(void* base, int64_t count, int64_t piece,
                                 int64_t stride, DType dtype, ReduceOp op,
                                 absl::Duration timeout,
                                 absl::FunctionRef<absl::Status(int64_t)> ready,
                                 absl::FunctionRef<absl::Status(int64_t)> done);
  bool has_sync_exchange() const { return sync_context_ != nullptr; }
  // The chunk the sync-mode exchange moves at a time. A rank writes at
  // most two chunks to a peer ahead of reading the peer's: 256 KiB fits in
  // what the socket holds without the peer reading (gloo sizes a socket's
  // send buffer to its largest message, which Linux doubles, even under
  // the default net.core.wmem_max, plus the peer's receive buffer), so no
  // rank's write waits on a peer that is writing too.
  static constexpr uint64_t kSyncChunkBytes = 128 << 10;
  // The send and receive buffer sizes the sync-mode sockets ask for (Linux
  // doubles it, capped by net.core.{w,r}mem_max: under the default caps,
  // 416 KiB each, still more than two chunks): the two chunks in flight
  // then never wait for the peer's window (SizeSyncSockets says why that
  // matters).
  static constexpr uint64_t kSyncSocketBytes = 2 << 20;

  // Starts a thread of this communicator's own that, while calls run, polls
  // CheckConnections every 10 ms: for a communicator used directly (flat
  // gloo forced), where no HierarchicalCommunicator watches it. Idempotent.
  void StartWatching() ABSL_LOCKS_EXCLUDED(mu_);

  // Fails the communicator with `why` (if it has not failed yet) and closes
  // its connections, so that peers waiting on this rank fail at once.
  // Thread-safe: called while an all_reduce runs on another thread, it wakes
  // that call's waits on its own buffer, and the call fails with `why`.
  // Returns the first failure.
  absl::Status Abort(absl::Status why) ABSL_LOCKS_EXCLUDED(mu_);

  // For a watcher thread, polled while calls run: whether a connection under
  // a running call is gone (gloo_connections.h: gloo never fails a send it
  // had queued on a connection that then broke, and the call would wait out
  // its timeout). A connection found gone for at least `grace` while the
  // same call still runs (a call that just succeeded while its peer closed
  // returns within microseconds) aborts this communicator with Unavailable
  // naming the peer, which is returned; else OK (also when no call runs or
  // the communicator failed already). While a call still runs on a failed
  // communicator it wakes that call's waits again (a gloo algorithm may wait
  // more than once after a wait was aborted). Thread-safe.
  absl::Status CheckConnections(absl::Duration grace) ABSL_LOCKS_EXCLUDED(mu_);
  // How many pairs' sockets CheckConnections watches (world − 1 normally).
  int watched_connections() const { return connections_.watched(); }

 private:
  GlooCommunicator(int rank, int world, GlooCommOptions options);

  // The watcher thread's body (StartWatching).
  void Watch() ABSL_LOCKS_EXCLUDED(mu_);
  // Wakes the waits of the running calls' registered buffers.
  void WakeRunning() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Creates the exchange's staging buffers (once). REQUIRES: a call runs.
  void EnsureExchangeBuffers();
  // ExchangeAllReduce's two transports (gloo_exchange.cc), run inside
  // Guarded; `combine` is never kAvg. They throw gloo's exceptions.
  absl::Status UnboundExchange(const void* in, void* out, int64_t count,
                               DType dtype, ReduceOp combine,
                               std::chrono::milliseconds t);
  absl::Status SyncExchange(const void* in, void* out, int64_t count,
                            DType dtype, ReduceOp combine,
                            std::chrono::milliseconds t);
  // SyncExchange's loop: chunk k of min(piece, count − k·piece) elements
  // is read at `src` + k·stride and reduced into `dst` + k·stride
  // (elements); ready(k) runs before chunk k is sent, done(k) after it is
  // reduced.
  absl::Status SyncChunks(const uint8_t* src, uint8_t* dst, int64_t count,
                          int64_t piece, int64_t stride, DType dtype,
                          ReduceOp combine, std::chrono::milliseconds t,
                          absl::FunctionRef<absl::Status(int64_t)> ready,
                          absl::FunctionRef<absl::Status(int64_t)> done);
  // Makes the sync-mode context's pairs sync and its buffers, from the
  // connected and admitted `context` (in Create; throws).
  void CreateSyncExchange(std::shared_ptr<gloo::Context> context);
  // Sets the sync sockets' SO_RCVBUF (`receive`) or SO_SNDBUF to
  // kSyncSocketBytes.
  void SizeSyncSockets(bool receive);
  // Sets the sync sockets' SO_RCVTIMEO/SO_SNDTIMEO to about `t`.
  void SetSyncTimeouts(std::chrono::milliseconds t);
  // Shuts the sync sockets down: wakes a read or write blocked on one.
  void ShutdownSync();
  // This rank's staging of one chunk, for chunks of `parity`.
  uint8_t* SyncStaging(int parity) {
    return sync_send_storage_.data() + parity * kSyncChunkBytes;
  }
  // Posts the exchange's receive from every peer, for the next call.
  void PostExchangeReceives();

  // Runs `body` (which calls gloo) with the failure rules above; `what`
  // names the op in messages.
  absl::Status Guarded(const char* what, absl::Duration timeout,
                       absl::FunctionRef<void(std::chrono::milliseconds)> body);
  // InvalidArgument for a negative count or a dtype the op cannot take.
  static absl::Status CheckArgs(const char* what, int64_t count, DType dtype,
                                bool reduces);
  absl::Status Usable() ABSL_LOCKS_EXCLUDED(mu_);
  // The status for a gloo exception's message.
  absl::Status Translate(const char* what, const std::string& message,
                         absl::Duration timeout) const;

  const int rank_;
  const int world_;
  const GlooCommOptions o_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> context_;

  // Registers a call's buffers (null ones skipped) for Abort while it
  // lives. Declared after the gloo options that own the buffers, so that it
  // goes first.
  class RunningBuffers {
   public:
    RunningBuffers(GlooCommunicator* comm,
                   std::initializer_list<gloo::transport::UnboundBuffer*> bufs);
    ~RunningBuffers();

   private:
    GlooCommunicator* const comm_;
    std::vector<gloo::transport::UnboundBuffer*> bufs_;
  };
  // Closes every pair (gloo's closeConnections), so that peers waiting on
  // this rank fail at once.
  void CloseConnections();
  Mutex mu_;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  // Calls inside gloo now (a collective, and Send/Recv beside it).
  int calls_running_ ABSL_GUARDED_BY(mu_) = 0;
  // Calls started so far (CheckConnections' "the same call").
  uint64_t calls_started_ ABSL_GUARDED_BY(mu_) = 0;
  // A lost connection seen by CheckConnections: when, under which call.
  absl::Time lost_since_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  uint64_t lost_under_call_ ABSL_GUARDED_BY(mu_) = 0;
  // The pairs' sockets (set by Create, read-only after).
  GlooConnections connections_;
  // The running calls' buffers, for Abort to wake their waits: gloo
  // forgets a send queued on a connection that then breaks, and its wait
  // would last until the timeout.
  std::vector<gloo::transport::UnboundBuffer*> running_ ABSL_GUARDED_BY(mu_);
  // ExchangeAllReduce's staging: this rank's input, and every rank's
  // (slot r for rank r), registered with gloo at its first call.
  std::vector<uint8_t> exchange_send_storage_, exchange_recv_storage_;
  std::unique_ptr<gloo::transport::UnboundBuffer> exchange_send_,
      exchange_recv_;
  // The sync-mode exchange (options.sync_exchange): its context (declared
  // before its buffers, which unregister from its pairs as they go), its
  // sockets, staging of one chunk (this rank's: two, by chunk parity; slot
  // r for rank r), two send buffers (by parity) and one receive buffer per
  // peer; the timeout the sockets carry.
  std::shared_ptr<gloo::Context> sync_context_;
  GlooConnections sync_connections_;
  std::vector<uint8_t> sync_send_storage_, sync_recv_storage_;
  std::vector<std::unique_ptr<gloo::transport::Buffer>> sync_send_, sync_recv_;
  std::chrono::milliseconds sync_timeout_{0};
  // The largest message sent since the send buffers were last enlarged.
  size_t sync_sized_for_ = 0;
  // ExchangeAllReduce's phases (SHOAL_COLL_TRACE).
  PhaseTimes exchange_times_{
      "exchange", {"copy+send", "wait_recv", "wait_send", "reduce+post"}};
  // The sync-mode exchange's steps per chunk (SHOAL_COLL_TRACE).
  PhaseTimes sync_chunk_times_{"sync_chunk",
                               {"send_next", "wait_recv", "reduce"}};
  // The watcher thread (StartWatching), stopped by the destructor.
  CondVar watch_cv_;
  bool stop_watching_ ABSL_GUARDED_BY(mu_) = false;
  // The watcher waits for a call to start (not in its poll wait).
  bool watcher_idle_ ABSL_GUARDED_BY(mu_) = false;
  std::thread watcher_;
};

}  // namespace shoal::collectives

#endif  // SHOAL_COLLECTIVES_GLOO_GLOO_COMMUNICATOR_H_
