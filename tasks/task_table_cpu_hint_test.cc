// TaskTable::RunsOnAnotherCpu: the hint a local client's wait reads to choose
// between busy-waiting and yielding (coordinator/client.cc, WaitLocal).
#include <sched.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tasks/task_table.h"

namespace shoal::tasks {
namespace {

// Moves the calling thread onto `cpu` alone; false if it may not run there.
bool PinTo(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return sched_setaffinity(0, sizeof(set), &set) == 0 && sched_getcpu() == cpu;
}

class CpuHintTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(sched_getaffinity(0, sizeof(allowed_), &allowed_), 0);
    TaskTableOptions o;
    o.max_tasks = 16;
    o.max_chunks = 4;
    auto t = TaskTable::Create(absl::StrCat("cpuhint", getpid()), o);
    ASSERT_TRUE(t.ok()) << t.status();
    table_ = *std::move(t);
    client_ = *table_->AddClient(getpid());
    worker_ = *table_->AddWorker(getpid(), 1, 0);
  }
  void TearDown() override {
    sched_setaffinity(0, sizeof(allowed_), &allowed_);
  }

  // Two CPUs this thread may run on, or false.
  bool TwoCpus(int* a, int* b) {
    *a = *b = -1;
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (!CPU_ISSET(c, &allowed_)) continue;
      if (*a < 0) {
        *a = c;
      } else {
        *b = c;
        return true;
      }
    }
    return false;
  }

  uint64_t SubmitOne() {
    TaskSubmission t;
    t.function = "f";
    auto ids = table_->Submit(client_, {t});
    EXPECT_TRUE(ids.ok()) << ids.status();
    return ids.ok() ? (*ids)[0] : 0;
  }

  cpu_set_t allowed_;
  std::unique_ptr<TaskTable> table_;
  uint32_t client_ = 0;
  uint32_t worker_ = 0;
};

TEST_F(CpuHintTest, OnlyARunningTaskClaimedOnAnotherCpu) {
  int a = -1, b = -1;
  if (!TwoCpus(&a, &b)) GTEST_SKIP() << "needs two CPUs to run on";
  ASSERT_TRUE(PinTo(a));
  const uint64_t id = SubmitOne();
  EXPECT_FALSE(table_->RunsOnAnotherCpu(id)) << "queued";
  auto claim = table_->Claim(worker_);  // the worker claims it on CPU a
  ASSERT_TRUE(claim.ok() && claim->has_value());
  EXPECT_FALSE(table_->RunsOnAnotherCpu(id)) << "asked from the same CPU";
  ASSERT_TRUE(PinTo(b));
  EXPECT_TRUE(table_->RunsOnAnotherCpu(id)) << "asked from CPU " << b;
  ASSERT_TRUE(table_->Complete(worker_, id, 0, "").ok());
  EXPECT_FALSE(table_->RunsOnAnotherCpu(id)) << "done";
  ASSERT_TRUE(table_->Take(client_, id, /*release=*/true).ok());
  EXPECT_FALSE(table_->RunsOnAnotherCpu(id)) << "released";
  // The slot reused by a new task: the old id is stale.
  const uint64_t next = SubmitOne();
  ASSERT_TRUE(PinTo(a));
  ASSERT_TRUE(table_->Claim(worker_)->has_value());
  ASSERT_TRUE(PinTo(b));
  EXPECT_TRUE(table_->RunsOnAnotherCpu(next));
  if (next != id) {
    EXPECT_FALSE(table_->RunsOnAnotherCpu(id)) << "stale id";
  }
  EXPECT_FALSE(table_->RunsOnAnotherCpu(~uint64_t{0})) << "no such entry";
}

}  // namespace
}  // namespace shoal::tasks
