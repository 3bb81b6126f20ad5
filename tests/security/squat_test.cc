// Squatted names (docs/security.md, "Runtime folder and files"): another
// user makes the runtime root (/tmp/shoal-<uid>, here a SHOAL_RUNTIME_DIR of
// the test's) and a node's /dev/shm segments under their names before the
// node starts. `shoal start` still works, on a private fallback root and
// fallback segment names, warning with the squatted paths and their owner;
// `shoal status` and `shoal submit` find and use the node; the squatter's
// files are never used, changed or removed; the janitor removes the fallback
// segments of a SIGKILLed node. The squatter is uid 65534 (chown), so most
// tests need root.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/temp_dir.h"
#include "collectives/rendezvous/in_memory_rendezvous.h"
#include "collectives/shm/shm_communicator.h"
#include "gtest/gtest.h"
#include "shm/segment.h"
#include "tests/testing/command.h"
#include "tests/testing/test_env.h"

namespace shoal {
namespace {

using shoal::testing::ReadFile;
using shoal::testing::RunCommand;
using shoal::testing::RunfilePath;

constexpr uid_t kSquatter = 65534;  // nobody

// /dev/shm names starting with `prefix`.
std::vector<std::string> ShmNames(const std::string& prefix) {
  std::vector<std::string> found;
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return found;
  while (dirent* e = readdir(dir)) {
    if (absl::StartsWith(e->d_name, prefix)) found.push_back(e->d_name);
  }
  closedir(dir);
  std::sort(found.begin(), found.end());
  return found;
}

// A file of the squatter under /dev/shm (4 KiB of 'x', mode 0644).
void Squat(const std::string& name) {
  const std::string path = "/dev/shm/" + name;
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
  ASSERT_GE(fd, 0) << path;
  const std::string bytes(4096, 'x');
  ASSERT_EQ(write(fd, bytes.data(), bytes.size()), 4096);
  close(fd);
  ASSERT_EQ(chown(path.c_str(), kSquatter, kSquatter), 0);
}

// Whether /dev/shm/<name> is still the squatter's file, untouched.
bool StillSquatted(const std::string& name) {
  const std::string path = "/dev/shm/" + name;
  struct stat st;
  return lstat(path.c_str(), &st) == 0 && st.st_uid == kSquatter &&
         ReadFile(path) == std::string(4096, 'x');
}

// "shoal-<job>-<12 hex>-<suffix>": the fallback form of shoal-<job>-<suffix>.
bool IsFallbackOf(const std::string& name, const std::string& job,
                  const std::string& suffix) {
  const std::string head = absl::StrCat("shoal-", job, "-");
  const std::string tail = absl::StrCat("-", suffix);
  if (!absl::StartsWith(name, head) || !absl::EndsWith(name, tail) ||
      name.size() != head.size() + 12 + tail.size()) {
    return false;
  }
  return std::all_of(name.begin() + head.size(),
                     name.begin() + head.size() + 12,
                     [](char c) { return std::isxdigit(c) != 0; });
}

class Squatting : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) {
      GTEST_SKIP() << "needs root: the squatter's files are chowned to uid "
                   << kSquatter;
    }
    // In /tmp: ipc:// socket paths must stay short.
    absl::StatusOr<TempDir> d = TempDir::Create("shoal-squat-test-", "/tmp");
    ASSERT_TRUE(d.ok()) << d.status();
    base_ = *std::move(d);
    root_ = base_.File("rt");  // the root the squatter takes
    ASSERT_EQ(mkdir(root_.c_str(), 0755), 0);
    ASSERT_EQ(chown(root_.c_str(), kSquatter, kSquatter), 0);
    home_ = base_.File("home");
    ASSERT_EQ(mkdir(home_.c_str(), 0700), 0);
    setenv("SHOAL_RUNTIME_DIR", root_.c_str(), 1);
    setenv("HOME", home_.c_str(), 1);
    unsetenv("XDG_RUNTIME_DIR");
    unsetenv("SHOAL_JOB_ID");
    static int n = 0;
    job_ = absl::StrCat("sq", getpid(), "x", n++);
  }

  void TearDown() override {
    for (const std::string& name : ShmNames(absl::StrCat("shoal-", job_, "-")))
      unlink(("/dev/shm/" + name).c_str());
  }

  // `shoal start` of job_ with one worker; its "node ready" line.
  testing::RunningCommand StartNode(std::string* ready) {
    testing::RunningCommand node =
        testing::StartCommand({RunfilePath("tools/shoal"), "start", "--job-id",
                               job_, "-n", "1", "--store-bytes", "64M"},
                              "start");
    absl::StatusOr<std::string> line = node.process.ReadLine(absl::Seconds(30));
    *ready = line.ok() ? *line : std::string(line.status().message());
    return node;
  }

  TempDir base_;
  std::string root_, home_, job_;
};

