// Segment::Remap: a copy-on-write range keeps the segment's bytes unchanged
// while this process writes it; re-sharing shows the segment's bytes again.
// Both with the page-table entries parked aside (the default) and without.
#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "shm/layout.h"
#include "shm/segment.h"

namespace shoal::shm {
namespace {

constexpr uint64_t kBytes = uint64_t{8} << 20;

std::unique_ptr<Segment> NewSegment() {
  static int made = 0;  // a name per segment: tests look for leftovers
  auto seg = Segment::Create(
      absl::StrCat("shoal-remaptest-", getpid(), "-", made++, "-store"),
      kBytes);
  EXPECT_TRUE(seg.ok()) << seg.status();
  return seg.ok() ? *std::move(seg) : nullptr;
}

// The segment file's byte at `offset`, read past this process's mapping.
uint8_t FileByte(const Segment& seg, uint64_t offset) {
  uint8_t b = 0;
  EXPECT_EQ(pread(seg.fd(), &b, 1, static_cast<off_t>(offset)), 1);
  return b;
}

// How many of the pages [p, p + bytes) this process has page-table entries
// for (/proc/self/pagemap bit 63).
uint64_t PresentPages(const uint8_t* p, uint64_t bytes) {
  const int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  EXPECT_GE(fd, 0);
  uint64_t present = 0;
  for (uint64_t i = 0; i < bytes / kPageSize; ++i) {
    uint64_t e = 0;
    const off_t at = static_cast<off_t>(
        (reinterpret_cast<uintptr_t>(p) / kPageSize + i) * sizeof(e));
    EXPECT_EQ(pread(fd, &e, sizeof(e), at), static_cast<ssize_t>(sizeof(e)));
    present += e >> 63;
  }
  close(fd);
  return present;
}

class SegmentRemapTest : public ::testing::TestWithParam<bool> {};

TEST_P(SegmentRemapTest, CopyOnWriteKeepsTheSegmentAndSharingRestoresIt) {
  std::unique_ptr<Segment> seg = NewSegment();
  ASSERT_NE(seg, nullptr);
  seg->set_parking_for_testing(GetParam());
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
  EXPECT_EQ(seg->base()[off + kPageSize], 1);
  seg->base()[off] = 3;
  EXPECT_EQ(FileByte(*seg, off), 3);
  EXPECT_EQ(seg->parked_ranges(), 0u);
}

TEST_P(SegmentRemapTest,
       ACopyOnWriteRangeStartsEmptyAndTheSharedEntriesComeBack) {
  std::unique_ptr<Segment> seg = NewSegment();
  ASSERT_NE(seg, nullptr);
  const bool parking = GetParam();
  seg->set_parking_for_testing(parking);
  const uint64_t off = 3 * (uint64_t{1} << 20) + 3 * kPageSize;
  const uint64_t len = (uint64_t{2} << 20) + 5 * kPageSize;  // > a chunk
  uint8_t* p = seg->base() + off;
  std::memset(p, 4, len);  // every page present, shared
  ASSERT_EQ(PresentPages(p, len), len / kPageSize);
  ASSERT_TRUE(seg->Remap(off, len, true).ok());
  EXPECT_EQ(seg->parked_ranges(), parking ? 1u : 0u);
  EXPECT_EQ(PresentPages(p, len), 0u);  // private, nothing touched yet
  EXPECT_EQ(p[len - 1], 4);
  p[0] = 8;  // private
  EXPECT_EQ(FileByte(*seg, off), 4);
  ASSERT_TRUE(seg->Remap(off, len, false).ok());
  EXPECT_EQ(seg->parked_ranges(), 0u);
  // Parked: the shared entries are back (not one page faulted in again);
  // replaced: the range starts empty.
  EXPECT_EQ(PresentPages(p, len), parking ? len / kPageSize : 0u);
  EXPECT_EQ(p[0], 4);  // the segment's byte, not the private 8
  EXPECT_EQ(p[len - 1], 4);
  p[1] = 6;
  EXPECT_EQ(FileByte(*seg, off + 1), 6);  // shared again
}

TEST_P(SegmentRemapTest, RemappingAPrivateRangeAgainAndOverlapsStayCorrect) {
  std::unique_ptr<Segment> seg = NewSegment();
  ASSERT_NE(seg, nullptr);
  seg->set_parking_for_testing(GetParam());
  const uint64_t off = 16 * kPageSize;
  const uint64_t len = 8 * kPageSize;
  std::memset(seg->base() + off, 2, len + 8 * kPageSize);
  ASSERT_TRUE(seg->Remap(off, len, true).ok());
  ASSERT_TRUE(seg->Remap(off, len, true).ok());  // private already
  seg->base()[off] = 5;
  EXPECT_EQ(FileByte(*seg, off), 2);
  // A range overlapping a private one: copy-on-write too, then shared again
  // as a whole (any area parked inside it is dropped).
  ASSERT_TRUE(seg->Remap(off + 4 * kPageSize, len, true).ok());
  ASSERT_TRUE(seg->Remap(off, 2 * len, false).ok());
  EXPECT_EQ(seg->parked_ranges(), 0u);
  for (uint64_t i = 0; i < 2 * len; i += kPageSize) {
    EXPECT_EQ(seg->base()[off + i], 2) << i;
    seg->base()[off + i] = 9;
    EXPECT_EQ(FileByte(*seg, off + i), 9) << i;
  }
}

// No mapping of the segment is left once it is destroyed (a parked area
// would keep the removed file's memory alive).
TEST_P(SegmentRemapTest, DestroyingTheSegmentUnmapsParkedAreas) {
  std::unique_ptr<Segment> seg = NewSegment();
  ASSERT_NE(seg, nullptr);
  seg->set_parking_for_testing(GetParam());
  const std::string name = seg->name();
  std::memset(seg->base() + (1 << 20), 1, 64 * kPageSize);
  ASSERT_TRUE(seg->Remap(1 << 20, 64 * kPageSize, true).ok());
  seg.reset();
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    EXPECT_EQ(line.find(name), std::string::npos) << line;
  }
}

INSTANTIATE_TEST_SUITE_P(ParkedAndReplaced, SegmentRemapTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "parked" : "replaced";
                         });

TEST(SegmentRemapRangesTest, RefusesUnalignedOrOutsideRanges) {
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
