// A memcpy whose stores bypass the cache (non-temporal), for copying results
// too big to stay cached: it saves the read-for-ownership of every
// destination line, about a third of a large copy's memory traffic.
#ifndef SHOAL_SHM_STREAM_COPY_H_
#define SHOAL_SHM_STREAM_COPY_H_

#include <cstddef>

namespace shoal::shm {

// Copies `n` bytes like memcpy (no overlap). The bulk goes through streaming
// stores where the CPU has AVX2, the unaligned head and tail through memcpy;
// ends with a store fence, so the bytes are globally visible on return.
void StreamCopy(void* dst, const void* src, size_t n);

}  // namespace shoal::shm

#endif  // SHOAL_SHM_STREAM_COPY_H_
