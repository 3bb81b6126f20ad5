// A client that sleeps in poll(2) on an eventfd (the coordinator's frontend)
// is woken by the process that completes its task: ArmClientWakeFd /
// SetClientWakeFd (task_table.h).
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tasks/task_table.h"

namespace shoal::tasks {
namespace {

class WakeFdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TaskTableOptions o;
    o.max_tasks = 64;
    o.max_chunks = 4;
    auto t = TaskTable::Create(absl::StrCat("wfd", getpid()), o);
    ASSERT_TRUE(t.ok()) << t.status();
    table_ = *std::move(t);
    client_ = *table_->AddClient(getpid());
    fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    ASSERT_GE(fd_, 0);
  }
  void TearDown() override { close(fd_); }

  uint64_t SubmitOne() {
    TaskSubmission t;
    t.function = "f";
    return (*table_->Submit(client_, {t}))[0];
  }
  // The eventfd's counter (0 when unreadable), read and reset.
  uint64_t Writes() {
    uint64_t n = 0;
    return read(fd_, &n, sizeof(n)) == sizeof(n) ? n : 0;
  }

  std::unique_ptr<TaskTable> table_;
  uint32_t client_ = 0;
  int fd_ = -1;
};

TEST_F(WakeFdTest, WrittenOncePerArmingAndOnlyWhenArmed) {
  const uint32_t worker = *table_->AddWorker(getpid(), 1, 0);
  table_->SetClientWakeFd(client_, fd_);
  auto run_one = [&] {
    const uint64_t id = SubmitOne();
    auto claim = table_->Claim(worker);
    ASSERT_TRUE(claim.ok() && claim->has_value());
    ASSERT_TRUE(table_->Complete(worker, id, 0, "r").ok());
  };
  // Not armed: the bell rings, the eventfd stays quiet.
  uint32_t rings = table_->ClientRings(client_);
  run_one();
  EXPECT_NE(table_->ClientRings(client_), rings);
  EXPECT_EQ(Writes(), 0u);
  // Armed: one write, however many complete before the client disarms.
  rings = table_->ArmClientWakeFd(client_);
  run_one();
  run_one();
  EXPECT_EQ(Writes(), 1u);
  EXPECT_EQ(table_->ClientRings(client_), rings + 2);
  table_->DisarmClientWakeFd(client_);
  run_one();
  EXPECT_EQ(Writes(), 0u);
  // Another client's completions never write it.
  const uint32_t other = *table_->AddClient(getpid());
  table_->ArmClientWakeFd(client_);
  TaskSubmission t;
  t.function = "g";
  const uint64_t id = (*table_->Submit(other, {t}))[0];
  ASSERT_TRUE((*table_->Claim(worker)).has_value());
  ASSERT_TRUE(table_->Complete(worker, id, 0, "r").ok());
  EXPECT_EQ(Writes(), 0u);
}

// Real processes: a worker in another process, holding the inherited
// eventfd, wakes this one sleeping in poll; a cancel of a queued task (by
// this process, which has no wake fd) shows in the ring count instead.
TEST_F(WakeFdTest, AWorkerProcessWakesTheClientSleepingInPoll) {
  const uint32_t slot = *table_->AddWorker(0, 1, 0);
  const std::string name = table_->segment_name();
  const int fd = fd_;
  const uint32_t client = client_;
  const pid_t pid = fork();
  if (pid == 0) {
    auto t = TaskTable::Open(name, absl::Seconds(5));
    if (!t.ok()) _exit(2);
    (*t)->SetClientWakeFd(client, fd);
    for (int done = 0; done < 20;) {
      auto claim = (*t)->Claim(slot);
      if (!claim.ok()) _exit(3);
      if (!claim->has_value()) {
        (*t)->WaitForWork(slot, absl::Microseconds(50), absl::Seconds(1));
        continue;
      }
      if (!(*t)->Complete(slot, (*claim)->id, 0, "r").ok()) _exit(4);
      ++done;
    }
    _exit(0);
  }
  uint32_t seen = table_->ClientRings(client_);
  for (int i = 0; i < 20; ++i) {
    const uint64_t id = SubmitOne();
    // As the coordinator's loop: arm, compare the ring count, then sleep.
    while (*table_->Poll(id) != TaskState::kDone) {
      if (table_->ArmClientWakeFd(client_) == seen) {
        pollfd p{fd_, POLLIN, 0};
        ASSERT_EQ(poll(&p, 1, 10000), 1) << "not woken, task " << i;
      }
      table_->DisarmClientWakeFd(client_);
      Writes();
      seen = table_->ClientRings(client_);
    }
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

}  // namespace
}  // namespace shoal::tasks
