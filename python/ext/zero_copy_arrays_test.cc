// ZeroCopyArrays against a real `shoal store` process: placement, snapshots
// (seal + copy-on-write), reuse, written ranges, lifetime, fallbacks, fork.
#include "python/ext/zero_copy_arrays.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/testing/store_fixture.h"

namespace shoal::pyext {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

class ZeroCopyArraysTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto p = testing::StoreProcess::Start(64 * kMiB);
    ASSERT_TRUE(p.ok()) << p.status();
    process_ = *std::move(p);
    auto c = process_->Connect();
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = *std::move(c);
    store_ = std::make_shared<ArrayStore>();
    store_->client = client_.get();
    arrays_.SetStore(store_, kMiB);
  }

  uint64_t UsedBytes() {
    auto s = client_->Stats();
    EXPECT_TRUE(s.ok());
    return s.ok() ? s->used_bytes() : 0;
  }

  bool InSegment(const void* p) {
    auto* b = client_->segment_base();
    return p >= b && p < b + 64 * kMiB;
  }

  std::unique_ptr<testing::StoreProcess> process_;
  std::unique_ptr<shm::StoreClient> client_;
  std::shared_ptr<ArrayStore> store_;
  ZeroCopyArrays arrays_;
};

TEST_F(ZeroCopyArraysTest, SmallAllocationsAreLeftToMalloc) {
  EXPECT_EQ(arrays_.Allocate(kMiB - 1), nullptr);
  EXPECT_EQ(arrays_.stats().refused, 0u);
  int on_heap = 0;
  EXPECT_FALSE(arrays_.Free(&on_heap));
  EXPECT_EQ(arrays_.RequestedSize(&on_heap), 0u);
}

TEST_F(ZeroCopyArraysTest, SnapshotSealsCopyOnWriteAndReusesUntilWritten) {
  const size_t n = 3 * kMiB + 100;
  auto* p = static_cast<uint8_t*>(arrays_.Allocate(n));
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(InSegment(p));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 4096, 0u);
  EXPECT_EQ(arrays_.RequestedSize(p), n);
  std::memset(p, 1, n);

  auto snap = arrays_.SnapshotOf(p, n);
  ASSERT_TRUE(snap.ok()) << snap.status();
  ASSERT_TRUE(snap->has_value());
  const ObjectId id = (*snap)->buffer.id;
  const uint8_t* in_store = (*snap)->buffer.data + (*snap)->offset;
  EXPECT_EQ(in_store, p);  // the same memory, no copy
  // Another process's view: the store's bytes.
  auto other = process_->Connect("reader");
  ASSERT_TRUE(other.ok());
  auto seen = (*other)->Get(id);
  ASSERT_TRUE(seen.ok()) << seen.status();
  const uint8_t* theirs = seen->data + (*snap)->offset;
  EXPECT_EQ(theirs[0], 1);

  // Unwritten: the same object again.
  auto again = arrays_.SnapshotOf(p + 10, 100);
  ASSERT_TRUE(again.ok() && again->has_value());
  EXPECT_EQ((*again)->buffer.id, id);
  EXPECT_EQ((*again)->offset, (*snap)->offset + 10);
  EXPECT_EQ(arrays_.stats().reused, 1u);

  // Written: this process sees its write, the store does not.
  p[5] = 9;
  EXPECT_EQ(p[5], 9);
  EXPECT_EQ(theirs[5], 1);
  auto written = arrays_.SnapshotOf(p, n);
  ASSERT_TRUE(written.ok());
  EXPECT_FALSE(written->has_value());
  EXPECT_EQ(arrays_.stats().written, 1u);
  (void)(*other)->Release(id);
}

TEST_F(ZeroCopyArraysTest, ObjectLivesUntilAllocationAndSnapshotsLetGo) {
  const uint64_t before = UsedBytes();
  const size_t n = 8 * kMiB;
  void* p = arrays_.Allocate(n);
  ASSERT_NE(p, nullptr);
  EXPECT_GE(UsedBytes(), before + n);
  auto snap = arrays_.SnapshotOf(p, n);
  ASSERT_TRUE(snap.ok() && snap->has_value());
  std::shared_ptr<SealedArrayObject> held = (*snap)->object;
  snap->reset();
  EXPECT_TRUE(arrays_.Free(p));
  EXPECT_EQ(arrays_.stats().live, 0u);
  auto contains = client_->Contains(held->id());
  ASSERT_TRUE(contains.ok());
  EXPECT_TRUE(*contains);  // the task's hold keeps it
  held.reset();
  EXPECT_EQ(UsedBytes(), before);

  // An unsealed allocation freed: kept as a spare (numpy's temporaries),
  // reused by the next allocation of the same span without a store request,
  // and aborted when the store is cleared.
  void* q = arrays_.Allocate(n);
  ASSERT_NE(q, nullptr);
  EXPECT_TRUE(arrays_.Free(q));
  EXPECT_EQ(arrays_.stats().spares, 1u);
  const uint64_t with_spare = UsedBytes();
  EXPECT_GE(with_spare, before + n);
  void* r = arrays_.Allocate(n - 10);  // the same whole pages
  EXPECT_EQ(r, q);
  EXPECT_EQ(arrays_.stats().spares_reused, 1u);
  EXPECT_EQ(arrays_.stats().spares, 0u);
  EXPECT_EQ(UsedBytes(), with_spare);
  EXPECT_EQ(arrays_.RequestedSize(r), n - 10);
  EXPECT_TRUE(arrays_.Free(r));
  arrays_.ClearStore(store_.get());
  EXPECT_EQ(arrays_.stats().spares, 0u);
  EXPECT_EQ(UsedBytes(), before);
}

