// Attacks on the coordinator's frontend against a real node (`shoal start`):
// each test tries one, checks the safe outcome, then checks that the node
// still serves a normal client (docs/security.md).
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "coordinator/client.h"
#include "coordinator/discovery.h"
#include "gtest/gtest.h"
#include "ipc/curve.h"
#include "ipc/protocol.h"
#include "ipc/socket.h"
#include "tests/coordinator/node_fixture.h"
#include "tests/security/node_test_base.h"
#include "tests/security/raw_client.h"
#include "tests/testing/test_env.h"

namespace shoal {
namespace {

using coordinator::Client;
using shoal::testing::NodeTest;
using shoal::testing::ProcStatusKb;
using shoal::testing::RawClient;
using shoal::testing::Task;
using shoal::testing::WriteClientKeys;

class FrontendAttackTest : public NodeTest {};

TEST_F(FrontendAttackTest, WaitNamingATaskTwiceWithReleaseIsRefused) {
  StartNode();
  RawClient raw(discovery_.frontend);
  const uint64_t id = SubmitRaw(raw, Task("add", {int64_t{1}, int64_t{2}}));
  ipc::WaitRequest twice;
  twice.task_ids = {id, id};
  twice.release = true;
  twice.timeout_ms = 10000;
  auto reply = raw.Call(twice);
  ASSERT_EQ(reply.status().code(), absl::StatusCode::kInvalidArgument)
      << reply.status();
  EXPECT_TRUE(absl::StrContains(reply.status().message(), "task_ids"));
  // The task is intact and still this client's.
  ipc::WaitRequest once;
  once.task_ids = {id};
  once.release = true;
  once.timeout_ms = 10000;
  auto ok = raw.Call(once);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(std::get<ipc::WaitReply>(*ok).results.size(), 1u);
  ExpectServesOwner();
}

TEST_F(FrontendAttackTest, HugeTimeoutIsRefusedNamingTheField) {
  StartNode();
  RawClient raw(discovery_.frontend);
  const uint64_t id = SubmitRaw(raw, Task("sleep", {30.0}));
  ipc::WaitRequest w;
  w.task_ids = {id};
  w.timeout_ms = int64_t{1} << 62;
  auto reply = raw.Call(w);
  ASSERT_EQ(reply.status().code(), absl::StatusCode::kInvalidArgument)
      << reply.status();
  EXPECT_TRUE(absl::StrContains(reply.status().message(), "timeout_ms"));
  ipc::CancelRequest cancel;
  cancel.task_ids = {id};
  EXPECT_TRUE(raw.Call(cancel).ok());
  ExpectServesOwner();
}

// A pushed submit's results go to its request id; 0 would push nothing.
TEST_F(FrontendAttackTest, PushedSubmitWithRequestIdZeroIsRefused) {
  StartNode();
  RawClient raw(discovery_.frontend);
  ipc::SubmitRequest submit;
  submit.tasks.push_back(Task("noop"));
  submit.push = true;
  ASSERT_TRUE(raw.Send(0, submit).ok());
  auto reply = raw.NextWithId(absl::Seconds(20));
  ASSERT_EQ(reply.status().code(), absl::StatusCode::kInvalidArgument)
      << reply.status();
  EXPECT_TRUE(absl::StrContains(reply.status().message(), "request id"));
  ExpectServesOwner();
}

// Every numeric field on the wire is range-checked: a task's timeout of
// 2^62 ms was accepted and overflowed the table's nanosecond deadline.
TEST_F(FrontendAttackTest, NumbersOutOfRangeAreRefusedNamingTheField) {
  StartNode();
  RawClient raw(discovery_.frontend);
  ipc::TaskSpec t = Task("sleep", {0.01});
  t.timeout_ms = int64_t{1} << 62;
  ipc::SubmitRequest s;
  s.tasks.push_back(t);
  auto reply = raw.Call(s);
  ASSERT_EQ(reply.status().code(), absl::StatusCode::kInvalidArgument)
      << reply.status();
  EXPECT_TRUE(absl::StrContains(reply.status().message(), "timeout_ms"))
      << reply.status();
  ipc::ActorCreateRequest a;
  a.set_init_function("py:shoal._actor:_init");
  a.set_max_restarts(4000000000u);
  a.set_detached(true);
  auto actor = raw.Call(a);
  ASSERT_EQ(actor.status().code(), absl::StatusCode::kInvalidArgument)
      << actor.status();
  EXPECT_TRUE(absl::StrContains(actor.status().message(), "max_restarts"))
      << actor.status();
  // Nothing was submitted.
  auto st = raw.Call(ipc::StatusRequest{});
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(std::get<ipc::NodeStatus>(*st).submitted(), 0u);
  ExpectServesOwner();
}

TEST_F(FrontendAttackTest, TcpWithoutTheOwnersKeyIsNotServed) {
  StartNode();
  ASSERT_TRUE(absl::StartsWith(discovery_.tcp, "tcp://127.0.0.1:"));
  ASSERT_FALSE(discovery_.server_key.empty());
  // The owner's socket and keys live in the job folder, mode 0700.
  struct stat st;
  const std::string dir = discovery_.client_key_file.substr(
      0, discovery_.client_key_file.rfind('/'));
  ASSERT_EQ(stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_TRUE(
      absl::StartsWith(discovery_.frontend, absl::StrCat("ipc://", dir, "/")));
  // No CURVE: the handshake fails, nothing is answered.
  RawClient plain(discovery_.tcp);
  EXPECT_FALSE(plain.Call(ipc::StatusRequest{}, absl::Seconds(2)).ok());
  // CURVE with a key the node never admitted: the same.
  auto stranger = ipc::GenerateCurveKeyPair();
  ASSERT_TRUE(stranger.ok());
  RawClient wrong_key(discovery_.tcp, 1000, &*stranger, discovery_.server_key);
  EXPECT_FALSE(wrong_key.Call(ipc::StatusRequest{}, absl::Seconds(2)).ok());
  // Nor may it stop the node.
  EXPECT_FALSE(wrong_key.Call(ipc::StopRequest{}, absl::Seconds(2)).ok());
  // The owner over TCP: the client finds the keys itself.
  coordinator::ClientOptions o;
  o.endpoint = discovery_.tcp;
  o.job_id = node_->job_id();
  o.force_remote = true;
  o.rpc_timeout = absl::Seconds(20);
  auto owner = Client::Connect(o);
  ASSERT_TRUE(owner.ok()) << owner.status();
  auto r =
      (*owner)->Wait(*(*owner)->Submit(Task("add", {int64_t{1}, int64_t{1}})),
                     absl::Seconds(20));
  ASSERT_TRUE(r.ok() && r->status.ok());
  ExpectServesOwner();
}

TEST_F(FrontendAttackTest, ClientsSeeOnlyTheirOwnTasksAndOnlyTheOwnerStops) {
  auto guest = ipc::GenerateCurveKeyPair();
  ASSERT_TRUE(guest.ok());
  const std::string list = WriteClientKeys("guests.txt", {&*guest});
  StartNode({"--client-keys", list});
  RawClient a(discovery_.frontend);
  RawClient b(discovery_.tcp, 1000, &*guest, discovery_.server_key);
  const uint64_t id = SubmitRaw(a, Task("sleep", {0.2}));
  ipc::WaitRequest w;
  w.task_ids = {id};
  w.release = true;
  w.timeout_ms = 5000;
  ipc::CancelRequest c;
  c.task_ids = {id};
  ipc::ReleaseTasksRequest rel;
  rel.task_ids = {id};
  for (ipc::Message m : std::vector<ipc::Message>{w, c, rel}) {
    auto reply = b.Call(m);
    EXPECT_EQ(reply.status().code(), absl::StatusCode::kNotFound)
        << reply.status();
  }
  auto stop = b.Call(ipc::StopRequest{});
  EXPECT_EQ(stop.status().code(), absl::StatusCode::kPermissionDenied)
      << stop.status();
  // The guest's own work is served.
  const uint64_t mine = SubmitRaw(b, Task("add", {int64_t{3}, int64_t{4}}));
  ipc::WaitRequest wm;
  wm.task_ids = {mine};
  wm.release = true;
  wm.timeout_ms = 20000;
  auto got = b.Call(wm);
  ASSERT_TRUE(got.ok()) << got.status();
  // A's task was untouched: it completes normally for A.
  auto done = a.Call(w);
  ASSERT_TRUE(done.ok()) << done.status();
  const auto& results = std::get<ipc::WaitReply>(*done).results;
  ASSERT_EQ(results.size(), 1u);
  EXPECT_TRUE(results[0].status.ok()) << results[0].status;
  ExpectServesOwner();
}

TEST_F(FrontendAttackTest, AllowModulesRefusesOtherModulesAndPickles) {
  StartNode({"--allow-modules", "json,xml.dom"});
  RawClient raw(discovery_.frontend);
  for (const std::string& f :
       {std::string("py:os:system"), std::string("py:builtins:eval"),
        std::string("py:jsonx:loads"), std::string("py:xml:parse"),
        std::string("py:json:loads!"),
        absl::StrCat("py:=", std::string(32, 'a'))}) {
    ipc::SubmitRequest s;
    s.tasks.push_back(Task(f, {std::string("1")}));
    auto reply = raw.Call(s);
    EXPECT_EQ(reply.status().code(), absl::StatusCode::kPermissionDenied)
        << f << ": " << reply.status();
  }
  ipc::SubmitRequest s;
  s.tasks.push_back(Task("py:os:system", {std::string("true")}));
  auto named = raw.Call(s);
  EXPECT_TRUE(absl::StrContains(named.status().message(), "module 'os'"))
      << named.status();
  // Modules under the prefixes are admitted.
  EXPECT_NE(SubmitRaw(raw, Task("py:json:dumps", {int64_t{1}})), 0u);
  EXPECT_NE(SubmitRaw(raw, Task("py:xml.dom.minidom:parseString",
                                {std::string("<a/>")})),
            0u);
  ExpectServesOwner();
}

TEST_F(FrontendAttackTest, QueueQuotaRefusesAWholeBatch) {
  StartNode({"--max-queued-per-client", "4"});
  RawClient raw(discovery_.frontend);
  ipc::SubmitRequest five;
  for (int i = 0; i < 5; ++i) five.tasks.push_back(Task("sleep", {5.0}));
  auto reply = raw.Call(five);
  ASSERT_EQ(reply.status().code(), absl::StatusCode::kResourceExhausted)
      << reply.status();
  EXPECT_TRUE(
      absl::StrContains(reply.status().message(), "max_queued_per_client"));
  // Nothing of the batch went in.
  auto st = raw.Call(ipc::StatusRequest{});
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(std::get<ipc::NodeStatus>(*st).submitted(), 0u);
  // Under the limit it is fine; the limit is per client.
  ipc::SubmitRequest four;
  for (int i = 0; i < 4; ++i) four.tasks.push_back(Task("sleep", {0.01}));
  ASSERT_TRUE(raw.Call(four).ok());
  ExpectServesOwner();
}

// Results a peer never collects count against its store-bytes quota once
// their tasks finish: before, only collected ones did, so one peer could keep
// max_held_per_client results of any size in the store.
TEST_F(FrontendAttackTest, UncollectedResultsCountAgainstTheStoreQuota) {
  StartNode({"--max-store-bytes-per-client", "8388608"});  // 8 MiB
  RawClient raw(discovery_.frontend);
  ipc::SubmitRequest big;  // 3 results of 4 MiB each, never waited for
  for (int i = 0; i < 3; ++i)
    big.tasks.push_back(Task("fill", {int64_t{1} << 20, 1.0}));
  ASSERT_TRUE(raw.Call(big).ok());
  // Once they have finished (the coordinator learns it from the table's
  // doorbell), the next submit is refused naming the limit.
  absl::Status refused = absl::OkStatus();
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (refused.ok() && absl::Now() < deadline) {
    ipc::SubmitRequest one;
    one.tasks.push_back(Task("noop"));
    refused = raw.Call(one).status();
    if (refused.ok()) absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_TRUE(
      absl::StrContains(refused.message(), "max_store_bytes_per_client"))
      << refused;
  ExpectServesOwner();  // the quota is per client
}

// A client that does not read gets back-pressure, never loss: what the node
// keeps for it is bounded (its requests wait), others are served meanwhile,
// and every reply arrives once it reads.
TEST_F(FrontendAttackTest, ClientThatNeverReadsIsBoundedAndServedLater) {
  StartNode({"--max-reply-bytes-per-client", "8M"});
  // A 4 MiB object to fetch.
  auto owner = node_->Connect(/*remote=*/true);
  ASSERT_TRUE(owner.ok()) << owner.status();
  auto r =
      (*owner)->Wait(*(*owner)->Submit(Task("fill", {int64_t{1} << 20, 1.0})),
                     absl::Seconds(20), /*release=*/false);
  ASSERT_TRUE(r.ok() && r->status.ok()) << r.status();
  const ObjectId object = std::get<ObjectValue>(r->outputs.at(0)).id;
  ASSERT_TRUE((*owner)->Fetch(object).ok());
  const int64_t before = ProcStatusKb(node_->pid(), "VmRSS");
  ASSERT_GT(before, 0);
  RawClient slow(discovery_.frontend, /*rcvhwm=*/1);
  constexpr int kFetches = 32;
  for (int i = 0; i < kFetches; ++i) {
    ipc::FetchObjectRequest f;
    f.id = object;
    ASSERT_TRUE(slow.Send(static_cast<uint64_t>(i + 1), f).ok());
  }
  // Others are served promptly meanwhile.
  for (int i = 0; i < 5; ++i) {
    const absl::Time start = absl::Now();
    auto st = (*owner)->Status();
    ASSERT_TRUE(st.ok()) << st.status();
    EXPECT_LT(absl::Now() - start, absl::Seconds(2));
    absl::SleepFor(absl::Milliseconds(200));
  }
  const int64_t after = ProcStatusKb(node_->pid(), "VmRSS");
  // 8 MiB of replies may be kept, plus one being built; 32 would be 128.
  EXPECT_LT(after - before, 40 * 1024) << "VmRSS " << before << " → " << after;
  // It reads now: every reply comes, in order, none lost.
  for (int i = 0; i < kFetches; ++i) {
    auto reply = slow.NextWithId(absl::Seconds(20));
    ASSERT_TRUE(reply.ok()) << i << ": " << reply.status();
    EXPECT_EQ(reply->first, static_cast<uint64_t>(i + 1));
    EXPECT_EQ(std::get<ipc::FetchObjectReply>(reply->second).tensor.data.size(),
              size_t{4} << 20);
  }
  (*owner)->ReleaseOutputs(*r);
  ExpectServesOwner();
}

}  // namespace
}  // namespace shoal
