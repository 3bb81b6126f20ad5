// Segment::Remap: a copy-on-write range keeps the segment's bytes unchanged
// while this process writes it; re-sharing shows the segment's bytes again.
#include <unistd.h>

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "shm/layout.h"
#include "shm/segment.h"

namespace shoal::shm {
namespace {

constexpr uint64_t kBytes = uint64_t{8} << 20;

std::unique_ptr<Segment> NewSegment() {
  auto seg = Segment::Create(
      absl::StrCat("shoal-remaptest-", getpid(), "-store"), kBytes);
  EXPECT_TRUE(seg.ok()) << seg.status();
  return seg.ok() ? *std::move(seg) : nullptr;
}

// The segment file's byte at `offset`, read past this process's mapping.
uint8_t FileByte(const Segment& seg, uint64_t offset) {
  uint8_t b = 0;
  EXPECT_EQ(pread(seg.fd(), &b, 1, static_cast<off_t>(offset)), 1);
  return b;
}

TEST(SegmentRemapTest, CopyOnWriteKeepsTheSegmentAndSharingRestoresIt) {
  std::unique_ptr<Segment> seg = NewSegment();
  ASSERT_NE(seg, nullptr);
  const uint64_t off = 3 * (uint64_t{1} << 20);  // inside a 2 MiB chunk
  const uint64_t len = 5 * kPageSize;
  std::memset(seg->base() + off, 7, len);
  ASSERT_TRUE(seg->Remap(off, len, /*copy_on_write=*/true).ok());
  EXPECT_EQ(seg->base()[off], 7);  // same contents
  seg->base()[off] = 9;            // a private page now
  seg->base()[off + len - 1] = 9;
  EXPECT_EQ(FileByte(*seg, off), 7);
  EXPECT_EQ(FileByte(*seg, off + len - 1), 7);
  // Writes of the segment outside this process's private pages still show.
  const uint8_t one = 1;
  ASSERT_EQ(pwrite(seg->fd(), &one, 1, static_cast<off_t>(off + kPageSize)), 1);
  EXPECT_EQ(seg->base()[off + kPageSize], 1);  // page not written here: shared
  // A Populate of the chunk must not undo the private mapping.
  seg->Populate(off & ~((uint64_t{1} << 21) - 1), uint64_t{1} << 21);
  EXPECT_EQ(seg->base()[off], 9);
  // The range next to it was never remapped: shared as before.
  seg->base()[off + len] = 5;
  EXPECT_EQ(FileByte(*seg, off + len), 5);

  ASSERT_TRUE(seg->Remap(off, len, /*copy_on_write=*/false).ok());
  EXPECT_EQ(seg->base()[off], 7);  // the segment's bytes again
  seg->base()[off] = 3;
  EXPECT_EQ(FileByte(*seg, off), 3);
}

TEST(SegmentRemapTest, RefusesUnalignedOrOutsideRanges) {
  std::unique_ptr<Segment> seg = NewSegment();
  ASSERT_NE(seg, nullptr);
  EXPECT_TRUE(absl::IsInvalidArgument(seg->Remap(1, kPageSize, true)));
  EXPECT_TRUE(absl::IsInvalidArgument(seg->Remap(0, 100, true)));
  EXPECT_TRUE(absl::IsInvalidArgument(seg->Remap(0, 0, true)));
  EXPECT_TRUE(absl::IsInvalidArgument(
      seg->Remap(kBytes - kPageSize, 2 * kPageSize, true)));
  EXPECT_TRUE(seg->Remap(kBytes - kPageSize, kPageSize, true).ok());
}

}  // namespace
}  // namespace shoal::shm
