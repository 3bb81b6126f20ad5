// Fair queueing across submitters by the workers' time (task_layout.h:
// FairQueueing): among flows of equally long tasks a flow with one task waits
// behind at most one task of each other flow, however many those have queued,
// and a flow with nothing queued goes ahead of them; flows of longer tasks
// get fewer claims, in proportion; each flow's own tasks keep their order; an
// actor's calls stay first come, first served.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tasks/task_table.h"

namespace shoal::tasks {
namespace {

class FairTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TaskTableOptions o;
    o.max_tasks = 4096;
    o.max_chunks = 16;
    // Every task here runs for less than this, so all cost the same
    // (except where a test makes some longer).
    o.fair_min_cost = absl::Milliseconds(5);
    auto t = TaskTable::Create(absl::StrCat("fair", getpid()), o);
    ASSERT_TRUE(t.ok()) << t.status();
    table_ = *std::move(t);
    worker_ = *table_->AddWorker(getpid(), 1, 0);
  }

  // Submits `n` tasks named `name` for `client`, charged to `account`, one
  // Submit each (or one batch).
  std::vector<uint64_t> Submit(uint32_t client, uint32_t account,
                               const std::string& name, int n,
                               bool batch = false) {
    TaskSubmission t;
    t.function = name;
    t.account = account;
    std::vector<uint64_t> ids;
    if (batch) {
      auto got = table_->Submit(client, std::vector<TaskSubmission>(n, t));
      EXPECT_TRUE(got.ok()) << got.status();
      return got.ok() ? *got : ids;
    }
    for (int i = 0; i < n; ++i) {
      auto got = table_->Submit(client, {t});
      EXPECT_TRUE(got.ok()) << got.status();
      if (got.ok()) ids.push_back((*got)[0]);
    }
    return ids;
  }

  // Claims and completes `n` tasks, returning their ids in claim order.
  // Tasks named `long_one` run for `long_run` (a sleep) before they
  // complete.
  std::vector<uint64_t> Run(int n, const std::string& long_one = "",
                            absl::Duration long_run = absl::ZeroDuration()) {
    std::vector<uint64_t> order;
    for (int i = 0; i < n; ++i) {
      auto c = table_->Claim(worker_);
      EXPECT_TRUE(c.ok() && c->has_value());
      if (!c.ok() || !c->has_value()) break;
      order.push_back((*c)->id);
      if ((*c)->function == long_one) absl::SleepFor(long_run);
      EXPECT_TRUE(table_->Complete(worker_, (*c)->id, 0, "").ok());
    }
    return order;
  }

  static int Position(const std::vector<uint64_t>& order, uint64_t id) {
    auto it = std::find(order.begin(), order.end(), id);
    return it == order.end() ? -1 : static_cast<int>(it - order.begin());
  }

  std::unique_ptr<TaskTable> table_;
  uint32_t worker_ = 0;
};

TEST_F(FairTest, ALateClientIsServedBeforeAnotherClientsBacklog) {
  const uint32_t greedy = *table_->AddClient(getpid());
  const uint32_t late = *table_->AddClient(getpid());
  const std::vector<uint64_t> backlog = Submit(greedy, 0, "g", 500, true);
  (void)Run(10);  // the node is busy with the backlog
  const uint64_t mine = Submit(late, 0, "l", 1)[0];
  const std::vector<uint64_t> order = Run(490 + 1);
  EXPECT_LE(Position(order, mine), 1) << "behind the other client's backlog";
  // The backlog keeps its own order.
  std::vector<uint64_t> rest;
  for (uint64_t id : order) {
    if (id != mine) rest.push_back(id);
  }
  EXPECT_EQ(rest, std::vector<uint64_t>(backlog.begin() + 10, backlog.end()));
}

TEST_F(FairTest, AccountsOfOneClientSlotAreFlowsOfTheirOwn) {
  // The frontend submits every remote principal's tasks through its own slot,
  // each principal with its store account.
  const uint32_t frontend = *table_->AddClient(getpid());
  std::vector<std::vector<uint64_t>> greedy;
  for (uint32_t account = 1; account <= 8; ++account)
    greedy.push_back(Submit(frontend, account, "g", 200));
  const uint64_t mine = Submit(frontend, 99, "l", 1)[0];
  const std::vector<uint64_t> order = Run(8 * 200 + 1);
  EXPECT_LE(Position(order, mine), 8) << "behind the greedy accounts' tasks";
  // Round robin: after the first 8 * 10 claims, each greedy account has had
  // 10 (within one).
  for (const std::vector<uint64_t>& g : greedy) {
    int served = 0;
    for (int k = 0; k < 8 * 10; ++k) {
      if (std::find(g.begin(), g.end(), order[k]) != g.end()) ++served;
    }
    EXPECT_NEAR(served, 10, 1);
  }
}

