#include "shm/stream_copy.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace shoal::shm {
namespace {

// Every alignment of source and destination, sizes around the thresholds.
TEST(StreamCopyTest, CopiesLikeMemcpyAtAnyAlignmentAndSize) {
  std::vector<uint8_t> src(70000), dst(70000);
  for (size_t i = 0; i < src.size(); ++i)
    src[i] = static_cast<uint8_t>(i * 131 + 7);
  for (size_t n : {0ul, 1ul, 31ul, 4095ul, 4096ul, 4097ul, 4096ul + 127,
                   65536ul, 65536ul + 33}) {
    for (size_t so : {0ul, 1ul, 17ul, 32ul}) {
      for (size_t d : {0ul, 3ul, 31ul, 64ul}) {
        std::fill(dst.begin(), dst.end(), 0xAA);
        StreamCopy(dst.data() + d, src.data() + so, n);
        ASSERT_EQ(std::memcmp(dst.data() + d, src.data() + so, n), 0)
            << "n=" << n << " src+" << so << " dst+" << d;
        // Nothing outside [d, d+n) was touched.
        for (size_t i = 0; i < d; ++i) ASSERT_EQ(dst[i], 0xAA);
        ASSERT_EQ(dst[d + n], 0xAA);
      }
    }
  }
}

}  // namespace
}  // namespace shoal::shm
