#include "shm/stream_copy.h"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace shoal::shm {
namespace {

#if defined(__x86_64__)
// dst is 32-byte aligned, n a multiple of 128.
__attribute__((target("avx2"))) void StreamAvx2(uint8_t* dst,
                                                const uint8_t* src, size_t n) {
  for (size_t i = 0; i < n; i += 128) {
    const __m256i a =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    const __m256i b =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 32));
    const __m256i c =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 64));
    const __m256i d =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 96));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i), a);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 32), b);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 64), c);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 96), d);
  }
  _mm_sfence();
}

// A run-time check rather than an ifunc: ifunc resolvers crash under
// ThreadSanitizer (they run before its runtime starts).
const bool kHasAvx2 = __builtin_cpu_supports("avx2");
#endif

}  // namespace

void StreamCopy(void* dst, const void* src, size_t n) {
  auto* d = static_cast<uint8_t*>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
#if defined(__x86_64__)
  if (kHasAvx2 && n >= 4096) {
    const size_t head = (32 - reinterpret_cast<uintptr_t>(d) % 32) % 32;
    std::memcpy(d, s, head);
    const size_t body = (n - head) / 128 * 128;
    StreamAvx2(d + head, s + head, body);
    std::memcpy(d + head + body, s + head + body, n - head - body);
    return;
  }
#endif
  std::memcpy(d, s, n);
}

}  // namespace shoal::shm
