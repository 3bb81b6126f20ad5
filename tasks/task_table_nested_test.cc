// ClaimNested: a waiting task runs a queued one inline on its worker's slot
// (docs/actors.md, "Nested tasks"), and the table keeps the worker's stack.
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tasks/task_table.h"

namespace shoal::tasks {
namespace {

std::string JobId() {
  static int n = 0;
  return absl::StrCat("ttn", getpid(), "-", n++);
}

class NestedClaimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TaskTableOptions o;
    o.max_tasks = 256;
    o.max_chunks = 16;
    auto t = TaskTable::Create(JobId(), o);
    ASSERT_TRUE(t.ok()) << t.status();
    table_ = *std::move(t);
    client_ = *table_->AddClient(getpid());
    worker_ = *table_->AddWorker(getpid(), 1, 0);
  }

  TaskSubmission Task(std::string fn, uint32_t gpus = 0) {
    TaskSubmission t;
    t.function = std::move(fn);
    t.gpus = gpus;
    return t;
  }

  uint64_t SubmitOne(TaskSubmission t) {
    auto ids = table_->Submit(client_, {std::move(t)});
    EXPECT_TRUE(ids.ok()) << ids.status();
    return ids.ok() ? (*ids)[0] : 0;
  }

  std::unique_ptr<TaskTable> table_;
  uint32_t client_ = 0;
  uint32_t worker_ = 0;
};

TEST_F(NestedClaimTest, AStackOfTasksCompletesTopFirstAndReturnsToTheParent) {
  const uint64_t parent = SubmitOne(Task("parent"));
  auto p = table_->Claim(worker_);
  ASSERT_TRUE(p.ok() && p->has_value());
  // Nothing queued: nothing to run inline.
  auto none = table_->ClaimNested(worker_);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->has_value());
  // A chain three deep, each claimed inside the one before.
  std::vector<uint64_t> chain;
  for (int d = 0; d < 3; ++d) {
    const uint64_t child = SubmitOne(Task(absl::StrCat("child", d)));
    auto c = table_->ClaimNested(worker_);
    ASSERT_TRUE(c.ok() && c->has_value()) << d;
    EXPECT_EQ((*c)->id, child);
    EXPECT_EQ(*table_->RunningOn(worker_), child);
    chain.push_back(child);
  }
  // Only the top can complete; each completion returns to the one below.
  EXPECT_TRUE(absl::IsFailedPrecondition(
      table_->Complete(worker_, chain[0], 0, "early")));
  for (int d = 2; d >= 0; --d) {
    ASSERT_TRUE(table_->Complete(worker_, chain[d], 0, "r").ok()) << d;
    EXPECT_EQ(*table_->RunningOn(worker_), d > 0 ? chain[d - 1] : parent);
    EXPECT_EQ(*table_->Poll(chain[d]), TaskState::kDone);
  }
  EXPECT_EQ(*table_->Poll(parent), TaskState::kRunning);
  ASSERT_TRUE(table_->Complete(worker_, parent, 0, "p").ok());
  EXPECT_FALSE(table_->RunningOn(worker_).has_value());
  auto stats = table_->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->running, 0u);
  // The slot is a plain idle worker again.
  const uint64_t next = SubmitOne(Task("next"));
  auto n = table_->Claim(worker_);
  ASSERT_TRUE(n.ok() && n->has_value());
  EXPECT_EQ((*n)->id, next);
  ASSERT_TRUE(table_->Complete(worker_, next, 0, "").ok());
}

TEST_F(NestedClaimTest, RefusedWithoutARunningTaskAndOnAnActorsWorker) {
  EXPECT_TRUE(
      absl::IsFailedPrecondition(table_->ClaimNested(worker_).status()));
  ASSERT_TRUE(table_->AddActor(3).ok());
  const uint32_t actor_worker = *table_->AddWorker(getpid(), 1, 0, 3);
  SubmitOne(Task(ActorFunction("m", 3)));
  SubmitOne(Task("ordinary"));
  auto m = table_->Claim(actor_worker);
  ASSERT_TRUE(m.ok() && m->has_value());
  // Its calls run in order on its instance: it never runs another inline.
  EXPECT_TRUE(
      absl::IsFailedPrecondition(table_->ClaimNested(actor_worker).status()));
}

