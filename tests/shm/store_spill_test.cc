// Spilling with real processes: a `shoal store` with a small arena and a
// spill folder, clients in this process and in helper processes. Objects a
// client holds without mapping them (handed over by Transfer, as a worker
// hands a task's output to its client) leave for disk when the arena is full
// and come back, byte for byte, at their next Get.
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/subprocess.h"
#include "base/temp_dir.h"
#include "gtest/gtest.h"
#include "tests/testing/store_fixture.h"
#include "tests/testing/test_env.h"
#include "tools/bench/bench_util.h"

namespace shoal {
namespace {

using shoal::testing::StoreProcess;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kStoreBytes = 16 * kMiB;

// A 16 MiB store with room for its tables, and flags after them.
std::vector<std::string> Flags(std::vector<std::string> more = {}) {
  std::vector<std::string> f = {"--max-objects", "256", "--max-clients", "8"};
  f.insert(f.end(), more.begin(), more.end());
  return f;
}

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;
  while (struct dirent* e = readdir(d)) {
    const std::string n = e->d_name;
    if (n != "." && n != "..") out.push_back(n);
  }
  closedir(d);
  return out;
}

mode_t ModeOf(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return 0;
  return st.st_mode & 07777;
}

class StoreSpillTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto dir = TempDir::Create("shoal-spill-");
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = std::move(*dir);
  }

  void StartStore(std::vector<std::string> flags = {}) {
    producer_.reset();
    holder_.reset();
    reader_.reset();
    flags.insert(flags.end(), {"--spill-dir", dir_.path()});
    auto store = StoreProcess::Start(kStoreBytes, Flags(std::move(flags)));
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    auto p = store_->Connect("producer");
    ASSERT_TRUE(p.ok()) << p.status();
    producer_ = *std::move(p);
    auto h = store_->Connect("holder");
    ASSERT_TRUE(h.ok()) << h.status();
    holder_ = *std::move(h);
    auto r = store_->Connect("reader");
    ASSERT_TRUE(r.ok()) << r.status();
    reader_ = *std::move(r);
  }

  // The store's spill folder (the one folder it made in dir_).
  std::string SpillFolder() {
    std::vector<std::string> e = Entries(dir_.path());
    return e.size() == 1 ? dir_.path() + "/" + e[0] : "";
  }
  // Objects on disk (the folder's files but its owner file).
  size_t SpilledFiles() {
    const std::string f = SpillFolder();
    return f.empty() ? 0 : Entries(f).size() - 1;
  }

  // SpilledFiles once the spill thread has finished the moves it was given:
  // a round spills ahead of the allocation that asked, and that allocation
  // is served as soon as enough room is free, so files may still appear
  // after it returned. Settled: the same count for 300 ms (at most 10 s).
  size_t SettledSpilledFiles() {
    size_t last = SpilledFiles();
    absl::Time same_since = absl::Now();
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (absl::Now() - same_since < absl::Milliseconds(300) &&
           absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(10));
      const size_t now = SpilledFiles();
      if (now != last) {
        last = now;
        same_since = absl::Now();
      }
    }
    return last;
  }

  // Puts `nbytes` of pattern `seed` and hands the reference to the holder,
  // which keeps the object without mapping it.
  absl::StatusOr<ObjectId> PutHeld(uint64_t nbytes, uint64_t seed) {
    std::vector<uint8_t> data(nbytes);
    bench::FillPattern(data.data(), nbytes, seed);
    const ObjectId id = ObjectId::Random();
    absl::Status s = producer_->Put(
        id, TensorMeta::Bytes(static_cast<int64_t>(nbytes)), data.data());
    if (!s.ok()) return s;
    s = producer_->Transfer(id, holder_->client_slot());
    if (!s.ok()) return s;
    return id;
  }

  // The reader maps `id` (a Get, read back if spilled), checks it against
  // the pattern and releases it: mapped by no one again, the holder's
  // reference keeps it.
  void ExpectHolds(const ObjectId& id, uint64_t nbytes, uint64_t seed) {
    auto view = reader_->Get(id);
    ASSERT_TRUE(view.ok()) << view.status();
    std::vector<uint8_t> want(nbytes);
    bench::FillPattern(want.data(), nbytes, seed);
    ASSERT_EQ(view->nbytes, nbytes);
    EXPECT_EQ(std::memcmp(view->data, want.data(), nbytes), 0) << seed;
    ASSERT_TRUE(reader_->Release(id).ok());
  }

  TempDir dir_;
  std::unique_ptr<StoreProcess> store_;
  std::unique_ptr<shm::StoreClient> producer_;
  std::unique_ptr<shm::StoreClient> holder_;
  std::unique_ptr<shm::StoreClient> reader_;
};

