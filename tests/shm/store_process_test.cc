// The store with real processes: a `shoal store` process, clients in this test
// process, and clients in helper processes that are killed at awkward moments.
#include <signal.h>
#include <sys/stat.h>

#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/subprocess.h"
#include "gtest/gtest.h"
#include "tests/testing/store_fixture.h"
#include "tests/testing/test_env.h"
#include "tools/bench/bench_util.h"

namespace shoal {
namespace {

using shoal::testing::StoreProcess;
using shoal::testing::WaitUntil;

constexpr uint64_t kStoreBytes = uint64_t{64} << 20;

absl::StatusOr<Subprocess> StartHelper(std::vector<std::string> args) {
  args.insert(args.begin(),
              shoal::testing::RunfilePath("tests/shm/store_helper"));
  SubprocessOptions o;
  o.pipe_stdin = true;
  o.pipe_stdout = true;
  o.parent_death_signal = SIGKILL;
  return Subprocess::Start(args, o);
}

std::vector<uint8_t> Pattern(uint64_t n, uint64_t seed) {
  std::vector<uint8_t> v(n);
  bench::FillPattern(v.data(), n, seed);
  return v;
}

class StoreProcessTest : public ::testing::Test {
 protected:
  void SetUp() override { StartStore(kStoreBytes); }

  void StartStore(uint64_t bytes, std::vector<std::string> flags = {}) {
    client_.reset();
    auto store = StoreProcess::Start(bytes, std::move(flags));
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    auto client = store_->Connect();
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }

  shm::StoreStats Stats() {
    auto s = client_->Stats();
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *s : shm::StoreStats{};
  }

  std::unique_ptr<StoreProcess> store_;
  std::unique_ptr<shm::StoreClient> client_;
};

TEST_F(StoreProcessTest, PutInOneProcessGetInAnother) {
  // Another process puts; this one reads.
  auto producer = StartHelper({"put", store_->endpoint(), "1000003", "7"});
  ASSERT_TRUE(producer.ok()) << producer.status();
  auto line = producer->ReadLine(absl::Seconds(20));
  ASSERT_TRUE(line.ok()) << line.status();
  std::vector<std::string> parts = absl::StrSplit(*line, ' ');
  ASSERT_EQ(parts.size(), 2u) << *line;
  auto id = ObjectId::FromHex(parts[0]);
  ASSERT_TRUE(id.ok());
  auto view = client_->Get(*id);
  ASSERT_TRUE(view.ok()) << view.status();
  std::vector<uint8_t> want = Pattern(1000003, 7);
  ASSERT_EQ(view->nbytes, want.size());
  EXPECT_EQ(std::memcmp(view->data, want.data(), want.size()), 0);
  // Zero-copy: both processes see the object at the same segment offset.
  EXPECT_EQ(absl::StrCat(view->data - client_->segment_base()), parts[1]);
  EXPECT_EQ(view->meta.dtype, DType::kRaw);
  ASSERT_TRUE(client_->Release(*id).ok());

  // This process puts; another reads.
  ObjectId mine = ObjectId::Random();
  std::vector<uint8_t> data = Pattern(4096 * 3 + 5, 11);
  TensorMeta meta = TensorMeta::Bytes(static_cast<int64_t>(data.size()));
  ASSERT_TRUE(client_->Put(mine, meta, data.data()).ok());
  auto reader = StartHelper({"get", store_->endpoint(), mine.ToHex(),
                             absl::StrCat(data.size()), "11", "0"});
  ASSERT_TRUE(reader.ok());
  auto got = reader->ReadLine(absl::Seconds(20));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(absl::StartsWith(*got, "ok ")) << *got;
  producer->CloseStdin();
  EXPECT_EQ(*producer->Wait(absl::Seconds(10)), 0);
}

TEST_F(StoreProcessTest, TensorMetadataTravels) {
  ObjectId id = ObjectId::Random();
  TensorMeta meta = TensorMeta::Contiguous(DType::kBF16, {3, 5, 7});
  std::vector<uint8_t> data(meta.NumBytes(), 1);
  ASSERT_TRUE(client_->Put(id, meta, data.data()).ok());
  auto other = store_->Connect("other");
  ASSERT_TRUE(other.ok());
  auto view = (*other)->Get(id);
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->meta, meta);
  EXPECT_EQ(view->nbytes, 3u * 5 * 7 * 2);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(view->data) % 64, 0u)
      << "64-byte aligned";
}

