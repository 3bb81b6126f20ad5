// `shoal launch --log-dir` against files planted by another user
// (docs/launch.md, docs/security.md "Runtime folder and files"): the real
// `shoal launch`. A link at rank<R>.stdout is refused, never written
// through; a folder of another user, or a link in the folder's place, is
// refused by name; a folder shoal makes is 0700, its files 0600.
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/temp_dir.h"
#include "gtest/gtest.h"
#include "tests/testing/command.h"
#include "tests/testing/test_env.h"

namespace shoal {
namespace {

using shoal::testing::ReadFile;
using shoal::testing::RunfilePath;

constexpr uid_t kOtherUid = 65534;  // nobody

class LogDirAttacks : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<TempDir> d = TempDir::Create("shoal-logdir-test-");
    ASSERT_TRUE(d.ok()) << d.status();
    base_ = *std::move(d);
    victim_ = base_.File("victim");
    std::ofstream(victim_) << "precious\n";
  }

  // `shoal launch --nproc-per-node 1 --log-dir <dir>` of a program that
  // writes one line to each stream.
  testing::CommandResult Launch(const std::string& dir) {
    return testing::RunCommand(
        {RunfilePath("tools/shoal"), "launch", "--store-bytes", "64M",
         "--nproc-per-node", "1", "--stop-grace", "1", "--log-dir", dir, "--",
         "/bin/sh", "-c", "echo out-line; echo err-line >&2"},
        "launch");
  }

  // The victim is another user's when this test may chown.
  void GiveVictimAway() {
    if (geteuid() == 0) {
      ASSERT_EQ(chown(victim_.c_str(), kOtherUid, kOtherUid), 0);
    }
  }

  TempDir base_;
  std::string victim_;
};

// rank0.stdout planted as a link to a file outside: the launch fails naming
// the link, and the file keeps its bytes; the rank never ran.
TEST_F(LogDirAttacks, APlantedLinkAtARankFileIsRefusedNotFollowed) {
  GiveVictimAway();
  const std::string dir = base_.File("logs");
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
  ASSERT_EQ(symlink(victim_.c_str(), (dir + "/rank0.stdout").c_str()), 0);
  testing::CommandResult r = Launch(dir);
  EXPECT_NE(r.code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, dir + "/rank0.stdout")) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "is a link")) << r.err;
  EXPECT_EQ(ReadFile(victim_), "precious\n");
  EXPECT_FALSE(absl::StrContains(r.OutText(), "out-line")) << "the rank ran";
  struct stat st;
  ASSERT_EQ(lstat((dir + "/rank0.stdout").c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
}

// A dangling link at rank0.stderr: O_CREAT would have made its target.
TEST_F(LogDirAttacks, ADanglingLinkCreatesNothing) {
  const std::string dir = base_.File("logs");
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
  const std::string target = base_.File("made-through-the-link");
  ASSERT_EQ(symlink(target.c_str(), (dir + "/rank0.stderr").c_str()), 0);
  testing::CommandResult r = Launch(dir);
  EXPECT_NE(r.code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, dir + "/rank0.stderr")) << r.err;
  struct stat st;
  EXPECT_NE(lstat(target.c_str(), &st), 0) << "created through the link";
}

// A hard link to another user's file at rank0.stdout: refused, untouched.
TEST_F(LogDirAttacks, AHardLinkedRankFileIsRefused) {
  GiveVictimAway();
  const std::string dir = base_.File("logs");
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
  ASSERT_EQ(link(victim_.c_str(), (dir + "/rank0.stdout").c_str()), 0);
  testing::CommandResult r = Launch(dir);
  EXPECT_NE(r.code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, dir + "/rank0.stdout")) << r.err;
  EXPECT_EQ(ReadFile(victim_), "precious\n");
}

// A folder of uid 65534 at the --log-dir name: refused with a message naming
// the folder and its owner (FailedPrecondition, files_attacks_test); nothing
// is written in it.
TEST_F(LogDirAttacks, AFolderOfAnotherUserIsRefusedByName) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to chown a folder away";
  const std::string dir = base_.File("shoal-launch-logs");
  ASSERT_EQ(mkdir(dir.c_str(), 0777), 0);
  ASSERT_EQ(chmod(dir.c_str(), 0777), 0);
  ASSERT_EQ(chown(dir.c_str(), kOtherUid, kOtherUid), 0);
  testing::CommandResult r = Launch(dir);
  EXPECT_NE(r.code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, dir)) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "uid 65534")) << r.err;
  struct stat st;
  EXPECT_NE(lstat((dir + "/rank0.stdout").c_str(), &st), 0);
  EXPECT_NE(lstat((dir + "/rank0.stderr").c_str(), &st), 0);
}

// A link in the folder's place: refused, nothing written where it points.
TEST_F(LogDirAttacks, ALinkInTheFoldersPlaceIsRefused) {
  const std::string target = base_.File("target");
  ASSERT_EQ(mkdir(target.c_str(), 0700), 0);
  const std::string dir = base_.File("logs");
  ASSERT_EQ(symlink(target.c_str(), dir.c_str()), 0);
  testing::CommandResult r = Launch(dir);
  EXPECT_NE(r.code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, dir)) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "link")) << r.err;
  struct stat st;
  EXPECT_NE(lstat((target + "/rank0.stdout").c_str(), &st), 0);
}

// The folder shoal makes is 0700, the rank files 0600, with the output.
TEST_F(LogDirAttacks, AFolderShoalMakesIsPrivateAndSoAreTheFiles) {
  const std::string dir = base_.File("new-logs");
  testing::CommandResult r = Launch(dir);
  ASSERT_EQ(r.code, 0) << r.err;
  struct stat st;
  ASSERT_EQ(lstat(dir.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  for (const char* f : {"/rank0.stdout", "/rank0.stderr"}) {
    ASSERT_EQ(lstat((dir + f).c_str(), &st), 0) << f;
    EXPECT_TRUE(S_ISREG(st.st_mode)) << f;
    EXPECT_EQ(st.st_mode & 0777, 0600u) << f;
  }
  EXPECT_EQ(ReadFile(dir + "/rank0.stdout"), "out-line\n");
  EXPECT_EQ(ReadFile(dir + "/rank0.stderr"), "err-line\n");
  // Run again: appended to, and a file left 0644 by an older shoal becomes
  // 0600.
  ASSERT_EQ(chmod((dir + "/rank0.stdout").c_str(), 0644), 0);
  r = Launch(dir);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(ReadFile(dir + "/rank0.stdout"), "out-line\nout-line\n");
  ASSERT_EQ(lstat((dir + "/rank0.stdout").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

}  // namespace
}  // namespace shoal
