// A coordinator killed with SIGKILL leaves no /dev/shm segment behind once
// its workers are gone, with no later start needed
// (coordinator/janitor.h). Real nodes from `shoal start`.
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/coordinator/node_fixture.h"

namespace shoal::testing {
namespace {

std::vector<std::string> SegmentsOfJob(const std::string& job_id) {
  std::vector<std::string> found;
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return found;
  const std::string prefix = absl::StrCat("shoal-", job_id, "-");
  while (dirent* e = readdir(dir)) {
    if (absl::StartsWith(e->d_name, prefix)) found.push_back(e->d_name);
  }
  closedir(dir);
  return found;
}

// Polls until job_id has no segment left or `limit` passes; returns those
// left.
std::vector<std::string> WaitForNoSegments(const std::string& job_id,
                                           absl::Duration limit) {
  const absl::Time deadline = absl::Now() + limit;
  std::vector<std::string> left = SegmentsOfJob(job_id);
  while (!left.empty() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
    left = SegmentsOfJob(job_id);
  }
  return left;
}

TEST(CoordinatorKilled, LeavesNoSegmentBehind) {
  auto node = NodeProcess::Start({"-n", "2"});
  ASSERT_TRUE(node.ok()) << node.status();
  const std::string job = (*node)->job_id();
  {
    // The node is serving, and its store and task table exist.
    auto client = (*node)->Connect();
    ASSERT_TRUE(client.ok()) << client.status();
  }
  const std::vector<std::string> before = SegmentsOfJob(job);
  EXPECT_TRUE(std::count(before.begin(), before.end(),
                         absl::StrCat("shoal-", job, "-store")) == 1)
      << "no store segment for job " << job;
  EXPECT_TRUE(std::count(before.begin(), before.end(),
                         absl::StrCat("shoal-", job, "-tasks")) == 1)
      << "no task-table segment for job " << job;

  (*node)->process().Signal(SIGKILL);
  absl::StatusOr<int> code = (*node)->process().Wait(absl::Seconds(10));
  ASSERT_TRUE(code.ok()) << code.status();

  const std::vector<std::string> left =
      WaitForNoSegments(job, absl::Seconds(15));
  EXPECT_TRUE(left.empty()) << "left behind: " << absl::StrJoin(left, ", ");

  // And a new node starts and serves as usual.
  auto next = NodeProcess::Start({"-n", "1"});
  ASSERT_TRUE(next.ok()) << next.status();
  auto client = (*next)->Connect();
  ASSERT_TRUE(client.ok()) << client.status();
}

// A clean stop removes everything too, and the janitor does not linger.
TEST(CoordinatorStopped, LeavesNoSegmentBehind) {
  auto node = NodeProcess::Start({"-n", "1"});
  ASSERT_TRUE(node.ok()) << node.status();
  const std::string job = (*node)->job_id();
  absl::StatusOr<int> code = (*node)->Stop();
  ASSERT_TRUE(code.ok()) << code.status();
  const std::vector<std::string> left =
      WaitForNoSegments(job, absl::Seconds(15));
  EXPECT_TRUE(left.empty()) << "left behind: " << absl::StrJoin(left, ", ");
}

}  // namespace
}  // namespace shoal::testing