TEST_F(ZeroCopyArraysTest, SparesAreBoundedAndSealedObjectsAreNeverSpares) {
  const uint64_t before = UsedBytes();
  // A sealed allocation freed is not a spare (the object is immutable).
  void* s = arrays_.Allocate(2 * kMiB);
  ASSERT_NE(s, nullptr);
  auto snap = arrays_.SnapshotOf(s, 2 * kMiB);
  ASSERT_TRUE(snap.ok() && snap->has_value());
  snap->reset();
  EXPECT_TRUE(arrays_.Free(s));
  EXPECT_EQ(arrays_.stats().spares, 0u);
  // At most kMaxSpares objects are kept; the others are aborted.
  std::vector<void*> live;
  for (size_t i = 0; i < ZeroCopyArrays::kMaxSpares + 2; ++i) {
    void* p = arrays_.Allocate(kMiB);
    ASSERT_NE(p, nullptr);
    live.push_back(p);
  }
  for (void* p : live) EXPECT_TRUE(arrays_.Free(p));
  EXPECT_EQ(arrays_.stats().spares, ZeroCopyArrays::kMaxSpares);
  EXPECT_LT(UsedBytes(), before + (ZeroCopyArrays::kMaxSpares + 2) * kMiB);
  arrays_.SetStore(store_, kMiB);  // a new store setting drops the spares
  EXPECT_EQ(arrays_.stats().spares, 0u);
  EXPECT_EQ(UsedBytes(), before);
}

TEST_F(ZeroCopyArraysTest, FullStoreAndNoStoreFallBackToMalloc) {
  EXPECT_EQ(arrays_.Allocate(128 * kMiB), nullptr);  // more than the store
  EXPECT_EQ(arrays_.stats().refused, 1u);
  arrays_.ClearStore(store_.get());
  EXPECT_EQ(arrays_.Allocate(2 * kMiB), nullptr);
}

TEST_F(ZeroCopyArraysTest, AStoppedStoreLeavesArraysValidAndSendsNothing) {
  const size_t n = 2 * kMiB;
  auto* unsealed = static_cast<uint8_t*>(arrays_.Allocate(n));
  auto* sealed = static_cast<uint8_t*>(arrays_.Allocate(n));
  ASSERT_NE(unsealed, nullptr);
  ASSERT_NE(sealed, nullptr);
  std::memset(sealed, 2, n);
  auto snap = arrays_.SnapshotOf(sealed, n);
  ASSERT_TRUE(snap.ok() && snap->has_value());
  snap->reset();
  ASSERT_TRUE(process_->Stop().ok());  // marks the segment closed
  EXPECT_FALSE(store_->Reachable());
  unsealed[n - 1] = 1;  // the mapping outlives the store
  sealed[0] = 3;
  EXPECT_EQ(sealed[1], 2);
  EXPECT_EQ(arrays_.Allocate(n), nullptr);  // malloc from now on
  const absl::Time start = absl::Now();
  EXPECT_TRUE(arrays_.Free(unsealed));
  EXPECT_TRUE(arrays_.Free(sealed));
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));  // no RPC timeouts
  EXPECT_EQ(arrays_.stats().live, 0u);
}

TEST_F(ZeroCopyArraysTest, ForkedChildGetsPrivateCopies) {
  const size_t n = 2 * kMiB;
  auto* unsealed = static_cast<uint8_t*>(arrays_.Allocate(n));
  auto* sealed = static_cast<uint8_t*>(arrays_.Allocate(n));
  ASSERT_NE(unsealed, nullptr);
  ASSERT_NE(sealed, nullptr);
  std::memset(unsealed, 1, n);
  std::memset(sealed, 2, n);
  auto snap = arrays_.SnapshotOf(sealed, n);
  ASSERT_TRUE(snap.ok() && snap->has_value());
  arrays_.PrepareFork();
  const pid_t pid = fork();
  if (pid == 0) {
    arrays_.ChildAfterFork();
    // The child keeps the contents, writes privately, frees without store
    // requests, and places nothing new in the parent's store.
    bool ok = unsealed[0] == 1 && sealed[n - 1] == 2;
    unsealed[0] = 7;
    sealed[0] = 7;
    ok = ok && arrays_.Allocate(n) == nullptr;
    ok = ok && arrays_.Free(unsealed) && arrays_.Free(sealed);
    _exit(ok ? 0 : 1);
  }
  arrays_.ParentAfterFork();
  ASSERT_GT(pid, 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(unsealed[0], 1);  // the child's write did not reach the parent
  EXPECT_EQ(sealed[0], 2);
  EXPECT_EQ(arrays_.stats().live, 2u);
  snap->reset();
  EXPECT_TRUE(arrays_.Free(unsealed));
  EXPECT_TRUE(arrays_.Free(sealed));
}

}  // namespace
}  // namespace shoal::pyext
