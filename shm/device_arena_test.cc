#include "shm/device_arena.h"

#include <cstring>

#include "gpu/fake_cuda_ipc.h"
#include "gtest/gtest.h"

namespace shoal::shm {
namespace {

constexpr uint64_t kMiB = 1 << 20;

DeviceArenaOptions Options(uint64_t chunk, uint64_t limit) {
  DeviceArenaOptions o;
  o.chunk_bytes = chunk;
  o.limit_bytes = limit;
  return o;
}

TEST(DeviceArenaTest, ObjectsShareChunksAndFreedBlocksAreReused) {
  gpu::FakeCudaIpc cuda;
  DeviceArena arena(&cuda, 0, *cuda.DeviceUuid(0),
                    Options(16 * kMiB, 64 * kMiB));
  auto a = arena.Allocate(1000);
  auto b = arena.Allocate(3 * kMiB);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(cuda.allocations(), 1);  // one cudaMalloc for both
  EXPECT_EQ(a->chunk, b->chunk);
  EXPECT_EQ(a->bytes, 1024u);  // 256-byte granules
  EXPECT_EQ(b->offset % 256, 0u);
  EXPECT_NE(a->event, b->event);
  EXPECT_EQ(arena.used(), 1024 + 3 * kMiB);
  const uint64_t b_offset = b->offset;
  arena.Free(*b);
  auto c = arena.Allocate(3 * kMiB);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->offset, b_offset);  // the freed block, first
  EXPECT_EQ(c->event, b->event);   // and its event, back from the pool
  EXPECT_EQ(cuda.events_created(), 2);
}

TEST(DeviceArenaTest, GrowsByChunksUpToTheLimitThenRefuses) {
  gpu::FakeCudaIpc cuda;
  DeviceArena arena(&cuda, 0, *cuda.DeviceUuid(0),
                    Options(16 * kMiB, 40 * kMiB));
  ASSERT_TRUE(arena.Allocate(10 * kMiB).ok());
  ASSERT_TRUE(arena.Allocate(10 * kMiB).ok());  // a second chunk
  EXPECT_EQ(arena.chunks(), 2u);
  EXPECT_EQ(arena.capacity(), 32 * kMiB);
  // A big object gets a chunk of its own, in 2 MiB steps; this one would pass
  // the limit.
  auto big = arena.Allocate(9 * kMiB);
  ASSERT_FALSE(big.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(big.status())) << big.status();
  EXPECT_NE(big.status().message().find("limit"), std::string::npos);
  // Room left in the chunks is still used.
  EXPECT_TRUE(arena.Allocate(5 * kMiB).ok());
}

TEST(DeviceArenaTest, OutOfDeviceMemoryIsResourceExhausted) {
  gpu::FakeCudaIpc cuda(1, 20 * kMiB);  // the "GPU" has 20 MiB
  DeviceArena arena(&cuda, 0, *cuda.DeviceUuid(0), Options(16 * kMiB, ~0ull));
  ASSERT_TRUE(arena.Allocate(15 * kMiB).ok());
  auto more = arena.Allocate(15 * kMiB);
  ASSERT_FALSE(more.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(more.status())) << more.status();
  EXPECT_NE(more.status().message().find("the GPU has no"), std::string::npos);
}

TEST(DeviceArenaTest, DescribeNamesTheChunkOffsetEventAndGpu) {
  gpu::FakeCudaIpc cuda(2);
  const gpu::GpuUuid uuid = *cuda.DeviceUuid(1);
  DeviceArena arena(&cuda, 1, uuid, Options(16 * kMiB, ~0ull));
  ASSERT_TRUE(arena.Allocate(4096).ok());
  auto b = arena.Allocate(4096);
  ASSERT_TRUE(b.ok());
  CudaLocation loc;
  std::memset(&loc, 0, sizeof(loc));
  arena.Describe(*b, &loc);
  EXPECT_EQ(loc.base_offset, b->offset);
  EXPECT_EQ(loc.pool_bytes, 16 * kMiB);
  EXPECT_EQ(loc.has_event, 1);
  EXPECT_EQ(std::memcmp(loc.device_uuid, uuid.bytes.data(), 16), 0);
  // The handle opens to the chunk the block is in.
  gpu::IpcMemHandle h;
  std::memcpy(h.bytes.data(), loc.mem_handle, 64);
  auto base = cuda.OpenMemHandle(1, h);
  ASSERT_TRUE(base.ok());
}

TEST(DeviceArenaTest, DestructionFreesEveryChunk) {
  gpu::FakeCudaIpc cuda;
  {
    DeviceArena arena(&cuda, 0, *cuda.DeviceUuid(0), Options(16 * kMiB, ~0ull));
    ASSERT_TRUE(arena.Allocate(20 * kMiB).ok());
    ASSERT_TRUE(arena.Allocate(kMiB).ok());
    EXPECT_EQ(cuda.allocations(), 2);
  }
  EXPECT_EQ(cuda.allocations(), 0);
}

}  // namespace
}  // namespace shoal::shm
