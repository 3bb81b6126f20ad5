#include "shm/object_table.h"

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <set>

#include "gtest/gtest.h"
#include "shm/robust_lock.h"

namespace shoal::shm {
namespace {

// An anonymous shared mapping stands in for the segment: ObjectTable and the
// lock only need memory that forked children share.
class ObjectTableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LayoutParams p{kBytes, /*max_objects=*/64, /*max_clients=*/4,
                   /*refs_per_client=*/16};
    auto layout = ComputeLayout(p);
    ASSERT_TRUE(layout.ok()) << layout.status();
    layout_ = *layout;
    mem_ = static_cast<uint8_t*>(mmap(nullptr, kBytes, PROT_READ | PROT_WRITE,
                                      MAP_SHARED | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(mem_, MAP_FAILED);
    ASSERT_TRUE(
        InitRobustLock(&reinterpret_cast<SegmentHeader*>(mem_)->lock).ok());
    table_ = std::make_unique<ObjectTable>(mem_);
    table_->Format(layout_);
  }
  void TearDown() override { munmap(mem_, kBytes); }

  static constexpr uint64_t kBytes = 8 << 20;
  Layout layout_;
  uint8_t* mem_ = nullptr;
  std::unique_ptr<ObjectTable> table_;
};

TEST_F(ObjectTableTest, LayoutIsPageAlignedAndOrdered) {
  EXPECT_EQ(layout_.index_buckets, 128u);
  EXPECT_EQ(layout_.refs_per_client, 16u);
  EXPECT_LT(layout_.table_offset, layout_.index_offset);
  EXPECT_LT(layout_.index_offset, layout_.clients_offset);
  EXPECT_LT(layout_.clients_offset, layout_.arena_offset);
  EXPECT_EQ(layout_.arena_offset % kPageSize, 0u);
  EXPECT_EQ(layout_.arena_offset + layout_.arena_bytes, kBytes);
  EXPECT_FALSE(ComputeLayout({4096, 64, 4, 16}).ok());
}

TEST_F(ObjectTableTest, InsertFindRemoveUnderChurn) {
  std::mt19937 rng(3);
  std::map<ObjectId, uint32_t> live;
  std::vector<uint32_t> free_entries;
  for (uint32_t i = 0; i < 64; ++i) free_entries.push_back(i);
  for (int step = 0; step < 20000; ++step) {
    if (!free_entries.empty() && (live.empty() || rng() % 2)) {
      ObjectId id = ObjectId::Random();
      uint32_t e = free_entries.back();
      free_entries.pop_back();
      table_->Insert(id, e);
      live[id] = e;
    } else {
      auto it = live.begin();
      std::advance(it, rng() % live.size());
      table_->Remove(it->second);
      free_entries.push_back(it->second);
      live.erase(it);
    }
    if (step % 97 == 0) {
      for (const auto& [id, e] : live) {
        auto found = table_->Find(id);
        ASSERT_TRUE(found.has_value());
        ASSERT_EQ(*found, e);
      }
      ASSERT_FALSE(table_->Find(ObjectId::Random()).has_value());
    }
  }
}

TEST_F(ObjectTableTest, ReferencesPerClientAndLimit) {
  for (uint32_t e = 0; e < 10; ++e) table_->Insert(ObjectId::Random(), e);
  // refs_per_client 16 buckets: at most 8 distinct objects held at once.
  for (uint32_t e = 0; e < 8; ++e)
    ASSERT_TRUE(
        table_->AddRef(1, e, ObjectTable::RefKind::kMapped, nullptr).ok());
  EXPECT_EQ(table_->AddRef(1, 8, ObjectTable::RefKind::kMapped, nullptr).code(),
            absl::StatusCode::kResourceExhausted);
  // More references to an object already held are fine.
  ASSERT_TRUE(
      table_->AddRef(1, 3, ObjectTable::RefKind::kMapped, nullptr).ok());
  EXPECT_EQ(table_->HeldBy(1, 3), 2u);
  EXPECT_EQ(table_->entry(3)->refcount, 2u);
  // Another client has its own budget.
  ASSERT_TRUE(
      table_->AddRef(2, 3, ObjectTable::RefKind::kMapped, nullptr).ok());
  EXPECT_EQ(table_->entry(3)->refcount, 3u);
  // Dropping frees budget, and buckets are reused.
  EXPECT_EQ(*table_->DropRef(1, 0, nullptr), 0u);
  ASSERT_TRUE(
      table_->AddRef(1, 9, ObjectTable::RefKind::kMapped, nullptr).ok());
  EXPECT_EQ(table_->DropRef(1, 0, nullptr).status().code(),
            absl::StatusCode::kFailedPrecondition);
  uint32_t total = 0;
  table_->ForEachRef(1,
                     [&](uint32_t, uint32_t count, bool) { total += count; });
  EXPECT_EQ(total, 9u);
  EXPECT_EQ(table_->LiveRefs(1), 8u);
  table_->ClearSlot(1);
  EXPECT_EQ(table_->HeldBy(1, 3), 0u);
}

TEST_F(ObjectTableTest, FullReferenceTablesAskToGrowAndMoveIntact) {
  using Kind = ObjectTable::RefKind;
  for (uint32_t e = 0; e < 40; ++e) table_->Insert(ObjectId::Random(), e);
  for (uint32_t e = 0; e < 8; ++e) {
    ASSERT_TRUE(table_->AddRef(1, e, Kind::kHeld, nullptr).ok());
  }
  ASSERT_TRUE(table_->AddRef(1, 2, Kind::kMapped, nullptr).ok());
  absl::Status full = table_->AddRef(1, 8, Kind::kHeld, nullptr);
  EXPECT_TRUE(ObjectTable::IsRefRoomError(full)) << full;
  EXPECT_EQ(table_->RefBuckets(1), 16u);
  // 64 objects: tables grow to 128 buckets at most.
  EXPECT_EQ(table_->MaxRefBuckets(), 128u);
  // Moved into "arena" memory holding garbage: zeroed, references intact.
  const uint64_t at = layout_.arena_offset;
  std::memset(mem_ + at, 0xab, 224 * sizeof(RefBucket));
  ASSERT_TRUE(table_->MoveRefs(1, at, 32));
  EXPECT_EQ(table_->RefBuckets(1), 32u);
  EXPECT_EQ(reinterpret_cast<uint8_t*>(table_->refs(1)), mem_ + at);
  EXPECT_EQ(table_->HeldBy(1, 2), 2u);
  EXPECT_TRUE(table_->MappedBy(1, 2));
  EXPECT_FALSE(table_->MappedBy(1, 3));
  EXPECT_EQ(table_->LiveRefs(1), 8u);
  for (uint32_t e = 8; e < 16; ++e) {
    ASSERT_TRUE(table_->AddRef(1, e, Kind::kHeld, nullptr).ok()) << e;
  }
  EXPECT_TRUE(
      ObjectTable::IsRefRoomError(table_->AddRef(1, 16, Kind::kHeld, nullptr)));
  ASSERT_TRUE(table_->MoveRefs(1, at + 32 * sizeof(RefBucket), 64));
  ASSERT_TRUE(table_->MoveRefs(1, at + 96 * sizeof(RefBucket), 128));
  for (uint32_t e = 16; e < 40; ++e) {
    ASSERT_TRUE(table_->AddRef(1, e, Kind::kHeld, nullptr).ok()) << e;
  }
  uint32_t total = 0;
  table_->ForEachRef(1,
                     [&](uint32_t, uint32_t count, bool) { total += count; });
  EXPECT_EQ(total, 41u);
  // Other clients keep their own tables.
  ASSERT_TRUE(table_->AddRef(2, 5, Kind::kHeld, nullptr).ok());
  EXPECT_EQ(table_->RefBuckets(2), 16u);
  EXPECT_EQ(table_->entry(5)->refcount, 2u);
  // Cleared, the slot has its own (empty) table again.
  table_->ClearSlot(1);
  EXPECT_EQ(table_->RefBuckets(1), 16u);
  EXPECT_EQ(table_->HeldBy(1, 2), 0u);
  EXPECT_EQ(table_->LiveRefs(1), 0u);
}

TEST_F(ObjectTableTest, AtTheLargestTableAClientHoldsEveryObject) {
  // 128 buckets for 64 objects: one client holds them all, and the table
  // asks for no more room.
  ASSERT_TRUE(table_->MoveRefs(1, layout_.arena_offset, 128));
  for (uint32_t e = 0; e < 64; ++e) {
    table_->Insert(ObjectId::Random(), e);
    ASSERT_TRUE(table_->AddRef(1, e, ObjectTable::RefKind::kHeld, nullptr).ok())
        << e;
  }
  EXPECT_EQ(table_->LiveRefs(1), 64u);
}

TEST_F(ObjectTableTest, MappedReferencesAreCountedPerClient) {
  using Kind = ObjectTable::RefKind;
  table_->Insert(ObjectId::Random(), 4);
  const ObjectEntry* x = table_->entry(4);
  // A held reference (Transfer's receiver) maps nothing.
  ASSERT_TRUE(table_->AddRef(1, 4, Kind::kHeld, nullptr).ok());
  EXPECT_EQ(x->mappers, 0u);
  EXPECT_FALSE(table_->MappedBy(1, 4));
  // The client's own Get maps it; its references stay mapped until the last.
  ASSERT_TRUE(table_->AddRef(1, 4, Kind::kMapped, nullptr).ok());
  EXPECT_EQ(x->mappers, 1u);
  EXPECT_EQ(table_->HeldBy(1, 4), 2u);
  ASSERT_TRUE(table_->AddRef(2, 4, Kind::kMapped, nullptr).ok());
  ASSERT_TRUE(table_->AddRef(2, 4, Kind::kMapped, nullptr).ok());
  EXPECT_EQ(x->mappers, 2u);
  EXPECT_EQ(x->refcount, 4u);
  EXPECT_EQ(*table_->DropRef(1, 4, nullptr), 3u);
  EXPECT_TRUE(table_->MappedBy(1, 4));
  EXPECT_EQ(x->mappers, 2u);
  EXPECT_EQ(*table_->DropRef(1, 4, nullptr), 2u);
  EXPECT_FALSE(table_->MappedBy(1, 4));
  EXPECT_EQ(x->mappers, 1u);
  int mapped = 0;
  table_->ForEachRef(2, [&](uint32_t e, uint32_t count, bool m) {
    EXPECT_EQ(e, 4u);
    EXPECT_EQ(count, 2u);
    mapped += m;
  });
  EXPECT_EQ(mapped, 1);
  EXPECT_EQ(*table_->DropRef(2, 4, nullptr), 1u);
  EXPECT_EQ(*table_->DropRef(2, 4, nullptr), 0u);
  EXPECT_EQ(x->mappers, 0u);
  // A released bucket taken again by a held reference is not mapped.
  ASSERT_TRUE(table_->AddRef(1, 4, Kind::kHeld, nullptr).ok());
  EXPECT_FALSE(table_->MappedBy(1, 4));
  EXPECT_EQ(x->mappers, 0u);
  // A mapping rolled back (its process died inside the lock) is undone.
  auto lock =
      LockGuard::Acquire(mem_, &table_->header()->lock, absl::Seconds(1));
  ASSERT_TRUE(lock.ok());
  {
    JournaledWriter journal(mem_, &table_->header()->lock.journal);
    ASSERT_TRUE(table_->AddRef(1, 4, Kind::kMapped, &journal).ok());
    EXPECT_EQ(x->mappers, 1u);
    EXPECT_TRUE(RollBackJournal(mem_, &table_->header()->lock.journal));
  }
  EXPECT_EQ(x->mappers, 0u);
  EXPECT_FALSE(table_->MappedBy(1, 4));
  EXPECT_EQ(table_->HeldBy(1, 4), 1u);
}

TEST_F(ObjectTableTest, RollBackUndoesAnUnfinishedOperation) {
  table_->Insert(ObjectId::Random(), 5);
  auto lock =
      LockGuard::Acquire(mem_, &table_->header()->lock, absl::Seconds(1));
  ASSERT_TRUE(lock.ok());
  {
    JournaledWriter journal(mem_, &table_->header()->lock.journal);
    ASSERT_TRUE(
        table_->AddRef(2, 5, ObjectTable::RefKind::kMapped, &journal).ok());
    EXPECT_EQ(table_->entry(5)->refcount, 1u);
    // No commit: pretend this process died here.
    EXPECT_TRUE(RollBackJournal(mem_, &table_->header()->lock.journal));
  }
  EXPECT_EQ(table_->entry(5)->refcount, 0u);
  EXPECT_EQ(table_->HeldBy(2, 5), 0u);
  EXPECT_EQ(table_->LiveRefs(2), 0u);
  // A committed operation is not rolled back.
  {
    JournaledWriter journal(mem_, &table_->header()->lock.journal);
    ASSERT_TRUE(
        table_->AddRef(2, 5, ObjectTable::RefKind::kMapped, &journal).ok());
  }
  EXPECT_FALSE(RollBackJournal(mem_, &table_->header()->lock.journal));
  EXPECT_EQ(table_->entry(5)->refcount, 1u);
}

TEST_F(ObjectTableTest, LockHolderDeathIsRepairedByTheNextLocker) {
  table_->Insert(ObjectId::Random(), 7);
  pid_t pid = fork();
  if (pid == 0) {
    auto lock =
        LockGuard::Acquire(mem_, &table_->header()->lock, absl::Seconds(1));
    if (!lock.ok()) _exit(1);
    JournaledWriter journal(mem_, &table_->header()->lock.journal);
    journal.Write32(&table_->entry(7)->refcount, 41);
    _exit(0);  // dies holding the lock, mid-operation
  }
  int status;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  auto lock =
      LockGuard::Acquire(mem_, &table_->header()->lock, absl::Seconds(1));
  ASSERT_TRUE(lock.ok()) << lock.status();
  EXPECT_TRUE(lock->repaired());
  EXPECT_EQ(table_->entry(7)->refcount, 0u);
  EXPECT_EQ(table_->header()->lock.repairs, 1u);
}

TEST_F(ObjectTableTest, LockTimesOutNamingTheHolder) {
  pid_t pid = fork();
  if (pid == 0) {
    auto lock =
        LockGuard::Acquire(mem_, &table_->header()->lock, absl::Seconds(1));
    pause();  // holds the lock until killed
    _exit(0);
  }
  // Wait until the child holds it.
  while (table_->header()->lock.owner_pid != pid) usleep(1000);
  auto lock =
      LockGuard::Acquire(mem_, &table_->header()->lock, absl::Milliseconds(50));
  EXPECT_EQ(lock.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(lock.status().message().find(std::to_string(pid)),
            std::string::npos);
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  auto after =
      LockGuard::Acquire(mem_, &table_->header()->lock, absl::Seconds(1));
  EXPECT_TRUE(after.ok());
}

}  // namespace
}  // namespace shoal::shm