TEST_F(NestedClaimTest, OnlyTasksTheWorkersResourcesServe) {
  SubmitOne(Task("parent"));
  auto p = table_->Claim(worker_);
  ASSERT_TRUE(p.ok() && p->has_value());
  SubmitOne(Task("needs a gpu", /*gpus=*/1));
  auto c = table_->ClaimNested(worker_);
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->has_value());  // this worker has no GPU
}

TEST_F(NestedClaimTest, ADeadWorkersWholeStackIsRequeuedOrFailed) {
  TaskSubmission last_try = Task("parent");
  last_try.max_retries = 0;
  const uint64_t parent = SubmitOne(last_try);
  ASSERT_TRUE(table_->Claim(worker_)->has_value());
  TaskSubmission timed = Task("child");
  timed.timeout_ns = 1;  // expired at once
  const uint64_t child = SubmitOne(timed);
  ASSERT_TRUE(table_->ClaimNested(worker_)->has_value());
  const uint64_t grandchild = SubmitOne(Task("grandchild"));
  ASSERT_TRUE(table_->ClaimNested(worker_)->has_value());
  // A timeout is seen on every task of the stack, not only on the top.
  auto expired = table_->Expired(INT64_MAX / 2);
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(expired[0].id, child);
  EXPECT_EQ(expired[0].worker, worker_);

  auto requeued = table_->FailRunning(worker_, 10, "worker died");
  ASSERT_TRUE(requeued.ok()) << requeued.status();
  EXPECT_FALSE(*requeued);  // the parent had no retry left
  EXPECT_FALSE(table_->RunningOn(worker_).has_value());
  EXPECT_EQ(*table_->Poll(grandchild), TaskState::kQueued);
  EXPECT_EQ(*table_->Poll(child), TaskState::kQueued);
  auto out = table_->Take(client_, parent, true);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->code, 10);
  EXPECT_EQ(out->result, "worker died");
  // Requeued at the head, the lower first: the child runs before its child.
  auto again = table_->Claim(worker_);
  ASSERT_TRUE(again.ok() && again->has_value());
  EXPECT_EQ((*again)->id, child);
  EXPECT_EQ((*again)->attempt, 2u);
}

TEST_F(NestedClaimTest, WorkNoIdleWorkerTakesLooksAtIdleWorkers) {
  const uint32_t other = *table_->AddWorker(getpid(), 1, 0);
  SubmitOne(Task("parent"));
  ASSERT_TRUE(table_->Claim(worker_)->has_value());
  // Nothing queued.
  EXPECT_FALSE(table_->WorkNoIdleWorkerTakes(worker_));
  SubmitOne(Task("child"));
  // `other` is idle and takes it.
  EXPECT_FALSE(table_->WorkNoIdleWorkerTakes(worker_));
  SubmitOne(Task("other's"));
  ASSERT_TRUE(table_->Claim(other)->has_value());
  // Both busy, "child" still queued: another worker would run it.
  EXPECT_TRUE(table_->WorkNoIdleWorkerTakes(worker_));
  // The waiting worker runs it inline; a queued task its resources do not
  // serve would not be run by a worker like it either.
  ASSERT_TRUE(table_->ClaimNested(worker_)->has_value());
  EXPECT_FALSE(table_->WorkNoIdleWorkerTakes(worker_));
  SubmitOne(Task("needs a gpu", /*gpus=*/1));
  EXPECT_FALSE(table_->WorkNoIdleWorkerTakes(worker_));
}

}  // namespace
}  // namespace shoal::tasks
