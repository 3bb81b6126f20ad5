// A real node beside CPU hogs: one process per CPU that never blocks (a data
// loader, a compiler). Spinning waits that yield the CPU would hand it to a
// hog for its time slice (1-4 ms) at every turn, and a sync task's round trip
// took ~4 ms, local or remote. The waits stop spinning on a contended CPU
// (base/spin_turn.h) and sleep; a wake-up preempts a hog at once.
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "absl/time/clock.h"
#include "coordinator/client.h"
#include "gtest/gtest.h"
#include "tests/coordinator/node_fixture.h"

namespace shoal {
namespace {

using shoal::testing::NodeProcess;

class CpuHogs {
 public:
  explicit CpuHogs(int n) {
    for (int i = 0; i < n; ++i) {
      const pid_t pid = fork();
      if (pid == 0) {
        while (true) {
        }
      }
      if (pid > 0) pids_.push_back(pid);
    }
  }
  ~CpuHogs() {
    for (pid_t pid : pids_) kill(pid, SIGKILL);
    for (pid_t pid : pids_) waitpid(pid, nullptr, 0);
  }
  size_t size() const { return pids_.size(); }

 private:
  std::vector<pid_t> pids_;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

ipc::TaskSpec Noop() {
  ipc::TaskSpec t;
  t.function = "noop";
  return t;
}

TEST(NodeHogTest, SyncRoundTripsBesideCpuHogsTakeNoTimeSlice) {
  auto node = NodeProcess::Start({});
  ASSERT_TRUE(node.ok()) << node.status();
  auto local = (*node)->Connect();
  ASSERT_TRUE(local.ok()) << local.status();
  ASSERT_TRUE((*local)->local());
  auto remote = (*node)->Connect(/*remote=*/true);
  ASSERT_TRUE(remote.ok()) << remote.status();
  cpu_set_t cpus;
  ASSERT_EQ(sched_getaffinity(0, sizeof(cpus), &cpus), 0);
  CpuHogs hogs(CPU_COUNT(&cpus));
  ASSERT_EQ(hogs.size(), static_cast<size_t>(CPU_COUNT(&cpus)));

  std::vector<double> local_us, remote_us;
  for (int i = 0; i < 400; ++i) {
    absl::Time start = absl::Now();
    auto ref = (*local)->Submit(Noop());
    ASSERT_TRUE(ref.ok()) << ref.status();
    auto r = (*local)->Wait(*ref, absl::Seconds(30));
    ASSERT_TRUE(r.ok() && r->status.ok()) << r.status();
    local_us.push_back(absl::ToDoubleMicroseconds(absl::Now() - start));

    start = absl::Now();
    auto pending = (*remote)->SubmitAsync(Noop());
    ASSERT_TRUE(pending.ok()) << pending.status();
    auto got = (*remote)->Await(*pending, absl::Seconds(30));
    ASSERT_TRUE(got.ok() && got->status.ok()) << got.status();
    remote_us.push_back(absl::ToDoubleMicroseconds(absl::Now() - start));
  }
  // Microseconds to a few hundred here (the remote path is ~20-130 µs);
  // a time slice per wait is 1-4 ms.
  EXPECT_LT(Median(local_us), 1000) << "local sync p50 (us)";
  EXPECT_LT(Median(remote_us), 1000) << "remote pushed sync p50 (us)";
}

}  // namespace
}  // namespace shoal
