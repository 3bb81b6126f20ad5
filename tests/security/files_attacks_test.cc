// Attacks through the runtime folder (docs/security.md, "Files"): a folder
// planted by someone else, a link in its place, a folder others may write
// to, and links planted where the discovery file is written. Each is refused
// or written around, and a good folder still works.
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/runtime_dir.h"
#include "gtest/gtest.h"

namespace shoal {
namespace {

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class FilesAttacks : public ::testing::Test {
 protected:
  void SetUp() override {
    // /tmp, not TEST_TMPDIR: ipc:// socket paths must stay short.
    std::string templ = "/tmp/shoal-files-testXXXXXX";
    ASSERT_NE(mkdtemp(templ.data()), nullptr);
    base_ = templ;
  }
  void TearDown() override {
    const std::string rm = absl::StrCat("rm -rf '", base_, "'");
    EXPECT_EQ(system(rm.c_str()), 0);
  }
  void UseRoot(const std::string& root) {
    setenv("SHOAL_RUNTIME_DIR", root.c_str(), 1);
  }
  std::string base_;
};

TEST_F(FilesAttacks, ARootOfAnotherUserIsRefusedByName) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to chown a folder away";
  const std::string root = base_ + "/theirs";
  ASSERT_EQ(mkdir(root.c_str(), 0755), 0);
  ASSERT_EQ(chown(root.c_str(), 65534, 65534), 0);
  UseRoot(root);
  absl::StatusOr<std::string> dir = JobDir("j1");
  EXPECT_EQ(dir.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(dir.status().message(), root)) << dir.status();
  EXPECT_TRUE(absl::StrContains(dir.status().message(), "uid 65534"));
  struct stat st;
  EXPECT_NE(stat((root + "/j1").c_str(), &st), 0) << "nothing made inside";
}

TEST_F(FilesAttacks, ALinkOrAWritableRootIsRefused) {
  const std::string target = base_ + "/target";
  ASSERT_EQ(mkdir(target.c_str(), 0700), 0);
  const std::string link_root = base_ + "/link";
  ASSERT_EQ(symlink(target.c_str(), link_root.c_str()), 0);
  UseRoot(link_root);
  EXPECT_EQ(JobDir("j1").status().code(),
            absl::StatusCode::kFailedPrecondition);
  const std::string open_root = base_ + "/open";
  ASSERT_EQ(mkdir(open_root.c_str(), 0700), 0);
  ASSERT_EQ(chmod(open_root.c_str(), 0777), 0);
  UseRoot(open_root);
  absl::StatusOr<std::string> dir = JobDir("j1");
  EXPECT_EQ(dir.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(dir.status().message(), "0777"))
      << dir.status();
  // A job folder others may enter is refused too.
  const std::string good = base_ + "/good";
  ASSERT_EQ(mkdir(good.c_str(), 0700), 0);
  ASSERT_EQ(mkdir((good + "/j2").c_str(), 0700), 0);
  ASSERT_EQ(chmod((good + "/j2").c_str(), 0755), 0);
  UseRoot(good);
  EXPECT_EQ(JobDir("j2").status().code(),
            absl::StatusCode::kFailedPrecondition);
  // The good root still serves a new job, with a private folder.
  absl::StatusOr<std::string> ok = JobDir("j3");
  ASSERT_TRUE(ok.ok()) << ok.status();
  struct stat st;
  ASSERT_EQ(stat(ok->c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
}

// Links planted at the file's name and at the temporary name the old code
// used: neither target is written; the file is replaced, mode 0600.
TEST_F(FilesAttacks, WritesNeverFollowPlantedLinks) {
  const std::string victim = base_ + "/victim";
  { std::ofstream(victim) << "precious"; }
  const std::string path = base_ + "/coordinator";
  ASSERT_EQ(symlink(victim.c_str(), path.c_str()), 0);
  const std::string old_tmp = absl::StrCat(path, ".tmp.", getpid());
  ASSERT_EQ(symlink(victim.c_str(), old_tmp.c_str()), 0);
  ASSERT_TRUE(WriteRuntimeFile(path, "frontend=x\n").ok());
  EXPECT_EQ(Read(victim), "precious");
  EXPECT_EQ(Read(path), "frontend=x\n");
  struct stat st;
  ASSERT_EQ(lstat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  // And again over the regular file it left.
  ASSERT_TRUE(WriteRuntimeFile(path, "frontend=y\n").ok());
  EXPECT_EQ(Read(path), "frontend=y\n");
}

}  // namespace
}  // namespace shoal
