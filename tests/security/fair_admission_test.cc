// Fair admission (coordinator/frontend_admission.cc): a client's one-task
// request is not served behind the batches other clients queued before it,
// each batch counting as many tasks as it carries; a session's requests are
// served in order; and every batch is served in the end.
#include <algorithm>
#include <atomic>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "ipc/messages.h"
#include "ipc/protocol.h"
#include "tests/coordinator/node_fixture.h"
#include "tests/security/raw_client.h"

namespace shoal {
namespace {

using shoal::testing::NodeProcess;
using shoal::testing::RawClient;
using shoal::testing::Task;

constexpr int kHeavyClients = 16;
constexpr int kBatchesEach = 2;
constexpr int kBatchTasks = 1000;

ipc::SubmitRequest Batch(int n) {
  ipc::SubmitRequest s;
  s.tasks.assign(n, Task("noop"));
  return s;
}

// The node's frontend figures, from a status request of `client` (empty,
// with a failure recorded, if it fails).
ipc::FrontendStats FrontendStatsOf(RawClient& client) {
  auto r = client.Call(ipc::StatusRequest{});
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return {};
  return std::get<ipc::NodeStatus>(*r).frontend_stats();
}

class FairAdmissionTest : public ::testing::Test {
 protected:
  void StartNode() {
    node_.reset();
    auto node = NodeProcess::Start({"-n", "1", "--max-queued-per-client",
                                    "60000", "--max-held-per-client", "60000"});
    ASSERT_TRUE(node.ok()) << node.status();
    node_ = *std::move(node);
  }

  // One trial of OneTaskIsNotServedBehindOtherClientsBatches on a fresh
  // node: how long the one task waited, as a share of how long all the
  // batches took.
  void Trial(double* share);

