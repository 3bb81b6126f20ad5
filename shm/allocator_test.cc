#include "shm/allocator.h"

#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace shoal::shm {
namespace {

TEST(ArenaAllocatorTest, AlignsAndTracksUse) {
  ArenaAllocator a(4096, 1 << 20, 64);
  auto x = a.Allocate(1);
  ASSERT_TRUE(x.ok());
  EXPECT_EQ(*x, 4096u);
  EXPECT_EQ(a.used(), 64u);
  auto y = a.Allocate(100);
  EXPECT_EQ(*y, 4096u + 64);
  EXPECT_EQ(a.used(), 64u + 128);
  EXPECT_EQ(a.frontier(), 192u);
  a.Free(*x, 1);
  a.Free(*y, 100);
  EXPECT_EQ(a.used(), 0u);
  EXPECT_EQ(a.largest_free_block(), 1u << 20);
}

TEST(ArenaAllocatorTest, ZeroBytes) {
  ArenaAllocator a(0, 1024, 64);
  EXPECT_EQ(*a.Allocate(0), 0u);
  EXPECT_EQ(a.used(), 0u);
}

TEST(ArenaAllocatorTest, ExhaustionNamesSizes) {
  ArenaAllocator a(0, 1024, 64);
  ASSERT_TRUE(a.Allocate(512).ok());
  auto r = a.Allocate(1024);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find("512 bytes free"), std::string::npos)
      << r.status();
}

TEST(ArenaAllocatorTest, BestFitPrefersSmallestHole) {
  ArenaAllocator a(0, 64 * 10, 64);
  std::vector<uint64_t> offs;
  for (int i = 0; i < 10; ++i) offs.push_back(*a.Allocate(64));
  a.Free(offs[1], 64);  // hole of 1 at 64
  a.Free(offs[4], 64);  // hole of 3 at 256..448
  a.Free(offs[5], 64);
  a.Free(offs[6], 64);
  EXPECT_EQ(*a.Allocate(64), offs[1]);  // the exact fit, not the big hole
  EXPECT_EQ(*a.Allocate(192), offs[4]);
}

TEST(ArenaAllocatorTest, RandomisedNeverOverlapsAndCoalescesFully) {
  std::mt19937 rng(7);
  const uint64_t kBytes = 1 << 20;
  ArenaAllocator a(0, kBytes, 64);
  std::map<uint64_t, uint64_t> live;  // offset → reserved size
  for (int step = 0; step < 20000; ++step) {
    if (live.empty() || rng() % 3 != 0) {
      uint64_t want = 1 + rng() % 8192;
      auto r = a.Allocate(want);
      if (!r.ok()) continue;
      uint64_t size = a.RoundUp(want);
      auto next = live.lower_bound(*r);
      if (next != live.end()) {
        ASSERT_LE(*r + size, next->first);
      }
      if (next != live.begin()) {
        auto prev = std::prev(next);
        ASSERT_LE(prev->first + prev->second, *r);
      }
      live[*r] = size;
    } else {
      auto it = live.begin();
      std::advance(it, rng() % live.size());
      a.Free(it->first, it->second);
      live.erase(it);
    }
  }
  for (auto [off, size] : live) a.Free(off, size);
  EXPECT_EQ(a.used(), 0u);
  EXPECT_EQ(a.largest_free_block(), kBytes);
}

}  // namespace
}  // namespace shoal::shm
