// DeviceArena: the store service's memory on one GPU.
//
// Objects are carved best-fit out of chunks — each chunk one cudaMalloc with
// one IPC handle, so a process opens a chunk once (about 1 ms) for every
// object in it, instead of one cudaMalloc and one open per object. Chunks are
// never freed while the store runs: another process may still have one mapped
// (a client closes a chunk when it drops its last reference into it), and
// freeing memory another process maps is undefined in CUDA. The arena grows
// one chunk at a time up to `limit_bytes`; past that, the service evicts.
//
// Every block also carries an interprocess event from a pool: the producer
// records it when it seals (after its writes), consumers' streams wait on it.
// Events go back to the pool when their object is freed.
//
// Lives in the service's private memory and is used from its thread only,
// but for capacity() and used(), which any thread may read.
#ifndef SHOAL_SHM_DEVICE_ARENA_H_
#define SHOAL_SHM_DEVICE_ARENA_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "gpu/cuda_ipc.h"
#include "shm/allocator.h"
#include "shm/layout.h"

namespace shoal::shm {

struct DeviceArenaOptions {
  // Size of a new chunk (objects larger than this get a chunk of their own,
  // rounded up to 2 MiB). Default 256 MiB.
  uint64_t chunk_bytes = uint64_t{256} << 20;
  // Most device memory the arena holds. Default: no limit but the GPU's.
  uint64_t limit_bytes = ~uint64_t{0};
};

class DeviceArena {
 public:
  // Where one object lives.
  struct Block {
    uint32_t chunk = 0;
    uint64_t offset = 0;  // inside the chunk
    uint64_t bytes = 0;   // reserved (rounded up)
    uint32_t event = 0;   // index in the event pool
  };

  // `cuda` must outlive the arena; `ordinal` is the GPU as the service sees it.
  DeviceArena(gpu::CudaIpc* cuda, int ordinal, const gpu::GpuUuid& uuid,
              const DeviceArenaOptions& options);
  // Frees every chunk and event (the store is going away).
  ~DeviceArena();
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;

  // What Allocate reserves for an object of `bytes`: rounded up to 256 bytes
  // (at least 256).
  static uint64_t Reserved(uint64_t bytes);

  // Reserves `bytes` (256-byte aligned) and an event.
  // Errors: ResourceExhausted (no room within the limit, or the GPU is out of
  // memory: the message says which and how much is free), the CUDA error of
  // creating an event.
  absl::StatusOr<Block> Allocate(uint64_t bytes);
  // REQUIRES: `b` came from Allocate and was not freed.
  void Free(const Block& b);
  // Fills `loc` (handles, offset, chunk size, the GPU's UUID) for the table.
  void Describe(const Block& b, CudaLocation* loc) const;

  const gpu::GpuUuid& uuid() const { return uuid_; }
  int ordinal() const { return ordinal_; }
  // Readable from any thread (the store's Stats).
  uint64_t capacity() const { return capacity_.load(); }  // in chunks
  uint64_t used() const { return used_.load(); }          // reserved by objects
  size_t chunks() const { return chunks_.size(); }

 private:
  struct Chunk {
    gpu::ExportedAllocation alloc;
    uint64_t bytes = 0;
    std::unique_ptr<ArenaAllocator> allocator;
  };

  absl::StatusOr<uint32_t> TakeEvent();

  gpu::CudaIpc* const cuda_;
  const int ordinal_;
  const gpu::GpuUuid uuid_;
  const DeviceArenaOptions options_;
  std::vector<Chunk> chunks_;
  std::atomic<uint64_t> capacity_{0};
  std::atomic<uint64_t> used_{0};
  std::vector<gpu::ExportedEvent> events_;
  std::vector<uint32_t> free_events_;
};

}  // namespace shoal::shm

#endif  // SHOAL_SHM_DEVICE_ARENA_H_
