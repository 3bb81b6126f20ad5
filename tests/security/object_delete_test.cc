// Read access is not delete access: a client that holds an object's id may
// fetch it and pass it to its own tasks, but only the object's creator (or
// the node's owner) may have it deleted (docs/security.md). The attack: a
// guest runs `echo` on another's object id, so its result names the object,
// then releases that result's outputs (DeleteRequest, or ReleaseTasks of the
// finished task) — the frontend used to release and delete the object.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "coordinator/client.h"
#include "coordinator/discovery.h"
#include "gtest/gtest.h"
#include "ipc/curve.h"
#include "ipc/messages.h"
#include "shm/store_client.h"
#include "tests/coordinator/node_fixture.h"
#include "tests/security/node_test_base.h"
#include "tests/security/raw_client.h"
#include "tests/testing/store_fixture.h"

namespace shoal {
namespace {

using coordinator::Client;
using shoal::testing::NodeTest;
using shoal::testing::RawClient;
using shoal::testing::Task;
using shoal::testing::WriteClientKeys;

constexpr int64_t kElements = 1 << 15;  // 128 KiB of f32: a store object

class ObjectDeleteTest : public NodeTest {
 protected:
  void SetUp() override {
    for (auto* key : {&guest_, &other_}) {
      auto k = ipc::GenerateCurveKeyPair();
      ASSERT_TRUE(k.ok());
      *key = *k;
    }
    ASSERT_NO_FATAL_FAILURE(
        StartNode({"--client-keys", WriteClientKeys("object_delete_guests.txt",
                                                    {&guest_, &other_})}));
    auto owner = node_->Connect();
    ASSERT_TRUE(owner.ok()) << owner.status();
    owner_ = *std::move(owner);
    ASSERT_NE(owner_->store(), nullptr);
  }

  std::unique_ptr<RawClient> Guest(const ipc::CurveKeyPair& key) {
    return std::make_unique<RawClient>(discovery_.tcp, 1000, &key,
                                       discovery_.server_key);
  }

  // Waits for task `id` of `raw` (with `release`); its result.
  ipc::TaskResult WaitFor(RawClient& raw, uint64_t id, bool release) {
    ipc::WaitRequest w;
    w.task_ids = {id};
    w.release = release;
    w.timeout_ms = 60000;
    auto got = raw.Call(w, absl::Seconds(70));
    EXPECT_TRUE(got.ok()) << got.status();
    if (!got.ok()) return {};
    const auto& results = std::get<ipc::WaitReply>(*got).results;
    EXPECT_EQ(results.size(), 1u);
    if (results.empty()) return {};
    EXPECT_TRUE(results[0].status.ok()) << results[0].status;
    return results[0];
  }

  // A store object made by `raw`'s own task (`fill`, taken with release).
  ObjectValue MadeBy(RawClient& raw, double value) {
    ipc::TaskResult r =
        WaitFor(raw, SubmitRaw(raw, Task("fill", {kElements, value})), true);
    EXPECT_EQ(r.outputs.size(), 1u);
    if (r.outputs.empty()) return {};
    return std::get<ObjectValue>(r.outputs[0]);
  }

  // The echo attack on `object` by `raw`: echo it, then let go of the
  // result's outputs both ways a peer can (the result taken with release and
  // a DeleteRequest; a finished task dropped with ReleaseTasks).
  void EchoAndDelete(RawClient& raw, const ObjectValue& object) {
    ipc::TaskResult r =
        WaitFor(raw, SubmitRaw(raw, Task("echo", {object})), /*release=*/true);
    ASSERT_EQ(r.outputs.size(), 1u);
    ASSERT_EQ(std::get<ObjectValue>(r.outputs[0]).id, object.id);
    (void)raw.Call(ipc::DeleteRequest{object.id});
    const uint64_t id = SubmitRaw(raw, Task("echo", {object}));
    (void)WaitFor(raw, id, /*release=*/false);
    ipc::ReleaseTasksRequest drop;
    drop.task_ids = {id};
    EXPECT_TRUE(raw.Call(drop).ok());
  }

  // Whether `id` is still readable: in the store, fetched over the frontend.
  bool Readable(const ObjectId& id, RawClient& reader) {
    absl::StatusOr<bool> in = owner_->store()->Contains(id);
    EXPECT_TRUE(in.ok()) << in.status();
    ipc::FetchObjectRequest f;
    f.id = id;
    const bool fetched = reader.Call(f).ok();
    EXPECT_EQ(in.ok() && *in, fetched);
    return in.ok() && *in && fetched;
  }

  // The store drops a deleted object when its last reference goes; the
  // frontend answers before that.
  bool GoneSoon(const ObjectId& id) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (absl::Now() < deadline) {
      absl::StatusOr<bool> in = owner_->store()->Contains(id);
      if (in.ok() && !*in) return true;
      absl::SleepFor(absl::Milliseconds(20));
    }
    return false;
  }