TEST_F(StoreSpillTest, HeldObjectsSpillAndComeBackByteForByte) {
  StartStore();
  const std::string folder = SpillFolder();
  ASSERT_FALSE(folder.empty());
  EXPECT_EQ(ModeOf(folder), 0700);
  // Four times the store, in objects of 1 MiB and of odd sizes.
  std::vector<std::pair<ObjectId, uint64_t>> held;
  for (uint64_t i = 0; i < 64; ++i) {
    const uint64_t n = i % 3 == 0 ? kMiB : kMiB - 4096 * i - 13;
    auto id = PutHeld(n, i);
    ASSERT_TRUE(id.ok()) << i << ": " << id.status();
    held.emplace_back(*id, n);
  }
  EXPECT_GE(SpilledFiles(), 40u);
  for (const std::string& f : Entries(folder)) {
    EXPECT_EQ(ModeOf(folder + "/" + f), 0600) << f;
  }
  // Every one reads back correctly, oldest (spilled) first; reading one in
  // spills another.
  for (uint64_t i = 0; i < held.size(); ++i) {
    ExpectHolds(held[i].first, held[i].second, i);
  }
  // And again, in the other order.
  for (uint64_t i = held.size(); i-- > 0;) {
    ExpectHolds(held[i].first, held[i].second, i);
  }
  // Contains sees spilled objects.
  size_t contained = 0;
  for (const auto& [id, n] : held) contained += *holder_->Contains(id);
  EXPECT_EQ(contained, held.size());
}

TEST_F(StoreSpillTest, ASpilledObjectIsMappedAgainByAnotherProcess) {
  StartStore();
  std::vector<ObjectId> ids;
  for (uint64_t i = 0; i < 40; ++i) {
    auto id = PutHeld(kMiB, 100 + i);
    ASSERT_TRUE(id.ok()) << id.status();
    ids.push_back(*id);
  }
  ASSERT_GT(SpilledFiles(), 0u);
  // The first is the least recently used: on disk. Another process maps it
  // with a Get of timeout 0 (no waiting: reading back is not waiting).
  std::vector<std::string> args = {
      shoal::testing::RunfilePath("tests/shm/store_helper"),
      "get",
      store_->endpoint(),
      ids[0].ToHex(),
      absl::StrCat(kMiB),
      "100",
      "0"};
  SubprocessOptions o;
  o.pipe_stdout = true;
  o.parent_death_signal = SIGKILL;
  auto reader = Subprocess::Start(args, o);
  ASSERT_TRUE(reader.ok()) << reader.status();
  auto line = reader->ReadLine(absl::Seconds(20));
  ASSERT_TRUE(line.ok()) << line.status();
  EXPECT_TRUE(absl::StartsWith(*line, "ok ")) << *line;
  EXPECT_EQ(*reader->Wait(absl::Seconds(10)), 0);
}

TEST_F(StoreSpillTest, MappedObjectsNeverSpill) {
  StartStore();
  // The producer keeps every object it puts mapped (its Put reference).
  std::vector<ObjectId> mapped;
  std::vector<uint8_t> data(kMiB);
  absl::Status last;
  for (uint64_t i = 0; i < 32; ++i) {
    bench::FillPattern(data.data(), kMiB, 500 + i);
    const ObjectId id = ObjectId::Random();
    last = producer_->Put(id, TensorMeta::Bytes(kMiB), data.data());
    if (!last.ok()) break;
    mapped.push_back(id);
  }
  EXPECT_TRUE(absl::IsResourceExhausted(last)) << last;
  EXPECT_TRUE(absl::StrContains(last.message(), "mapped by a process")) << last;
  EXPECT_GE(mapped.size(), 12u);
  EXPECT_EQ(SpilledFiles(), 0u);
  for (uint64_t i = 0; i < mapped.size(); ++i) {
    auto view = producer_->Get(mapped[i]);
    ASSERT_TRUE(view.ok());
    bench::FillPattern(data.data(), kMiB, 500 + i);
    EXPECT_EQ(std::memcmp(view->data, data.data(), kMiB), 0);
    ASSERT_TRUE(producer_->Release(mapped[i]).ok());
  }
}

TEST_F(StoreSpillTest, AFullQuotaIsAClearErrorAndLosesNothing) {
  StartStore({"--spill-bytes", "8M"});
  std::vector<ObjectId> held;
  absl::Status refused;
  for (uint64_t i = 0; i < 64; ++i) {
    auto id = PutHeld(kMiB, 900 + i);
    if (!id.ok()) {
      refused = id.status();
      break;
    }
    held.push_back(*id);
  }
  ASSERT_TRUE(absl::IsResourceExhausted(refused)) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), "--spill-bytes")) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), "store full")) << refused;
  // Store (~15 MiB of arena) plus 8 MiB of disk, give or take one object.
  EXPECT_GE(held.size(), 20u);
  EXPECT_LE(SpilledFiles(), 8u);
  for (uint64_t i = 0; i < held.size(); ++i) {
    ExpectHolds(held[i], kMiB, 900 + i);
  }
  // Deleting some makes room again.
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(holder_->Release(held[i]).ok());
    ASSERT_TRUE(holder_->Delete(held[i]).ok());
  }
  auto id = PutHeld(kMiB, 7);
  EXPECT_TRUE(id.ok()) << id.status();
}

