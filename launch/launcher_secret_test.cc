// The job secret of a multi-node launch (launcher_secret.cc): the user's key
// file is made on first use whatever characters the fresh key has, mode
// 0600, and read back as the same key by every later launcher.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/temp_dir.h"
#include "gtest/gtest.h"
#include "ipc/curve.h"
#include "launch/launcher_internal.h"

namespace shoal::launch::launcher_internal {
namespace {

TEST(JobSecretTest, TheKeyFileIsMadeOnFirstUseWhateverTheKeysCharacters) {
  auto dir = TempDir::Create("shoal-secret-test-");
  ASSERT_TRUE(dir.ok()) << dir.status();
  const std::string path = absl::StrCat(dir->path(), "/kv_secret");
  ASSERT_EQ(setenv("SHOAL_KV_SECRET_FILE", path.c_str(), 1), 0);
  ASSERT_EQ(unsetenv("SHOAL_KV_SECRET"), 0);
  // Each first use makes a fresh key and writes it beside the file under a
  // name of its own first: a hundred fresh keys cover the Z85 characters
  // that may not be in a file name ('/' is one of 85).
  for (int i = 0; i < 100; ++i) {
    unlink(path.c_str());
    absl::StatusOr<std::string> made = JobSecret(/*nnodes=*/2);
    ASSERT_TRUE(made.ok()) << i << ": " << made.status();
    EXPECT_TRUE(ipc::IsValidZ85Key(*made));
    struct stat st;
    ASSERT_EQ(lstat(path.c_str(), &st), 0);
    EXPECT_TRUE(S_ISREG(st.st_mode));
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    absl::StatusOr<std::string> again = JobSecret(/*nnodes=*/2);
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(*again, *made);
  }
  unsetenv("SHOAL_KV_SECRET_FILE");
}

}  // namespace
}  // namespace shoal::launch::launcher_internal