TEST_F(FairTest, AFlowWithNothingQueuedGoesAheadOfTheRound) {
  // 16 backlogged accounts; a 17th submits one task at a time, as a
  // synchronous client does.
  const uint32_t frontend = *table_->AddClient(getpid());
  for (uint32_t account = 1; account <= 16; ++account)
    (void)Submit(frontend, account, "g", 100);
  (void)Run(16 * 3 + 5);  // partway through a round
  for (int i = 0; i < 5; ++i) {
    const uint64_t mine = Submit(frontend, 99, "l", 1)[0];
    EXPECT_EQ(Run(1), std::vector<uint64_t>{mine})
        << "behind the round's other tasks";
    (void)Run(16);  // a round of the others
  }
  // One task a round: of two submitted at once, the second waits its turn.
  const std::vector<uint64_t> two = Submit(frontend, 99, "l", 2);
  const std::vector<uint64_t> order = Run(40);
  EXPECT_EQ(Position(order, two[0]), 0);
  EXPECT_GT(Position(order, two[1]), 8);
}

TEST_F(FairTest, FlowsOfLongerTasksGetFewerClaims) {
  // Two backlogged accounts, one of whose tasks run 100 ms (20 times the
  // floor every short task is charged): they share the worker's time, not
  // its claims.
  const uint32_t frontend = *table_->AddClient(getpid());
  const std::vector<uint64_t> slow = Submit(frontend, 1, "slow", 3);
  (void)Run(2, "slow", absl::Milliseconds(100));  // its cost is measured
  const std::vector<uint64_t> slow_more = Submit(frontend, 1, "slow", 20);
  const std::vector<uint64_t> quick = Submit(frontend, 2, "quick", 200);
  const std::vector<uint64_t> order =
      Run(1 + 3 * 21, "slow", absl::Milliseconds(100));
  int slow_claims = 0;
  for (uint64_t id : order) {
    slow_claims +=
        static_cast<int>(std::count(slow.begin(), slow.end(), id) +
                         std::count(slow_more.begin(), slow_more.end(), id));
  }
  // About one claim in 21 (each slow task is charged ~100 ms, a quick one
  // 5 ms): 3 or 4 of the 64 claims, where a round robin of claims would
  // give the slow account 32.
  EXPECT_GE(slow_claims, 2);
  EXPECT_LE(slow_claims, 6);
  // A sparse flow still goes first.
  const uint64_t mine = Submit(frontend, 99, "l", 1)[0];
  EXPECT_EQ(Run(1), std::vector<uint64_t>{mine});
}

TEST_F(FairTest, OneClientAloneIsFirstComeFirstServed) {
  const uint32_t c = *table_->AddClient(getpid());
  std::vector<uint64_t> ids = Submit(c, 0, "a", 50);
  const std::vector<uint64_t> more = Submit(c, 0, "b", 50, true);
  ids.insert(ids.end(), more.begin(), more.end());
  EXPECT_EQ(Run(100), ids);
}

TEST_F(FairTest, AnActorsCallsStayInTheOrderTheyCame) {
  const uint32_t a = *table_->AddClient(getpid());
  const uint32_t b = *table_->AddClient(getpid());
  ASSERT_TRUE(table_->AddActor(7).ok());
  auto actor_worker = table_->AddWorker(getpid(), 1, 0, /*actor=*/7);
  ASSERT_TRUE(actor_worker.ok()) << actor_worker.status();
  TaskSubmission call;
  call.function = ActorFunction("m", 7);
  std::vector<uint64_t> ids;
  for (int i = 0; i < 20; ++i) {
    auto got = table_->Submit(i < 10 ? a : b, {call});
    ASSERT_TRUE(got.ok()) << got.status();
    ids.push_back((*got)[0]);
  }
  std::vector<uint64_t> order;
  for (int i = 0; i < 20; ++i) {
    auto c = table_->Claim(*actor_worker);
    ASSERT_TRUE(c.ok() && c->has_value());
    order.push_back((*c)->id);
    ASSERT_TRUE(table_->Complete(*actor_worker, (*c)->id, 0, "").ok());
  }
  EXPECT_EQ(order, ids);
}

}  // namespace
}  // namespace shoal::tasks