TEST_F(StoreSpillTest, DeletingASpilledObjectRemovesItsFile) {
  StartStore();
  std::vector<ObjectId> ids;
  for (uint64_t i = 0; i < 30; ++i) {
    auto id = PutHeld(kMiB, i);
    ASSERT_TRUE(id.ok()) << id.status();
    ids.push_back(*id);
  }
  const size_t spilled = SettledSpilledFiles();
  ASSERT_GT(spilled, 0u);
  // The oldest are on disk: deleted while held, then released.
  ASSERT_TRUE(holder_->Delete(ids[0]).ok());
  EXPECT_EQ(SpilledFiles(), spilled);  // still held
  ASSERT_TRUE(holder_->Release(ids[0]).ok());
  shoal::testing::WaitUntil([&] { return SpilledFiles() == spilled - 1; },
                            absl::Seconds(5));
  EXPECT_EQ(SpilledFiles(), spilled - 1);
  // Released first, then deleted.
  ASSERT_TRUE(holder_->Release(ids[1]).ok());
  ASSERT_TRUE(holder_->Delete(ids[1]).ok());
  shoal::testing::WaitUntil([&] { return SpilledFiles() == spilled - 2; },
                            absl::Seconds(5));
  EXPECT_EQ(SpilledFiles(), spilled - 2);
  EXPECT_TRUE(absl::IsNotFound(holder_->Get(ids[1]).status()));
  // A holder that goes away leaves its spilled objects unreferenced: freed
  // (their files removed) once their room is needed, as evicted objects are.
  holder_.reset();
  for (uint64_t i = 0; i < 20; ++i) {
    std::vector<uint8_t> data(kMiB, 1);
    const ObjectId id = ObjectId::Random();
    ASSERT_TRUE(producer_->Put(id, TensorMeta::Bytes(kMiB), data.data()).ok());
    ASSERT_TRUE(producer_->Release(id).ok());
    ASSERT_TRUE(producer_->Delete(id).ok());
  }
  auto stats = producer_->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->referenced_objects(), 0u);
}

TEST_F(StoreSpillTest, StopRemovesTheFolderAndACrashLeavesItPrivate) {
  StartStore();
  for (uint64_t i = 0; i < 30; ++i) ASSERT_TRUE(PutHeld(kMiB, i).ok());
  ASSERT_GT(SpilledFiles(), 0u);
  producer_.reset();
  holder_.reset();
  reader_.reset();
  ASSERT_EQ(*store_->Stop(), 0);
  store_.reset();
  EXPECT_TRUE(Entries(dir_.path()).empty());

  // A store killed outright leaves its folder, readable by no one else, and
  // the next store started with the same --spill-dir removes it.
  StartStore();
  for (uint64_t i = 0; i < 30; ++i) ASSERT_TRUE(PutHeld(kMiB, i).ok());
  const std::string folder = SpillFolder();
  ASSERT_GT(SpilledFiles(), 0u);
  producer_.reset();
  holder_.reset();
  reader_.reset();
  kill(store_->process().pid(), SIGKILL);
  (void)store_->process().Wait(absl::Seconds(10));
  store_.reset();
  EXPECT_EQ(ModeOf(folder), 0700);
  for (const std::string& f : Entries(folder)) {
    EXPECT_EQ(ModeOf(folder + "/" + f) & 077, 0) << f;
  }
  StartStore();
  std::vector<std::string> left = Entries(dir_.path());
  ASSERT_EQ(left.size(), 1u);
  EXPECT_NE(dir_.path() + "/" + left[0], folder);
}

TEST_F(StoreSpillTest, AFolderOfAnotherUserOrOpenToOthersIsRefused) {
  const std::string open_dir = dir_.File("open");
  ASSERT_EQ(mkdir(open_dir.c_str(), 0777), 0);
  ASSERT_EQ(chmod(open_dir.c_str(), 0777), 0);
  auto store =
      StoreProcess::Start(kStoreBytes, Flags({"--spill-dir", open_dir}));
  EXPECT_FALSE(store.ok());
  if (geteuid() == 0) {
    const std::string theirs = dir_.File("theirs");
    ASSERT_EQ(mkdir(theirs.c_str(), 0700), 0);
    ASSERT_EQ(chown(theirs.c_str(), 65534, 65534), 0);
    auto other =
        StoreProcess::Start(kStoreBytes, Flags({"--spill-dir", theirs}));
    EXPECT_FALSE(other.ok());
  }
  // Spilling off: a full store refuses as before.
  StartStore({"--spill-bytes", "0"});
  absl::Status last;
  for (uint64_t i = 0; i < 32 && last.ok(); ++i)
    last = PutHeld(kMiB, i).status();
  EXPECT_TRUE(absl::IsResourceExhausted(last)) << last;
  EXPECT_FALSE(absl::StrContains(last.message(), "spill")) << last;
}

}  // namespace
}  // namespace shoal
