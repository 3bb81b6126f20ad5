#include "coordinator/janitor.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace shoal::coordinator {
namespace {

std::string ShmPath(const std::string& name) {
  return absl::StrCat("/dev/shm/", name);
}

void MakeSegment(const std::string& name) {
  int fd = open(ShmPath(name).c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  ASSERT_GE(fd, 0) << name;
  close(fd);
}

bool Exists(const std::string& name) {
  struct stat st;
  return stat(ShmPath(name).c_str(), &st) == 0;
}

bool WaitGone(const std::string& name, absl::Duration limit) {
  const absl::Time deadline = absl::Now() + limit;
  while (Exists(name)) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return true;
}

// A pid that no process has now: a child that has exited and been reaped.
pid_t DeadPid() {
  pid_t pid = fork();
  if (pid == 0) _exit(0);
  waitpid(pid, nullptr, 0);
  return pid;
}

// Forks a "coordinator" that starts a janitor for `segments` and then dies
// of SIGKILL (or exits cleanly), and reaps it.
void RunCoordinator(const std::string& job,
                    const std::vector<std::string>& segments, bool kill) {
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto janitor = Janitor::Start(job, segments);
    if (!janitor.ok()) _exit(3);
    if (kill) raise(SIGKILL);
    janitor->reset();
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  if (kill) {
    ASSERT_TRUE(WIFSIGNALED(status));
  } else {
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }
}

std::string UniqueJob(const char* what) {
  return absl::StrCat("janitor-test-", what, "-", getpid());
}

TEST(Janitor, RemovesTheSegmentsWhenItsCoordinatorIsKilled) {
  const std::string job = UniqueJob("kill");
  const std::string store = absl::StrCat("shoal-", job, "-store");
  const std::string tasks = absl::StrCat("shoal-", job, "-tasks");
  MakeSegment(store);
  MakeSegment(tasks);
  // Before the coordinator dies, nothing is touched.
  RunCoordinator(job, {store, tasks}, /*kill=*/true);
  EXPECT_TRUE(WaitGone(store, absl::Seconds(10)));
  EXPECT_TRUE(WaitGone(tasks, absl::Seconds(10)));
}

TEST(Janitor, RemovesCollectiveSegmentsOnlyOfGoneCreatorsOfItsJob) {
  const std::string job = UniqueJob("coll");
  const std::string dead =
      absl::StrCat("shoal-", job, "-grp-", DeadPid(), "-coll");
  const std::string alive =
      absl::StrCat("shoal-", job, "-grp-", getpid(), "-coll");
  const std::string other_job =
      absl::StrCat("shoal-", UniqueJob("other"), "-grp-", DeadPid(), "-coll");
  MakeSegment(dead);
  MakeSegment(alive);
  MakeSegment(other_job);
  RunCoordinator(job, {}, /*kill=*/true);
  EXPECT_TRUE(WaitGone(dead, absl::Seconds(10)));
  // Its creator (this process) lives: kept, as is another job's.
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_TRUE(Exists(alive));
  EXPECT_TRUE(Exists(other_job));
  unlink(ShmPath(alive).c_str());
  unlink(ShmPath(other_job).c_str());
}

TEST(Janitor, GoesAwayAfterACleanExit) {
  const std::string job = UniqueJob("clean");
  const std::string store = absl::StrCat("shoal-", job, "-store");
  MakeSegment(store);
  RunCoordinator(job, {store}, /*kill=*/false);
  // The janitor woke and removed what was left.
  EXPECT_TRUE(WaitGone(store, absl::Seconds(10)));
}

}  // namespace
}  // namespace shoal::coordinator