TEST_F(StoreProcessTest, GetWaitsForSealAndTimesOut) {
  ObjectId id = ObjectId::Random();
  // Not there at all, no wait: NotFound.
  EXPECT_EQ(client_->Get(id).status().code(), absl::StatusCode::kNotFound);
  // A reader in another process waits while we create, write and seal.
  auto reader = StartHelper(
      {"get", store_->endpoint(), id.ToHex(), "1024", "5", "10000"});
  ASSERT_TRUE(reader.ok());
  absl::SleepFor(absl::Milliseconds(100));
  auto buf = client_->CreateBytes(id, 1024);
  ASSERT_TRUE(buf.ok()) << buf.status();
  bench::FillPattern(buf->data, 1024, 5);
  absl::SleepFor(absl::Milliseconds(50));
  ASSERT_TRUE(client_->Seal(id).ok());
  auto got = reader->ReadLine(absl::Seconds(20));
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(absl::StartsWith(*got, "ok ")) << *got;
  // Never sealed: DeadlineExceeded after the timeout.
  ObjectId never = ObjectId::Random();
  const absl::Time start = absl::Now();
  auto r = client_->Get(never, absl::Milliseconds(200));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded)
      << r.status();
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(190));
}

TEST_F(StoreProcessTest, LifecycleErrors) {
  ObjectId id = ObjectId::Random();
  ASSERT_TRUE(client_->CreateBytes(id, 100).ok());
  EXPECT_EQ(client_->CreateBytes(id, 100).status().code(),
            absl::StatusCode::kAlreadyExists);
  // Not sealed: invisible to Get, cannot be deleted.
  EXPECT_EQ(client_->Get(id).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->Delete(id).code(), absl::StatusCode::kFailedPrecondition);
  // Another client may not seal or abort it.
  auto other = store_->Connect("other");
  ASSERT_TRUE(other.ok());
  EXPECT_EQ((*other)->Seal(id).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ((*other)->Abort(id).code(), absl::StatusCode::kPermissionDenied);
  ASSERT_TRUE(client_->Seal(id).ok());
  EXPECT_EQ(client_->Seal(id).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(client_->Abort(id).code(), absl::StatusCode::kFailedPrecondition);
  // Releasing more than held.
  ASSERT_TRUE(client_->Release(id).ok());
  EXPECT_EQ(client_->Release(id).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(client_->Release(ObjectId::Random()).code(),
            absl::StatusCode::kNotFound);
  // Abort frees immediately.
  ObjectId aborted = ObjectId::Random();
  const uint64_t before = Stats().used_bytes();
  ASSERT_TRUE(client_->CreateBytes(aborted, 1 << 20).ok());
  EXPECT_GT(Stats().used_bytes(), before);
  ASSERT_TRUE(client_->Abort(aborted).ok());
  EXPECT_EQ(Stats().used_bytes(), before);
  // Bad metadata never reaches the service.
  TensorMeta bad = TensorMeta::Contiguous(DType::kF32, {-1});
  EXPECT_EQ(client_->Create(ObjectId::Random(), bad).status().code(),
            absl::StatusCode::kInvalidArgument);
  TensorMeta gpu = TensorMeta::Contiguous(DType::kF32, {4}, Device::Cuda(0));
  EXPECT_EQ(client_->Create(ObjectId::Random(), gpu).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(StoreProcessTest, DeleteIsDeferredUntilLastRelease) {
  ObjectId id = ObjectId::Random();
  std::vector<uint8_t> data(1 << 20, 3);
  const uint64_t baseline = Stats().used_bytes();
  ASSERT_TRUE(
      client_->Put(id, TensorMeta::Bytes(data.size()), data.data()).ok());
  auto view = client_->Get(id);  // a second reference
  ASSERT_TRUE(view.ok());
  ASSERT_TRUE(client_->Delete(id).ok());
  EXPECT_FALSE(*client_->Contains(id));
  EXPECT_EQ(client_->Get(id).status().code(), absl::StatusCode::kNotFound);
  EXPECT_GT(Stats().used_bytes(), baseline);
  // The bytes stay readable while referenced.
  EXPECT_EQ(view->data[12345], 3);
  ASSERT_TRUE(client_->Release(id).ok());
  EXPECT_GT(Stats().used_bytes(), baseline);
  ASSERT_TRUE(client_->Release(id).ok());
  EXPECT_TRUE(WaitUntil([&] { return Stats().used_bytes() == baseline; },
                        absl::Seconds(5)));
  EXPECT_EQ(Stats().objects(), 0u);
}

TEST_F(StoreProcessTest, ReleaseAndDeleteFreesAtTheLastReference) {
  ObjectId id = ObjectId::Random();
  std::vector<uint8_t> data(1 << 20, 5);
  const uint64_t baseline = Stats().used_bytes();
  ASSERT_TRUE(
      client_->Put(id, TensorMeta::Bytes(data.size()), data.data()).ok());
  auto view = client_->Get(id);  // a second reference
  ASSERT_TRUE(view.ok());
  ASSERT_TRUE(client_->ReleaseAndDelete(id).ok());
  EXPECT_FALSE(*client_->Contains(id));
  EXPECT_EQ(client_->Get(id).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(view->data[4321], 5);  // readable while referenced
  EXPECT_GT(Stats().used_bytes(), baseline);
  ASSERT_TRUE(client_->Release(id).ok());
  EXPECT_TRUE(WaitUntil([&] { return Stats().used_bytes() == baseline; },
                        absl::Seconds(5)));
  // One reference: the call itself has the service free it.
  ObjectId only = ObjectId::Random();
  ASSERT_TRUE(
      client_->Put(only, TensorMeta::Bytes(data.size()), data.data()).ok());
  ASSERT_TRUE(client_->ReleaseAndDelete(only).ok());
  EXPECT_TRUE(WaitUntil([&] { return Stats().used_bytes() == baseline; },
                        absl::Seconds(5)));
  EXPECT_EQ(Stats().objects(), 0u);
  EXPECT_EQ(client_->ReleaseAndDelete(only).code(),
            absl::StatusCode::kNotFound);
}

TEST_F(StoreProcessTest, StatsCountEveryClientsCreatesAndGetsForGood) {
  const shm::StoreStats base = Stats();
  std::vector<ObjectId> ids;
  std::vector<uint8_t> data(4096, 5);
  std::vector<std::string> args = {"hold", store_->endpoint()};
  for (int i = 0; i < 3; ++i) {
    ids.push_back(ObjectId::Random());
    ASSERT_TRUE(
        client_->Put(ids.back(), TensorMeta::Bytes(data.size()), data.data())
            .ok());
    args.push_back(ids.back().ToHex());
  }
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(client_->Get(ids[0]).ok());
    ASSERT_TRUE(client_->Release(ids[0]).ok());
  }
  // A multi-get counts each object; one that is not there counts nothing.
  std::vector<ObjectId> many = ids;
  many.push_back(ObjectId::Random());
  std::vector<absl::StatusOr<shm::ObjectBuffer>> got =
      client_->Get(many, absl::ZeroDuration());
  ASSERT_TRUE(got[2].ok()) << got[2].status();
  EXPECT_FALSE(got[3].ok());
  shm::StoreStats s = Stats();
  EXPECT_EQ(s.creates() - base.creates(), 3u);
  EXPECT_EQ(s.created_bytes() - base.created_bytes(), 3u * 4096);
  EXPECT_EQ(s.gets() - base.gets(), 5u);
  EXPECT_EQ(s.get_bytes() - base.get_bytes(), 5u * 4096);
  // Another process's gets count too, and stay counted once it is gone.
  auto holder = StartHelper(args);
  ASSERT_TRUE(holder.ok());
  ASSERT_EQ(*holder->ReadLine(absl::Seconds(20)), "held");
  EXPECT_EQ(Stats().gets() - base.gets(), 8u);
  holder->Signal(SIGKILL);
  ASSERT_TRUE(holder->Wait(absl::Seconds(10)).ok());
  EXPECT_TRUE(WaitUntil([&] { return Stats().clients() == base.clients(); },
                        absl::Seconds(5)));
  s = Stats();
  EXPECT_EQ(s.gets() - base.gets(), 8u);
  EXPECT_EQ(s.get_bytes() - base.get_bytes(), 8u * 4096);
}

TEST_F(StoreProcessTest, KilledClientsReferencesAreReleased) {
  const shm::StoreStats baseline = Stats();
  std::vector<std::string> args = {"hold", store_->endpoint()};
  std::vector<ObjectId> ids;
  std::vector<uint8_t> data(256 << 10, 9);
  for (int i = 0; i < 8; ++i) {
    ids.push_back(ObjectId::Random());
    ASSERT_TRUE(
        client_->Put(ids.back(), TensorMeta::Bytes(data.size()), data.data())
            .ok());
    ASSERT_TRUE(client_->Release(ids.back()).ok());
    args.push_back(ids.back().ToHex());
  }
  auto holder = StartHelper(args);
  ASSERT_TRUE(holder.ok());
  ASSERT_EQ(*holder->ReadLine(absl::Seconds(20)), "held");
  EXPECT_EQ(Stats().referenced_objects(), 8u);
  // Deleting while the other process holds them defers the frees.
  for (const ObjectId& id : ids) ASSERT_TRUE(client_->Delete(id).ok());
  EXPECT_GT(Stats().used_bytes(), baseline.used_bytes());
  holder->Signal(SIGKILL);
  ASSERT_TRUE(holder->Wait(absl::Seconds(10)).ok());
  EXPECT_TRUE(WaitUntil(
      [&] {
        shm::StoreStats s = Stats();
        return s.used_bytes() == baseline.used_bytes() && s.objects() == 0 &&
               s.referenced_objects() == 0 && s.clients() == baseline.clients();
      },
      absl::Seconds(5)))
      << "used " << Stats().used_bytes() << " vs " << baseline.used_bytes();
}

TEST_F(StoreProcessTest, ClientKilledMidCreateLeaksNothing) {
  const uint64_t baseline = Stats().used_bytes();
  ObjectId id = ObjectId::Random();
  auto creator =
      StartHelper({"create", store_->endpoint(), id.ToHex(), "3000000"});
  ASSERT_TRUE(creator.ok());
  ASSERT_EQ(*creator->ReadLine(absl::Seconds(20)), "created");
  EXPECT_GT(Stats().used_bytes(), baseline);
  EXPECT_EQ(Stats().objects(), 1u);
  creator->Signal(SIGKILL);
  ASSERT_TRUE(creator->Wait(absl::Seconds(10)).ok());
  EXPECT_TRUE(
      WaitUntil([&] { return Stats().objects() == 0; }, absl::Seconds(5)));
  EXPECT_EQ(Stats().used_bytes(), baseline);
  EXPECT_FALSE(*client_->Contains(id));
  // The id is free again and the table is consistent.
  std::vector<uint8_t> data(100, 1);
  ASSERT_TRUE(client_->Put(id, TensorMeta::Bytes(100), data.data()).ok());
  EXPECT_TRUE(*client_->Contains(id));
}

TEST_F(StoreProcessTest, ClientKilledInsideTheTableLockIsRolledBack) {
  ObjectId id = ObjectId::Random();
  std::vector<uint8_t> data(4096, 2);
  ASSERT_TRUE(
      client_->Put(id, TensorMeta::Bytes(data.size()), data.data()).ok());
  ASSERT_TRUE(client_->Release(id).ok());
  ASSERT_EQ(Stats().referenced_objects(), 0u);
  auto victim = StartHelper({"die-in-lock", store_->endpoint(), id.ToHex()});
  ASSERT_TRUE(victim.ok());
  ASSERT_EQ(*victim->ReadLine(absl::Seconds(20)), "dying");
  ASSERT_TRUE(victim->Wait(absl::Seconds(10)).ok());
  // The next locker (this Get) repairs: the half-taken reference is undone,
  // so after our own get+release nothing is referenced and the object can be
  // deleted and freed. Without the rollback its count would stay at 1.
  auto view = client_->Get(id);
  ASSERT_TRUE(view.ok()) << view.status();
  ASSERT_TRUE(client_->Release(id).ok());
  EXPECT_TRUE(WaitUntil([&] { return Stats().referenced_objects() == 0; },
                        absl::Seconds(5)));
  ASSERT_TRUE(client_->Delete(id).ok());
  EXPECT_TRUE(
      WaitUntil([&] { return Stats().objects() == 0; }, absl::Seconds(5)));
  EXPECT_EQ(Stats().lock_repairs(), 1u);
}

TEST_F(StoreProcessTest, FullStoreEvictsInLruOrderThenReportsExhaustion) {
  StartStore(8 << 20, {"--max-objects", "64", "--max-clients", "8",
                       "--prefault-ahead", "0"});
  const uint64_t capacity = Stats().capacity_bytes();
  const uint64_t chunk = capacity / 4;  // four objects fill the arena
  std::vector<uint8_t> data(chunk, 1);
  std::vector<ObjectId> ids(4);
  for (ObjectId& id : ids) {
    id = ObjectId::Random();
    ASSERT_TRUE(client_->Put(id, TensorMeta::Bytes(chunk), data.data()).ok());
  }
  // Everything is referenced: a fifth put is ResourceExhausted, naming sizes.
  ObjectId fifth = ObjectId::Random();
  absl::Status full =
      client_->Put(fifth, TensorMeta::Bytes(chunk), data.data());
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(full.message().find("requested"), std::string::npos) << full;
  EXPECT_NE(full.message().find("free"), std::string::npos) << full;
  // Release all, in order 0..3, then touch 0 again: LRU order is 1, 2, 3, 0.
  for (const ObjectId& id : ids) ASSERT_TRUE(client_->Release(id).ok());
  ASSERT_TRUE(client_->Get(ids[0]).ok());
  ASSERT_TRUE(client_->Release(ids[0]).ok());
  // Two more chunks: 1 and 2 are evicted, 3 and 0 stay.
  ASSERT_TRUE(client_->Put(fifth, TensorMeta::Bytes(chunk), data.data()).ok());
  ObjectId sixth = ObjectId::Random();
  ASSERT_TRUE(client_->Put(sixth, TensorMeta::Bytes(chunk), data.data()).ok());
  EXPECT_TRUE(*client_->Contains(ids[0]));
  EXPECT_FALSE(*client_->Contains(ids[1]));
  EXPECT_FALSE(*client_->Contains(ids[2]));
  EXPECT_TRUE(*client_->Contains(ids[3]));
  EXPECT_EQ(Stats().evictions(), 2u);
  // Bigger than the whole arena: exhausted, and nothing live was touched.
  std::vector<uint8_t> huge(capacity + 4096);
  EXPECT_EQ(
      client_
          ->Put(ObjectId::Random(), TensorMeta::Bytes(huge.size()), huge.data())
          .code(),
      absl::StatusCode::kResourceExhausted);
  auto view = client_->Get(fifth);
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->data[chunk - 1], 1);
}

TEST_F(StoreProcessTest, ObjectTableFullIsResourceExhausted) {
  StartStore(8 << 20, {"--max-objects", "16", "--max-clients", "8"});
  std::vector<uint8_t> byte(1, 0);
  for (int i = 0; i < 16; ++i) {
    ASSERT_TRUE(
        client_->Put(ObjectId::Random(), TensorMeta::Bytes(1), byte.data())
            .ok());
  }
  absl::Status s =
      client_->Put(ObjectId::Random(), TensorMeta::Bytes(1), byte.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
}

TEST_F(StoreProcessTest, StaleSegmentOfKilledStoreIsRemovedAtNextStart) {
  // Every store's start sweeps the segments of dead stores, so a store that
  // another test starts on the machine between the kill and the check below
  // removes this one first: then the kill is tried again, with a new store.
  std::string segment;
  for (int attempt = 0;; ++attempt) {
    client_.reset();
    segment = store_->segment_name();
    ASSERT_TRUE(shoal::testing::ShmExists(segment));
    store_->process().Signal(SIGKILL);
    ASSERT_TRUE(store_->process().Wait(absl::Seconds(10)).ok());
    // A SIGKILLed store cannot clean up: its segment stays.
    if (shoal::testing::ShmExists(segment)) break;
    ASSERT_LT(attempt, 4) << "the segment of a SIGKILLed store was gone "
                          << attempt + 1 << " times in a row";
    StartStore(kStoreBytes);
  }
  // Any new store sweeps stale segments of dead owners.
  StartStore(kStoreBytes);
  EXPECT_FALSE(shoal::testing::ShmExists(segment));
  // And a clean stop removes its own segment.
  const std::string mine = store_->segment_name();
  client_.reset();
  auto status = store_->Stop();
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(*status, 0) << DescribeWaitStatus(*status);
  EXPECT_FALSE(shoal::testing::ShmExists(mine));
}

TEST_F(StoreProcessTest, SegmentIsOwnerOnly) {
  struct stat st;
  ASSERT_EQ(
      stat(absl::StrCat("/dev/shm/", store_->segment_name()).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(StoreProcessTest, TooSmallShmGivesAnActionableError) {
  client_.reset();
  store_.reset();
  auto big = StoreProcess::Start(uint64_t{1} << 50);
  ASSERT_FALSE(big.ok());
  // The store prints its error to stderr and exits; the fixture sees no
  // "store ready" line.
  SubprocessOptions o;
  o.pipe_stdout = true;
  std::string err_file = absl::StrCat(::testing::TempDir(), "/store_err.txt");
  o.stderr_file = err_file;
  auto p = Subprocess::Start(
      {shoal::testing::RunfilePath("tools/shoal_lean"), "store", "--job-id",
       shoal::testing::UniqueJobId(), "--store-bytes", "1024T"},
      o);
  ASSERT_TRUE(p.ok());
  auto status = p->Wait(absl::Seconds(20));
  ASSERT_TRUE(status.ok());
  EXPECT_NE(*status, 0);
  FILE* f = fopen(err_file.c_str(), "r");
  ASSERT_NE(f, nullptr);
  char buf[1024] = {};
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  std::string msg(buf, n);
  EXPECT_NE(msg.find("/dev/shm"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--shm-size"), std::string::npos) << msg;
}

}  // namespace
}  // namespace shoal
