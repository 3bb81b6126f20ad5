#include "shm/spill_folder.h"

#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/temp_dir.h"
#include "gtest/gtest.h"
#include "ipc/object_id.h"

namespace shoal::shm {
namespace {

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;
  while (struct dirent* e = readdir(d)) {
    const std::string n = e->d_name;
    if (n != "." && n != "..") out.push_back(n);
  }
  closedir(d);
  return out;
}

mode_t ModeOf(const std::string& path) {
  struct stat st;
  EXPECT_EQ(lstat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

class SpillFolderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto dir = TempDir::Create("shoal-spill-test-");
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = std::move(*dir);
  }
  TempDir dir_;
};

TEST_F(SpillFolderTest, WritesPrivateFilesReadsThemBackAndRemovesAll) {
  std::string path;
  {
    auto f = SpillFolder::Create(dir_.path(), "j1", 1 << 20);
    ASSERT_TRUE(f.ok()) << f.status();
    path = (*f)->path();
    EXPECT_TRUE(absl::StartsWith(path, dir_.path() + "/shoal-j1-spill-"));
    EXPECT_EQ(ModeOf(path), 0700);
    std::vector<uint8_t> data(300000);
    for (size_t i = 0; i < data.size(); ++i) data[i] = i * 7 % 251;
    const ObjectId id = ObjectId::Random();
    ASSERT_TRUE((*f)->Write(id, data.data(), data.size()).ok());
    EXPECT_EQ((*f)->used_bytes(), data.size());
    EXPECT_EQ((*f)->files(), 1u);
    EXPECT_EQ(ModeOf(path + "/" + id.ToHex()), 0600);
    std::vector<uint8_t> back(data.size());
    ASSERT_TRUE((*f)->Read(id, back.data(), back.size()).ok());
    EXPECT_EQ(back, data);
    // A size that is not the file's is refused, not read short.
    EXPECT_EQ((*f)->Read(id, back.data(), 10).code(),
              absl::StatusCode::kDataLoss);
    (*f)->Remove(id, data.size());
    EXPECT_EQ((*f)->used_bytes(), 0u);
    EXPECT_TRUE(absl::IsNotFound((*f)->Read(id, back.data(), back.size())));
    ASSERT_TRUE((*f)->Write(ObjectId::Random(), data.data(), 100).ok());
  }
  // The destructor removed the folder and what was left in it.
  EXPECT_TRUE(Entries(dir_.path()).empty());
}

TEST_F(SpillFolderTest, TheQuotaRefusesWithoutWriting) {
  auto f = SpillFolder::Create(dir_.path(), "j2", 1000);
  ASSERT_TRUE(f.ok()) << f.status();
  std::vector<uint8_t> data(600, 1);
  ASSERT_TRUE((*f)->Write(ObjectId::Random(), data.data(), 600).ok());
  absl::Status s = (*f)->Write(ObjectId::Random(), data.data(), 600);
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "--spill-bytes")) << s;
  EXPECT_EQ(Entries((*f)->path()).size(), 2u);  // owner + one object
  EXPECT_EQ((*f)->used_bytes(), 600u);
}

TEST_F(SpillFolderTest, APlantedNameIsNeverWrittenThrough) {
  auto f = SpillFolder::Create(dir_.path(), "j3", 1 << 20);
  ASSERT_TRUE(f.ok()) << f.status();
  const ObjectId id = ObjectId::Random();
  const std::string target = dir_.File("target");
  ASSERT_TRUE(dir_.WriteFile("target", "untouched").ok());
  ASSERT_EQ(symlink(target.c_str(), ((*f)->path() + "/" + id.ToHex()).c_str()),
            0);
  std::vector<uint8_t> data(64, 9);
  absl::Status s = (*f)->Write(id, data.data(), data.size());
  EXPECT_TRUE(absl::IsAlreadyExists(s)) << s;
  std::ifstream in(target);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(text, "untouched");
  EXPECT_EQ((*f)->used_bytes(), 0u);
}

TEST_F(SpillFolderTest, RefusesAParentOfAnotherUserOrALink) {
  const std::string other = dir_.File("other");
  ASSERT_EQ(mkdir(other.c_str(), 0700), 0);
  if (geteuid() == 0) {
    ASSERT_EQ(chown(other.c_str(), 65534, 65534), 0);
  } else {
    ASSERT_EQ(rmdir(other.c_str()), 0);
    ASSERT_EQ(symlink("/", other.c_str()), 0);
  }
  auto f = SpillFolder::Create(other, "j4", 1 << 20);
  EXPECT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kFailedPrecondition)
      << f.status();
  const std::string link = dir_.File("link");
  ASSERT_EQ(symlink(dir_.path().c_str(), link.c_str()), 0);
  auto g = SpillFolder::Create(link, "j4", 1 << 20);
  EXPECT_FALSE(g.ok());
  // A folder others may write to is refused as well.
  const std::string open_dir = dir_.File("open");
  ASSERT_EQ(mkdir(open_dir.c_str(), 0777), 0);
  ASSERT_EQ(chmod(open_dir.c_str(), 0777), 0);
  EXPECT_FALSE(SpillFolder::Create(open_dir, "j4", 1 << 20).ok());
}

TEST_F(SpillFolderTest, AMissingParentIsMadePrivate) {
  const std::string parent = dir_.File("made");
  auto f = SpillFolder::Create(parent, "j5", SpillFolder::kQuotaAuto);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(ModeOf(parent), 0700);
  EXPECT_GT((*f)->quota_bytes(), 0u);
  EXPECT_LT((*f)->quota_bytes(), SpillFolder::kQuotaAuto);
}

TEST_F(SpillFolderTest, TheFolderOfADeadStoreIsRemovedByTheNext) {
  // A child makes a folder, writes a file and dies without cleaning up.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto f = SpillFolder::Create(dir_.path(), "dead", 1 << 20);
    if (!f.ok()) _exit(1);
    uint8_t b[16] = {};
    if (!(*f)->Write(ObjectId::Random(), b, sizeof(b)).ok()) _exit(2);
    _exit(0);  // no destructor runs
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  std::vector<std::string> left = Entries(dir_.path());
  ASSERT_EQ(left.size(), 1u);
  EXPECT_TRUE(absl::StartsWith(left[0], "shoal-dead-spill-"));
  EXPECT_EQ(SpillFolder::StaleFolders(dir_.path()).size(), 1u);
  // A live store's folder is not stale.
  auto live = SpillFolder::Create(dir_.path(), "live", 1 << 20);
  ASSERT_TRUE(live.ok()) << live.status();
  left = Entries(dir_.path());
  ASSERT_EQ(left.size(), 1u);
  EXPECT_TRUE(absl::StartsWith(left[0], "shoal-live-spill-"));
  EXPECT_TRUE(SpillFolder::StaleFolders(dir_.path()).empty());
}

}  // namespace
}  // namespace shoal::shm