  std::unique_ptr<NodeProcess> node_;
};

// One client's batch keeps the node busy while sixteen clients queue two
// batches of 1,000 tasks each, then another sends one task. libzmq hands
// the frontend one request per connection in turn, so serving requests as
// read answered the one task after a batch of each of the sixteen, about
// half the time all the batches took; admitted by weight, it waits for the
// batch being served when it came and at most one more.
// Judged by the median of three trials: the machine's scheduler alone can
// hold the node for a share of one.
TEST_F(FairAdmissionTest, OneTaskIsNotServedBehindOtherClientsBatches) {
  std::vector<double> shares;
  for (int trial = 0; trial < 3; ++trial) {
    double share = 1;
    ASSERT_NO_FATAL_FAILURE(Trial(&share));
    shares.push_back(share);
  }
  std::sort(shares.begin(), shares.end());
  EXPECT_LT(shares[1], 0.25)
      << "the one-task request waited behind others' batches (median share "
      << shares[1] << " of the time all took)";
}

void FairAdmissionTest::Trial(double* share) {
  StartNode();
  std::vector<std::unique_ptr<RawClient>> heavy;
  for (int c = 0; c < kHeavyClients; ++c) {
    heavy.push_back(std::make_unique<RawClient>(node_->frontend()));
    // A first call, so that the connection is up before the batches go.
    ASSERT_TRUE(heavy.back()->Call(ipc::StatusRequest{}).ok());
  }
  RawClient light(node_->frontend());
  ASSERT_TRUE(light.Call(ipc::StatusRequest{}).ok());
  // Encoded first, so that each goes at once.
  auto plug = ipc::Encode(99, Batch(2 * kBatchTasks));
  ASSERT_TRUE(plug.ok()) << plug.status();
  std::vector<std::string> frames;
  for (int b = 0; b < kBatchesEach; ++b) {
    auto frame = ipc::Encode(100 + b, Batch(kBatchTasks));
    ASSERT_TRUE(frame.ok()) << frame.status();
    frames.push_back(*std::move(frame));
  }
  auto one = ipc::Encode(7, ipc::SubmitRequest{{Task("noop")}});
  ASSERT_TRUE(one.ok()) << one.status();

  // Each heavy client's socket is used by its own thread only (a ZeroMQ
  // socket is not thread-safe): it sends when told, then reads.
  std::vector<absl::Time> answered(kHeavyClients);  // each one's last
  std::atomic<int> stage{0};  // 1: the plug goes; 2: the batches go
  std::atomic<int> sent{0};   // clients whose batches went
  std::atomic<int> lost{0};
  std::vector<std::thread> threads;
  for (int c = 0; c < kHeavyClients; ++c) {
    threads.emplace_back([&, c] {
      if (c == 0) {
        while (stage.load() < 1) absl::SleepFor(absl::Microseconds(50));
        if (!heavy[c]->SendFrame(*plug).ok()) ++lost;
      }
      while (stage.load() < 2) absl::SleepFor(absl::Microseconds(50));
      for (const std::string& f : frames) {
        if (!heavy[c]->SendFrame(f).ok()) ++lost;
      }
      ++sent;
      for (int b = 0; b < kBatchesEach + (c == 0); ++b) {
        auto r = heavy[c]->NextWithId(absl::Seconds(120));
        if (!r.ok() || !std::holds_alternative<ipc::SubmitReply>(r->second)) {
          ++lost;
          continue;
        }
        answered[c] = absl::Now();
      }
    });
  }
  const absl::Time start = absl::Now();
  stage.store(1);
  absl::SleepFor(absl::Milliseconds(1));
  stage.store(2);
  while (sent.load() < kHeavyClients) absl::SleepFor(absl::Microseconds(50));
  absl::SleepFor(absl::Milliseconds(1));
  const absl::Time sent_at = absl::Now();
  const absl::Status went = light.SendFrame(*one);
  auto mine = light.NextWithId(absl::Seconds(120));
  const absl::Duration waited = absl::Now() - sent_at;
  for (std::thread& t : threads) t.join();
  ASSERT_TRUE(went.ok()) << went;
  ASSERT_TRUE(mine.ok()) << mine.status();
  ASSERT_EQ(mine->first, 7u);
  ASSERT_TRUE(std::holds_alternative<ipc::SubmitReply>(mine->second));
  EXPECT_EQ(lost.load(), 0) << "a batch was not served";
  const absl::Duration all =
      *std::max_element(answered.begin(), answered.end()) - start;
  std::cout << "the one task waited " << waited << "; all batches took " << all
            << "\n";
  *share = absl::FDivDuration(waited, all);
}

// A client alone with the node's work has its batches served as read, not
// parked for the sake of no one (frontend_admission.cc: a lone sender's
// heavy requests get kSoloTurnBudget). Sixteen pipelined batches of 12
// tasks: before, every trial parked some (4 to 16 of them); now a trial
// parks none unless the node's thread lost the CPU for milliseconds
// meanwhile, so up to thirty trials are run until one parks none.
TEST_F(FairAdmissionTest, ALoneClientsBatchesAreNotParked) {
  StartNode();
  RawClient client(node_->frontend());
  auto parked = [&] { return FrontendStatsOf(client).parked_requests(); };
  std::vector<std::string> frames;
  for (int b = 0; b < 16; ++b) {
    auto frame = ipc::Encode(100 + b, Batch(12));
    ASSERT_TRUE(frame.ok()) << frame.status();
    frames.push_back(*std::move(frame));
  }
  uint64_t fewest = UINT64_MAX;
  for (int trial = 0; trial < 30 && fewest > 0; ++trial) {
    const uint64_t before = parked();
    for (const std::string& f : frames) ASSERT_TRUE(client.SendFrame(f).ok());
    for (size_t b = 0; b < frames.size(); ++b) {
      auto r = client.NextWithId(absl::Seconds(60));
      ASSERT_TRUE(r.ok()) << r.status();
      ASSERT_TRUE(std::holds_alternative<ipc::SubmitReply>(r->second));
    }
    const uint64_t n = parked() - before;
    std::cout << "trial " << trial << ": " << n << " of 16 batches parked\n";
    fewest = std::min(fewest, n);
  }
  EXPECT_EQ(fewest, 0u) << "a lone client's batches were parked in every trial";
}

// A turn of the event loop is short only while clients share the node
// (Frontend::SharedTurn): a lone client's pipelined batches never make
// one, sixteen clients' batches waiting their turn do.
TEST_F(FairAdmissionTest, TurnsAreSharedOnlyWhenClientsShareTheNode) {
  StartNode();
  RawClient probe(node_->frontend());
  auto shared_turns = [&] { return FrontendStatsOf(probe).shared_turns(); };
  const uint64_t start = shared_turns();
  for (int b = 0; b < 16; ++b)
    ASSERT_TRUE(probe.Send(100 + b, Batch(500)).ok());
  for (int b = 0; b < 16; ++b) {
    auto r = probe.NextWithId(absl::Seconds(60));
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(std::holds_alternative<ipc::SubmitReply>(r->second));
  }
  EXPECT_EQ(shared_turns(), start) << "a lone client's turns were shared";

  std::vector<std::unique_ptr<RawClient>> others;
  for (int c = 0; c < kHeavyClients; ++c) {
    others.push_back(std::make_unique<RawClient>(node_->frontend()));
    ASSERT_TRUE(others.back()->Call(ipc::StatusRequest{}).ok());
  }
  for (int b = 0; b < kBatchesEach; ++b) {
    for (auto& o : others) ASSERT_TRUE(o->Send(1 + b, Batch(kBatchTasks)).ok());
  }
  for (auto& o : others) {
    for (int b = 0; b < kBatchesEach; ++b) {
      auto r = o->NextWithId(absl::Seconds(60));
      ASSERT_TRUE(r.ok()) << r.status();
    }
  }
  EXPECT_GT(shared_turns(), start) << "sixteen clients' batches shared no turn";
}

// Requests of one session are served in the order sent, parked or not: a
// batch, then one task, then a status, under other clients' batches.
TEST_F(FairAdmissionTest, ASessionsRequestsAreServedInOrder) {
  StartNode();
  std::vector<std::unique_ptr<RawClient>> others;
  for (int c = 0; c < 4; ++c) {
    others.push_back(std::make_unique<RawClient>(node_->frontend()));
    ASSERT_TRUE(others.back()->Call(ipc::StatusRequest{}).ok());
  }
  RawClient client(node_->frontend());
  ASSERT_TRUE(client.Call(ipc::StatusRequest{}).ok());
  for (auto& o : others) ASSERT_TRUE(o->Send(1, Batch(kBatchTasks)).ok());
  ASSERT_TRUE(client.Send(1, Batch(kBatchTasks)).ok());
  ASSERT_TRUE(client.Send(2, ipc::SubmitRequest{{Task("noop")}}).ok());
  ASSERT_TRUE(client.Send(3, ipc::StatusRequest{}).ok());
  for (uint64_t want = 1; want <= 3; ++want) {
    auto r = client.NextWithId(absl::Seconds(60));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->first, want);
  }
  for (auto& o : others) {
    auto r = o->NextWithId(absl::Seconds(60));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(std::get<ipc::SubmitReply>(r->second).task_ids.size(),
              static_cast<size_t>(kBatchTasks));
  }
}

}  // namespace
}  // namespace shoal