TEST_F(Squatting, FallbackSegmentNamesKeepTheirSuffixAndCreatorPid) {
  const std::string a = shm::FallbackSegmentName("shoal-j1-store");
  const std::string b = shm::FallbackSegmentName("shoal-j1-store");
  EXPECT_TRUE(IsFallbackOf(a, "j1", "store")) << a;
  EXPECT_NE(a, b) << "fresh randomness each time";
  EXPECT_TRUE(
      IsFallbackOf(shm::FallbackSegmentName("shoal-j1-tasks"), "j1", "tasks"));
  const std::string coll = shm::FallbackSegmentName("shoal-j1-grp-42-coll");
  EXPECT_TRUE(absl::StartsWith(coll, "shoal-j1-grp-")) << coll;
  EXPECT_TRUE(absl::EndsWith(coll, "-42-coll")) << coll;
  EXPECT_EQ(coll.size(), std::string("shoal-j1-grp-42-coll").size() + 13);
}

// Segment::Create under a squatted name: made under a fallback name, which
// clients open by the name the creator reports; the squatter's file is left
// whole, and the fallback is removed with its creator.
TEST_F(Squatting, ASegmentNameOfAnotherUserGetsAFallbackName) {
  const std::string name = absl::StrCat("shoal-", job_, "-store");
  Squat(name);
  std::string made;
  {
    absl::StatusOr<std::unique_ptr<shm::Segment>> seg =
        shm::Segment::Create(name, 1 << 20);
    ASSERT_TRUE(seg.ok()) << seg.status();
    made = (*seg)->name();
    EXPECT_TRUE(IsFallbackOf(made, job_, "store")) << made;
    struct stat st;
    ASSERT_EQ(lstat(("/dev/shm/" + made).c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, geteuid());
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    (*seg)->InitPrefix(job_, 1, 4096);
    (*seg)->Publish(0x5e9);
    absl::StatusOr<std::unique_ptr<shm::Segment>> opened =
        shm::Segment::Open(made, 0x5e9, 1);
    EXPECT_TRUE(opened.ok()) << opened.status();
    // The squatted name itself is still refused to clients.
    EXPECT_EQ(shm::Segment::Open(name, 0x5e9, 1).status().code(),
              absl::StatusCode::kPermissionDenied);
  }
  EXPECT_TRUE(StillSquatted(name));
  EXPECT_EQ(ShmNames(made), std::vector<std::string>{})
      << "the fallback outlived its creator";
}

// A collective segment's squatted name: rank 0 publishes the name it made,
// and the ranks reduce through it.
TEST_F(Squatting, ACollectiveWorksPastASquattedSegment) {
  Squat(absl::StrCat("shoal-", job_, "-grp-", getpid(), "-coll"));
  collectives::InMemoryRendezvous rendezvous;
  collectives::ShmCommOptions o;
  o.timeout = absl::Seconds(30);
  std::vector<absl::Status> status(2);
  std::vector<float> out(2, 0);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      auto comm = collectives::ShmCommunicator::Create(rendezvous, job_, "grp",
                                                       r, 2, o);
      if (!comm.ok()) {
        status[r] = comm.status();
        return;
      }
      const float in = static_cast<float>(r + 1);
      status[r] = (*comm)->AllReduce(&in, &out[r], 1, DType::kF32,
                                     collectives::ReduceOp::kSum);
    });
  }
  for (std::thread& t : ranks) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(status[r].ok()) << r << ": " << status[r];
    EXPECT_EQ(out[r], 3.0f) << r;
  }
  EXPECT_TRUE(
      StillSquatted(absl::StrCat("shoal-", job_, "-grp-", getpid(), "-coll")));
}

