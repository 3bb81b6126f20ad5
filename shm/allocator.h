// ArenaAllocator: best-fit allocation of byte ranges inside the store's arena.
//
// It lives in the store service's private memory, never in the segment: only
// the service allocates and frees, so a client can neither corrupt it by
// writing out of bounds nor leave it half-updated by dying. Ties between
// equally good blocks go to the lowest address, which keeps the touched part
// of the arena compact (the prefaulter works ahead of `frontier()`).
#ifndef SHOAL_SHM_ALLOCATOR_H_
#define SHOAL_SHM_ALLOCATOR_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <set>
#include <utility>

#include "absl/status/statusor.h"

namespace shoal::shm {

class ArenaAllocator {
 public:
  // Manages [base, base + bytes). `alignment` must be a power of two; every
  // returned offset and every reserved size is a multiple of it.
  ArenaAllocator(uint64_t base, uint64_t bytes, uint64_t alignment);

  // Reserves at least `bytes` (rounded up to the alignment; 0 reserves 0 and
  // returns `base`). Returns the offset.
  // Errors: ResourceExhausted when no free block is large enough (the message
  // names the request, the free total and the largest free block).
  absl::StatusOr<uint64_t> Allocate(uint64_t bytes);

  // Returns a range from Allocate. REQUIRES: `offset` and `bytes` are exactly
  // what Allocate returned and reserved (bytes = RoundUp(request)).
  void Free(uint64_t offset, uint64_t bytes);

  uint64_t RoundUp(uint64_t bytes) const {
    return (bytes + alignment_ - 1) & ~(alignment_ - 1);
  }
  uint64_t capacity() const { return bytes_; }
  // Readable from any thread (the store's Stats).
  uint64_t used() const { return used_.load(std::memory_order_relaxed); }
  uint64_t free_bytes() const { return bytes_ - used(); }
  uint64_t largest_free_block() const;
  // One past the highest byte ever handed out, relative to the arena base.
  uint64_t frontier() const { return frontier_; }

 private:
  void InsertFree(uint64_t offset, uint64_t size);
  void EraseFree(std::map<uint64_t, uint64_t>::iterator it);

  const uint64_t base_;
  const uint64_t bytes_;
  const uint64_t alignment_;
  std::atomic<uint64_t> used_{0};
  uint64_t frontier_ = 0;
  std::map<uint64_t, uint64_t> by_offset_;           // offset → size
  std::set<std::pair<uint64_t, uint64_t>> by_size_;  // (size, offset)
};

}  // namespace shoal::shm

#endif  // SHOAL_SHM_ALLOCATOR_H_
