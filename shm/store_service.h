// StoreService: the single owner of a node's shared-memory tensor store.
//
// It creates the segment, is the only process that allocates or frees (and so
// the only one that inserts or removes table entries), and serves clients over
// a ZeroMQ ROUTER (ipc://). It watches every client's process through a pidfd:
// when a client dies or disconnects, every reference it held is released and
// every object it was still creating is aborted. Runs standalone (`shoal
// store`, tests) or on a thread of the coordinator.
//
// Object lifecycle (states live in the segment's table):
//   Create → kCreated (creator writes) → Seal → kSealed (immutable; any client
//   may Get) → Release … → Delete (deferred until the last reference drops);
//   Abort frees a kCreated object. When an allocation does not fit, sealed
//   objects nobody references are evicted in LRU order; then sealed objects
//   that clients hold but no process maps are spilled, LRU first, to files
//   on disk (kSpilled), and read back into the arena at their next Get.
//
// Device objects (a TensorMeta on cuda:k) follow the same lifecycle; their
// bytes live in this process's device memory (DeviceArena, one per GPU), which
// clients map through CUDA IPC handles recorded in the table. The memory
// belongs to the store, not to the producer: it stays valid after the producer
// exits, until the last reference is released and the object deleted or
// evicted. This process initialises CUDA only at its first device Create.
#ifndef SHOAL_SHM_STORE_SERVICE_H_
#define SHOAL_SHM_STORE_SERVICE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gpu/cuda_ipc.h"
#include "ipc/protocol.h"
#include "shm/device_arena.h"

namespace shoal::shm {

struct StoreOptions {
  // The job this store belongs to; names the segment and the socket. Required.
  std::string job_id;
  // Where clients connect. Default "": ipc://<JobDir(job_id)>/store.sock.
  std::string endpoint;
  // Segment size. Default 0: min(30% of RAM, 80% of free /dev/shm).
  uint64_t store_bytes = 0;
  // Object table size. Default 0: arena / 64 KiB, clamped to [4096, 1<<20].
  uint32_t max_objects = 0;
  // Most concurrently connected clients. Default 256.
  uint32_t max_clients = 256;
  // Distinct objects a client's reference table in its slot takes (each
  // slot reserves twice as many 8-byte buckets in the segment); a client
  // holding more gets a larger table from the arena, up to room for every
  // object of the store. Default 1024.
  uint32_t initial_refs_per_client = 1024;
  // Arena bytes kept allocated ahead of the allocation frontier by the
  // background prefaulter. Default 512 MiB; 0 disables it.
  uint64_t prefault_ahead_bytes = uint64_t{512} << 20;
  // Longest wait for the table lock before a request fails. Default 10 s.
  absl::Duration lock_timeout = absl::Seconds(10);
  // How often deferred deletions and Get deadlines are checked. Default 50 ms.
  absl::Duration sweep_interval = absl::Milliseconds(50);
  // Limits applied to every inbound message.
  ipc::DecodeLimits limits;
  // Where spilled objects go: a folder the store makes inside this one
  // (mode 0700; this one is made 0700 when missing and must be this user's,
  // not a link, not writable by others) and removes when it stops.
  // Default "": the job's runtime folder (JobDir).
  std::string spill_dir;
  // Most bytes of spilled objects on disk; past it a create that finds the
  // arena full fails. Default kSpillBytesAuto: half of the free space of
  // spill_dir's file system when the store starts. 0: no spilling.
  static constexpr uint64_t kSpillBytesAuto = ~uint64_t{0};
  uint64_t spill_bytes = kSpillBytesAuto;
  // Device objects: the CUDA calls behind them (default null: the real ones,
  // made at the first device Create, so a store holding only CPU objects
  // never initialises CUDA; tests pass a fake) and each GPU's arena sizes.
  std::shared_ptr<gpu::CudaIpc> cuda;
  DeviceArenaOptions device;
};

class StoreService {
 public:
  // Creates the segment (removing stale ones left by dead stores) and binds
  // the endpoint. Errors: InvalidArgument (bad options), AlreadyExists (a live
  // store of this job), ResourceExhausted (/dev/shm too small, with the fix),
  // and socket errors.
  static absl::StatusOr<std::unique_ptr<StoreService>> Create(
      StoreOptions options);

  // Marks the segment closed, then removes it and the socket file.
  ~StoreService();

  // Serves requests until Stop() is called. Returns OK after Stop(), or the
  // error that made serving impossible.
  absl::Status Run();

  // Makes Run() return soon. Thread-safe and async-signal-safe.
  void Stop();

  // The store's figures (what a StoreStatsRequest answers), read in place
  // from any thread of the process that hosts the service: no round trip
  // through its socket, so a busy store does not delay its host. Takes the
  // segment lock for a scan of the object table. Thread-safe.
  // Errors: the lock's (DeadlineExceeded, Internal).
  absl::StatusOr<ipc::StoreStats> Stats() const;

  const std::string& endpoint() const;
  const std::string& segment_name() const;
  uint64_t segment_bytes() const;

  class Impl;

 private:
  explicit StoreService(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace shoal::shm

#endif  // SHOAL_SHM_STORE_SERVICE_H_
