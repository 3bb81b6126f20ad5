// Supervisor with real processes (/bin/sleep as the "worker"): the pool's
// restarts, and the added workers actors use — max_restarts, Retire.
#include "coordinator/supervisor.h"

#include <poll.h>
#include <signal.h>

#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace shoal::coordinator {
namespace {

class SupervisorTest : public ::testing::Test {
 protected:
  SupervisorTest() {
    SupervisorOptions o;
    o.command = {"/bin/sleep", "60"};
    o.backoff_initial = absl::Milliseconds(10);
    o.backoff_max = absl::Milliseconds(10);
    Supervisor::Hooks hooks;
    hooks.on_exit = [this](uint32_t w, const std::string& how) {
      exits_.push_back({w, how});
    };
    supervisor_ = std::make_unique<Supervisor>(o, std::vector<WorkerSpec>{},
                                               std::move(hooks));
  }

  // Waits (on the pidfds) for `worker` to exit and hands its exit over.
  void AwaitExit(uint32_t worker) {
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (absl::Now() < deadline) {
      std::vector<int> fds;
      std::vector<uint32_t> ids;
      supervisor_->PollFds(&fds, &ids);
      for (size_t i = 0; i < fds.size(); ++i) {
        if (ids[i] != worker) continue;
        pollfd p{fds[i], POLLIN, 0};
        if (poll(&p, 1, 100) == 1) {
          supervisor_->OnExit(worker);
          return;
        }
      }
    }
    FAIL() << "worker " << worker << " did not exit";
  }

  // Ticks until `worker` runs again (its restart).
  pid_t AwaitRestart(uint32_t worker) {
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (absl::Now() < deadline) {
      supervisor_->Tick(absl::Now());
      if (pid_t pid = supervisor_->Pid(worker); pid != 0) return pid;
      absl::SleepFor(absl::Milliseconds(5));
    }
    return 0;
  }

  std::unique_ptr<Supervisor> supervisor_;
  std::vector<std::pair<uint32_t, std::string>> exits_;
};

TEST_F(SupervisorTest, AddedWorkerRestartsUpToItsMaxRestarts) {
  WorkerSpec spec;
  spec.max_restarts = 1;
  spec.label = "actor 1 Counter";
  absl::StatusOr<uint32_t> w = supervisor_->Add(spec);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(*w, 0u);
  const pid_t first = supervisor_->Pid(*w);
  ASSERT_GT(first, 0);
  ASSERT_EQ(kill(first, SIGKILL), 0);
  AwaitExit(*w);
  ASSERT_EQ(exits_.size(), 1u);
  EXPECT_NE(exits_[0].second.find("SIGKILL"), std::string::npos);
  EXPECT_TRUE(supervisor_->WillRestart(*w));
  const pid_t second = AwaitRestart(*w);
  ASSERT_GT(second, 0);
  EXPECT_NE(second, first);
  // Its one restart is used: the next death is final.
  ASSERT_EQ(kill(second, SIGKILL), 0);
  AwaitExit(*w);
  EXPECT_FALSE(supervisor_->WillRestart(*w));
  supervisor_->Tick(absl::Now() + absl::Seconds(1));
  EXPECT_EQ(supervisor_->Pid(*w), 0);
  std::vector<ipc::WorkerStatus> st = supervisor_->Status();
  ASSERT_EQ(st.size(), 1u);
  EXPECT_EQ(st[0].role(), "actor 1 Counter");
  EXPECT_EQ(st[0].state(), "stopped");
  EXPECT_EQ(st[0].restarts(), 1u);
}

TEST_F(SupervisorTest, RetireKillsAndNeverRestarts) {
  absl::StatusOr<uint32_t> a = supervisor_->Add(WorkerSpec{});
  absl::StatusOr<uint32_t> b = supervisor_->Add(WorkerSpec{});  // unlimited
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*b, *a + 1);
  supervisor_->Retire(*a);
  AwaitExit(*a);
  EXPECT_FALSE(supervisor_->WillRestart(*a));
  EXPECT_GT(supervisor_->Pid(*b), 0);  // the other one is untouched
  ASSERT_EQ(kill(supervisor_->Pid(*b), SIGKILL), 0);
  AwaitExit(*b);
  EXPECT_TRUE(supervisor_->WillRestart(*b));  // max_restarts -1: always
}

TEST_F(SupervisorTest, AddFailsWhenTheCommandCannotStart) {
  SupervisorOptions o;
  o.command = {"/nonexistent/shoal-worker"};
  Supervisor s(o, {}, {});
  absl::StatusOr<uint32_t> w = s.Add(WorkerSpec{});
  EXPECT_FALSE(w.ok());
  EXPECT_FALSE(s.WillRestart(0));
}

}  // namespace
}  // namespace shoal::coordinator
