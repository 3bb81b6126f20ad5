#include "shm/allocator.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace shoal::shm {

ArenaAllocator::ArenaAllocator(uint64_t base, uint64_t bytes,
                               uint64_t alignment)
    : base_(base), bytes_(bytes & ~(alignment - 1)), alignment_(alignment) {
  if (bytes_ > 0) InsertFree(base_, bytes_);
}

void ArenaAllocator::InsertFree(uint64_t offset, uint64_t size) {
  by_offset_.emplace(offset, size);
  by_size_.emplace(size, offset);
}

void ArenaAllocator::EraseFree(std::map<uint64_t, uint64_t>::iterator it) {
  by_size_.erase({it->second, it->first});
  by_offset_.erase(it);
}

uint64_t ArenaAllocator::largest_free_block() const {
  return by_size_.empty() ? 0 : by_size_.rbegin()->first;
}

absl::StatusOr<uint64_t> ArenaAllocator::Allocate(uint64_t bytes) {
  if (bytes == 0) return base_;
  if (bytes > bytes_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "requested ", bytes, " bytes but the arena holds only ", bytes_));
  }
  const uint64_t size = RoundUp(bytes);
  // Best fit: the smallest block that is large enough, lowest address first.
  auto fit = by_size_.lower_bound({size, 0});
  if (fit == by_size_.end()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("requested ", bytes, " bytes; ", free_bytes(),
                     " bytes free, largest free block ", largest_free_block()));
  }
  const uint64_t block_size = fit->first;
  const uint64_t offset = fit->second;
  EraseFree(by_offset_.find(offset));
  if (block_size > size) InsertFree(offset + size, block_size - size);
  used_ += size;
  frontier_ = std::max(frontier_, offset + size - base_);
  return offset;
}

void ArenaAllocator::Free(uint64_t offset, uint64_t bytes) {
  if (bytes == 0) return;
  uint64_t size = RoundUp(bytes);
  used_ -= size;
  // Coalesce with the neighbours.
  auto next = by_offset_.lower_bound(offset);
  if (next != by_offset_.end() && next->first == offset + size) {
    size += next->second;
    EraseFree(next);
  }
  auto after = by_offset_.lower_bound(offset);
  if (after != by_offset_.begin()) {
    auto prev = std::prev(after);
    if (prev->first + prev->second == offset) {
      offset = prev->first;
      size += prev->second;
      EraseFree(prev);
    }
  }
  InsertFree(offset, size);
}

}  // namespace shoal::shm