  ipc::CurveKeyPair guest_, other_;
  std::unique_ptr<Client> owner_;
};

TEST_F(ObjectDeleteTest, EchoThenDeleteLeavesTheOwnersPutObject) {
  const ObjectId id = ObjectId::Random();
  const TensorMeta meta = TensorMeta::Contiguous(DType::kF32, {kElements});
  std::vector<float> data(kElements, 3.0f);
  ASSERT_TRUE(owner_->store()->Put(id, meta, data.data()).ok());
  auto guest = Guest(guest_);
  ASSERT_TRUE(Readable(id, *guest));  // the id is a read capability
  EchoAndDelete(*guest, ObjectValue{id, meta, kElements * 4u});
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_TRUE(Readable(id, *guest));
  auto view = owner_->store()->Get(id);
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(reinterpret_cast<const float*>(view->data)[kElements - 1], 3.0f);
  ASSERT_TRUE(owner_->store()->Release(id).ok());
  // The owner deletes its own.
  ASSERT_TRUE(owner_->store()->Release(id).ok());
  ASSERT_TRUE(owner_->store()->Delete(id).ok());
  EXPECT_TRUE(GoneSoon(id));
}

TEST_F(ObjectDeleteTest, EchoThenDeleteLeavesAnotherPeersOutput) {
  // Outputs made by the owner's remote task and by another guest's: both
  // belong to the coordinator's store client, held for their peer.
  auto owner_remote = node_->Connect(/*remote=*/true);
  ASSERT_TRUE(owner_remote.ok()) << owner_remote.status();
  auto made =
      (*owner_remote)
          ->Wait(*(*owner_remote)->Submit(Task("fill", {kElements, 2.0})),
                 absl::Seconds(60), /*release=*/true);
  ASSERT_TRUE(made.ok() && made->status.ok()) << made.status();
  const ObjectValue owners = std::get<ObjectValue>(made->outputs.at(0));
  auto other = Guest(other_);
  const ObjectValue others = MadeBy(*other, 4.0);
  auto guest = Guest(guest_);
  for (const ObjectValue& target : {owners, others}) {
    ASSERT_TRUE(Readable(target.id, *guest));
    EchoAndDelete(*guest, target);
  }
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_TRUE(Readable(owners.id, *guest));
  EXPECT_TRUE(Readable(others.id, *guest));
  auto fetched = (*owner_remote)->Fetch(owners.id);
  ASSERT_TRUE(fetched.ok()) << fetched.status();
  EXPECT_EQ(fetched->data.size(), kElements * 4u);
  // Their makers can still let go of them, which deletes them.
  (*owner_remote)->ReleaseOutputs(*made);
  EXPECT_TRUE(GoneSoon(owners.id));
  EXPECT_TRUE(other->Call(ipc::DeleteRequest{others.id}).ok());
  EXPECT_TRUE(GoneSoon(others.id));
}

TEST_F(ObjectDeleteTest, PeerStillDeletesItsOwnOutputs) {
  auto guest = Guest(guest_);
  // Taken with release, then a DeleteRequest.
  const ObjectValue mine = MadeBy(*guest, 1.0);
  ASSERT_TRUE(Readable(mine.id, *guest));
  EXPECT_TRUE(guest->Call(ipc::DeleteRequest{mine.id}).ok());
  EXPECT_TRUE(GoneSoon(mine.id));
  // A finished task dropped with ReleaseTasks.
  const uint64_t id = SubmitRaw(*guest, Task("fill", {kElements, 5.0}));
  ipc::TaskResult r = WaitFor(*guest, id, /*release=*/false);
  ASSERT_EQ(r.outputs.size(), 1u);
  const ObjectId dropped = std::get<ObjectValue>(r.outputs[0]).id;
  ASSERT_TRUE(Readable(dropped, *guest));
  ipc::ReleaseTasksRequest drop;
  drop.task_ids = {id};
  EXPECT_TRUE(guest->Call(drop).ok());
  EXPECT_TRUE(GoneSoon(dropped));
  // Its own output echoed by itself and released: its own to delete.
  const ObjectValue again = MadeBy(*guest, 6.0);
  EchoAndDelete(*guest, again);
  EXPECT_TRUE(GoneSoon(again.id));
}

// The store's part: the creator of a sealed object hands creatorship on
// with Transfer; a reference taken with Get and transferred is only one.
TEST(StoreCreatorTest, TransferHandsOnCreatorshipOnlyFromTheCreator) {
  auto store = testing::StoreProcess::Start(32 << 20);
  ASSERT_TRUE(store.ok()) << store.status();
  auto maker = (*store)->Connect("maker");
  auto holder = (*store)->Connect("holder");
  auto reader = (*store)->Connect("reader");
  auto third = (*store)->Connect("third");
  ASSERT_TRUE(maker.ok() && holder.ok() && reader.ok() && third.ok());
  const ObjectId id = ObjectId::Random();
  std::vector<uint8_t> bytes(4096, 7);
  ASSERT_TRUE((*maker)
                  ->Put(id,
                        TensorMeta::Bytes(static_cast<int64_t>(bytes.size())),
                        bytes.data())
                  .ok());
  EXPECT_TRUE(*(*maker)->Created(id));
  EXPECT_FALSE(*(*holder)->Created(id));
  ASSERT_TRUE((*maker)->Transfer(id, (*holder)->client_slot()).ok());
  EXPECT_FALSE(*(*maker)->Created(id));
  EXPECT_TRUE(*(*holder)->Created(id));
  // A reader's reference, transferred, moves no creatorship.
  ASSERT_TRUE((*reader)->Get(id).ok());
  ASSERT_TRUE((*reader)->Transfer(id, (*third)->client_slot()).ok());
  EXPECT_TRUE(*(*holder)->Created(id));
  EXPECT_FALSE(*(*third)->Created(id));
  EXPECT_EQ((*maker)->Created(ObjectId::Random()).status().code(),
            absl::StatusCode::kNotFound);
  // An unsealed object's creator stays (it alone seals or aborts it).
  const ObjectId open = ObjectId::Random();
  ASSERT_TRUE((*maker)->CreateBytes(open, 64).ok());
  ASSERT_TRUE((*maker)->Transfer(open, (*holder)->client_slot()).ok());
  EXPECT_TRUE(*(*maker)->Created(open));
  EXPECT_TRUE((*maker)->Seal(open).ok());
}

}  // namespace
}  // namespace shoal