// The whole attack on `shoal start`: the root and both segment names taken.
// The node starts, warns, and clients find it; the squatter's files stay
// as they were; a clean stop removes the fallback segments.
TEST_F(Squatting, StartWorksAndClientsFindTheNode) {
  const std::string store = absl::StrCat("shoal-", job_, "-store");
  const std::string tasks = absl::StrCat("shoal-", job_, "-tasks");
  Squat(store);
  Squat(tasks);
  std::string ready;
  testing::RunningCommand node = StartNode(&ready);
  ASSERT_TRUE(absl::StrContains(ready, "ready job " + job_)) << ready;
  // The fallback root beside the squatted one holds the node's sockets.
  EXPECT_TRUE(absl::StrContains(ready, "frontend ipc://" + root_ + "-"))
      << ready;
  const std::string err = ReadFile(node.stderr_path);
  EXPECT_TRUE(absl::StrContains(
      err, absl::StrCat("the runtime folder ", root_, " belongs to uid 65534")))
      << err;
  EXPECT_TRUE(absl::StrContains(
      err, absl::StrCat("/dev/shm/", store, " belongs to uid 65534")))
      << err;
  EXPECT_TRUE(absl::StrContains(
      err, absl::StrCat("/dev/shm/", tasks, " belongs to uid 65534")))
      << err;

  testing::CommandResult status =
      RunCommand({RunfilePath("tools/shoal"), "status"}, "status");
  EXPECT_EQ(status.code, 0) << status.err;
  EXPECT_TRUE(absl::StrContains(status.OutText(), "job " + job_))
      << status.OutText() << status.err;
  testing::CommandResult submit =
      RunCommand({RunfilePath("tools/shoal"), "submit", "echo",
                  "str:through-the-fallback"},
                 "submit");
  EXPECT_EQ(submit.code, 0) << submit.err;
  EXPECT_TRUE(absl::StrContains(submit.OutText(), "through-the-fallback"))
      << submit.OutText() << submit.err;

  const std::vector<std::string> segments =
      ShmNames(absl::StrCat("shoal-", job_, "-"));
  int fallbacks = 0;
  for (const std::string& s : segments) {
    if (IsFallbackOf(s, job_, "store") || IsFallbackOf(s, job_, "tasks"))
      ++fallbacks;
  }
  EXPECT_EQ(fallbacks, 2) << absl::StrJoin(segments, ", ");

  testing::CommandResult stop =
      RunCommand({RunfilePath("tools/shoal"), "stop"}, "stop");
  EXPECT_EQ(stop.code, 0) << stop.err;
  testing::CommandResult ended = node.Finish(absl::Seconds(30));
  EXPECT_EQ(ended.code, 0) << ended.err;
  EXPECT_TRUE(StillSquatted(store));
  EXPECT_TRUE(StillSquatted(tasks));
  EXPECT_TRUE(testing::WaitUntil(
      [&] {
        return ShmNames(absl::StrCat("shoal-", job_, "-")) ==
               std::vector<std::string>({store, tasks});
      },
      absl::Seconds(10)))
      << absl::StrJoin(ShmNames(absl::StrCat("shoal-", job_, "-")), ", ");
  // Nothing was made in the squatter's folder.
  DIR* dir = opendir(root_.c_str());
  ASSERT_NE(dir, nullptr);
  int entries = 0;
  while (dirent* e = readdir(dir)) entries += e->d_name[0] != '.';
  closedir(dir);
  EXPECT_EQ(entries, 0);
}

// A SIGKILLed coordinator: its janitor removes the fallback segments (it
// learnt their names from the coordinator) and leaves the squatter's.
TEST_F(Squatting, TheJanitorRemovesFallbackSegmentsNotTheSquattersOnes) {
  const std::string store = absl::StrCat("shoal-", job_, "-store");
  const std::string tasks = absl::StrCat("shoal-", job_, "-tasks");
  Squat(store);
  Squat(tasks);
  std::string ready;
  testing::RunningCommand node = StartNode(&ready);
  ASSERT_TRUE(absl::StrContains(ready, "ready job " + job_)) << ready;
  // The fallbacks beside the squatted names (and, depending on how far the
  // workers got, their timeline rings).
  const std::vector<std::string> made =
      ShmNames(absl::StrCat("shoal-", job_, "-"));
  int fallbacks = 0;
  for (const std::string& s : made) {
    if (IsFallbackOf(s, job_, "store") || IsFallbackOf(s, job_, "tasks"))
      ++fallbacks;
  }
  ASSERT_EQ(fallbacks, 2) << absl::StrJoin(made, ", ");
  node.process.Signal(SIGKILL);
  ASSERT_TRUE(node.process.Wait(absl::Seconds(10)).ok());
  EXPECT_TRUE(testing::WaitUntil(
      [&] {
        return ShmNames(absl::StrCat("shoal-", job_, "-")) ==
               std::vector<std::string>({store, tasks});
      },
      absl::Seconds(15)))
      << absl::StrJoin(ShmNames(absl::StrCat("shoal-", job_, "-")), ", ");
  EXPECT_TRUE(StillSquatted(store));
  EXPECT_TRUE(StillSquatted(tasks));
}

// With no home to record a fallback in, the start fails naming the root and
// its owner.
TEST_F(Squatting, WithoutAHomeStartFailsByName) {
  unsetenv("HOME");
  testing::CommandResult r =
      RunCommand({RunfilePath("tools/shoal"), "start", "--job-id", job_, "-n",
                  "1", "--store-bytes", "64M"},
                 "start");
  EXPECT_NE(r.code, 0);
  EXPECT_TRUE(absl::StrContains(
      r.err,
      absl::StrCat("the runtime folder ", root_, " belongs to uid 65534")))
      << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "HOME")) << r.err;
}

}  // namespace
}  // namespace shoal
