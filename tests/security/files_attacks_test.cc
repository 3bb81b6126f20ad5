// Attacks through the runtime folder and temporary files (docs/security.md,
// "Runtime folder and files"): a root planted by someone else (a private
// fallback is used instead, and clients find it; a planted record cannot send
// them elsewhere), a link in its place, a folder others may write to, links
// planted where the discovery file is written; and the helpers every
// temporary folder and private file of shoal's come from (base/temp_dir.h).
// Each attack is refused or written around, and a good folder still works.
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/runtime_dir.h"
#include "base/temp_dir.h"
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
  // A home of the test's own: the fallback records go there, not into the
  // machine's real home.
  std::string UseHome() {
    const std::string home = base_ + "/home";
    mkdir(home.c_str(), 0700);
    setenv("HOME", home.c_str(), 1);
    return home;
  }
  // A folder of uid 65534 at `path`.
  static void MakeTheirs(const std::string& path) {
    ASSERT_EQ(mkdir(path.c_str(), 0755), 0);
    ASSERT_EQ(chown(path.c_str(), 65534, 65534), 0);
  }
  std::string base_;
};

// Another user's folder at the root's name: not used; a private fallback
// <root>-XXXXXX is made beside it and recorded, and RuntimeRoot() (what
// clients use) finds it.
TEST_F(FilesAttacks, ARootOfAnotherUserGetsAPrivateFallbackThatClientsFind) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to chown a folder away";
  const std::string root = base_ + "/theirs";
  MakeTheirs(root);
  UseRoot(root);
  UseHome();
  EXPECT_EQ(RuntimeRoot(), root) << "nothing recorded yet";
  absl::StatusOr<std::string> dir = JobDir("j1");
  ASSERT_TRUE(dir.ok()) << dir.status();
  const std::string fallback = dir->substr(0, dir->rfind('/'));
  EXPECT_TRUE(absl::StartsWith(fallback, root + "-")) << fallback;
  EXPECT_EQ(fallback.size(), root.size() + 7) << fallback;
  struct stat st;
  ASSERT_EQ(lstat(fallback.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_uid, geteuid());
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_NE(stat((root + "/j1").c_str(), &st), 0) << "nothing made inside";
  EXPECT_EQ(RuntimeRoot(), fallback) << "clients find the fallback";
  // The record: a private file in a private folder.
  const std::string record = FallbackRecordPath(root);
  ASSERT_EQ(lstat(record.c_str(), &st), 0) << record;
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(lstat(record.substr(0, record.rfind('/')).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  // A second node of the same user uses the same fallback.
  absl::StatusOr<std::string> again = JobDir("j2");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, fallback + "/j2");
}

// Without a home there is nowhere only this user may write the record: the
// root is refused by name, as before.
TEST_F(FilesAttacks, WithoutAHomeARootOfAnotherUserIsRefusedByName) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to chown a folder away";
  const std::string root = base_ + "/theirs";
  MakeTheirs(root);
  UseRoot(root);
  const char* home = getenv("HOME");
  const std::string saved = home != nullptr ? home : "";
  unsetenv("HOME");
  absl::StatusOr<std::string> dir = JobDir("j1");
  if (!saved.empty()) setenv("HOME", saved.c_str(), 1);
  EXPECT_EQ(dir.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(dir.status().message(), root)) << dir.status();
  EXPECT_TRUE(absl::StrContains(dir.status().message(), "uid 65534"));
  EXPECT_TRUE(absl::StrContains(dir.status().message(), "HOME"));
  struct stat st;
  EXPECT_NE(stat((root + "/j1").c_str(), &st), 0) << "nothing made inside";
}

// Records that would send clients to a folder the user does not hold alone
// are ignored by RuntimeRoot() and replaced by JobDir(): one naming another
// user's folder of the right form, one naming a folder of another form, one
// written for another root, and a link in the record's place.
TEST_F(FilesAttacks, ARecordCannotSendClientsToSomeoneElsesFolder) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to chown a folder away";
  const std::string root = base_ + "/theirs";
  MakeTheirs(root);
  UseRoot(root);
  UseHome();
  ASSERT_TRUE(JobDir("j0").ok());  // makes the record folder and a record
  const std::string record = FallbackRecordPath(root);
  const std::string their_fallback = root + "-evil00";
  MakeTheirs(their_fallback);
  const std::string other_form = base_ + "/mine";
  ASSERT_EQ(mkdir(other_form.c_str(), 0700), 0);
  const std::string planted_file = base_ + "/planted";
  { std::ofstream(planted_file) << root << "\n" << their_fallback << "\n"; }
  const std::vector<std::string> bad_records = {
      root + "\n" + their_fallback + "\n",
      root + "\n" + other_form + "\n",
      base_ + "/elsewhere\n" + root + "-abcdef\n",
  };
  for (int k = 0; k <= static_cast<int>(bad_records.size()); ++k) {
    unlink(record.c_str());
    if (k < static_cast<int>(bad_records.size())) {
      std::ofstream(record) << bad_records[k];
      chmod(record.c_str(), 0600);
    } else {
      ASSERT_EQ(symlink(planted_file.c_str(), record.c_str()), 0);
    }
    const std::string seen = RuntimeRoot();
    EXPECT_EQ(seen, root) << "record " << k << " was followed";
    absl::StatusOr<std::string> dir = JobDir("j1");
    ASSERT_TRUE(dir.ok()) << k << ": " << dir.status();
    const std::string fallback = dir->substr(0, dir->rfind('/'));
    EXPECT_NE(fallback, their_fallback) << k;
    EXPECT_NE(fallback, other_form) << k;
    struct stat st;
    ASSERT_EQ(lstat(fallback.c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, geteuid()) << k;
    EXPECT_EQ(RuntimeRoot(), fallback) << k;
    ASSERT_EQ(lstat(record.c_str(), &st), 0);
    EXPECT_TRUE(S_ISREG(st.st_mode)) << k << ": the record was replaced";
  }
  struct stat st;
  EXPECT_NE(stat((their_fallback + "/j1").c_str(), &st), 0);
  EXPECT_NE(stat((other_form + "/j1").c_str(), &st), 0);
}

// The folder of records must be this user's and closed to others' writes:
// one of another user is neither read nor written.
TEST_F(FilesAttacks, ARecordFolderOfAnotherUserIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to chown a folder away";
  const std::string root = base_ + "/theirs";
  MakeTheirs(root);
  UseRoot(root);
  const std::string home = UseHome();
  MakeTheirs(home + "/.shoal");
  const std::string fallback = root + "-abcdef";
  ASSERT_EQ(mkdir(fallback.c_str(), 0700), 0);
  {
    std::ofstream(FallbackRecordPath(root)) << root << "\n" << fallback << "\n";
  }
  EXPECT_EQ(RuntimeRoot(), root);
  absl::StatusOr<std::string> dir = JobDir("j1");
  EXPECT_EQ(dir.status().code(), absl::StatusCode::kFailedPrecondition)
      << dir.status();
  EXPECT_TRUE(absl::StrContains(dir.status().message(), home + "/.shoal"))
      << dir.status();
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

// ---- TempDir, OpenPrivateFolder, OpenPrivateFileAt (base/temp_dir.h)

TEST_F(FilesAttacks, TempDirIsFreshPrivateAndRemoved) {
  std::set<std::string> seen;
  std::string kept;
  {
    std::vector<TempDir> dirs;
    for (int i = 0; i < 50; ++i) {
      absl::StatusOr<TempDir> d = TempDir::Create("shoal-bench-mpi-", base_);
      ASSERT_TRUE(d.ok()) << d.status();
      EXPECT_TRUE(absl::StartsWith(d->path(), base_ + "/shoal-bench-mpi-"));
      EXPECT_TRUE(seen.insert(d->path()).second) << "not unique";
      struct stat st;
      ASSERT_EQ(lstat(d->path().c_str(), &st), 0);
      EXPECT_TRUE(S_ISDIR(st.st_mode));
      EXPECT_EQ(st.st_uid, geteuid());
      EXPECT_EQ(st.st_mode & 0777, 0700u);
      dirs.push_back(*std::move(d));
    }
    // Contents, a link out of it and a sub-folder go with it; the link's
    // target does not.
    const std::string victim = base_ + "/victim";
    { std::ofstream(victim) << "precious"; }
    TempDir& d = dirs[0];
    ASSERT_TRUE(d.WriteFile("barrier.c", "int main() {}\n").ok());
    ASSERT_EQ(symlink(victim.c_str(), d.File("link").c_str()), 0);
    ASSERT_EQ(mkdir(d.File("sub").c_str(), 0700), 0);
    { std::ofstream(d.File("sub/x")) << "x"; }
    struct stat st;
    ASSERT_EQ(stat(d.File("barrier.c").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    TempDir moved = std::move(dirs[1]);
    EXPECT_TRUE(dirs[1].path().empty());
    absl::StatusOr<TempDir> k = TempDir::Create("keep-", base_);
    ASSERT_TRUE(k.ok());
    kept = k->Release();
  }
  for (const std::string& p : seen) {
    struct stat st;
    EXPECT_NE(lstat(p.c_str(), &st), 0) << p << " was left behind";
  }
  EXPECT_EQ(Read(base_ + "/victim"), "precious");
  struct stat st;
  EXPECT_EQ(stat(kept.c_str(), &st), 0) << "Release keeps the folder";
}

TEST_F(FilesAttacks, TempDirDefaultsToTmpdirAndRefusesABadPrefix) {
  const char* old = getenv("TMPDIR");
  const std::string saved = old != nullptr ? old : "";
  setenv("TMPDIR", base_.c_str(), 1);
  absl::StatusOr<TempDir> d = TempDir::Create("x-");
  if (saved.empty()) {
    unsetenv("TMPDIR");
  } else {
    setenv("TMPDIR", saved.c_str(), 1);
  }
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(absl::StartsWith(d->path(), base_ + "/x-")) << d->path();
  EXPECT_EQ(TempDir::Create("a/b").status().code(),
            absl::StatusCode::kInvalidArgument);
}

// WriteFile never writes through a name that exists (a link planted there
// included): O_CREAT|O_EXCL|O_NOFOLLOW.
TEST_F(FilesAttacks, TempDirWriteFileRefusesWhatIsThere) {
  absl::StatusOr<TempDir> d = TempDir::Create("w-", base_);
  ASSERT_TRUE(d.ok());
  const std::string victim = base_ + "/victim";
  { std::ofstream(victim) << "precious"; }
  ASSERT_EQ(symlink(victim.c_str(), d->File("barrier.c").c_str()), 0);
  EXPECT_EQ(d->WriteFile("barrier.c", "evil").code(),
            absl::StatusCode::kAlreadyExists);
  ASSERT_EQ(symlink((base_ + "/nothing").c_str(), d->File("dangling").c_str()),
            0);
  EXPECT_FALSE(d->WriteFile("dangling", "evil").ok());
  struct stat st;
  EXPECT_NE(stat((base_ + "/nothing").c_str(), &st), 0);
  EXPECT_EQ(Read(victim), "precious");
  EXPECT_EQ(d->WriteFile("../x", "evil").code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(FilesAttacks, OpenPrivateFolderMakesItPrivateAndRefusesOthers) {
  bool created = false;
  const std::string made = base_ + "/logs";
  absl::StatusOr<int> fd = OpenPrivateFolder(made, true, "--log-dir", &created);
  ASSERT_TRUE(fd.ok()) << fd.status();
  close(*fd);
  EXPECT_TRUE(created);
  struct stat st;
  ASSERT_EQ(stat(made.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  // A link to it is refused, naming it.
  const std::string link = base_ + "/link";
  ASSERT_EQ(symlink(made.c_str(), link.c_str()), 0);
  fd = OpenPrivateFolder(link, true, "--log-dir");
  EXPECT_EQ(fd.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(fd.status().message(), link)) << fd.status();
  EXPECT_TRUE(absl::StrContains(fd.status().message(), "link"));
  // One others may write to is refused.
  const std::string open_dir = base_ + "/open";
  ASSERT_EQ(mkdir(open_dir.c_str(), 0700), 0);
  ASSERT_EQ(chmod(open_dir.c_str(), 0777), 0);
  fd = OpenPrivateFolder(open_dir, true, "--log-dir");
  EXPECT_EQ(fd.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(fd.status().message(), "0777"));
  if (geteuid() != 0) GTEST_SKIP() << "needs root to chown a folder away";
  const std::string theirs = base_ + "/theirs";
  MakeTheirs(theirs);
  fd = OpenPrivateFolder(theirs, true, "--log-dir");
  EXPECT_EQ(fd.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(fd.status().message(), theirs));
  EXPECT_TRUE(absl::StrContains(fd.status().message(), "uid 65534"));
}

TEST_F(FilesAttacks, OpenPrivateFileAtNeverWritesThroughAPlantedName) {
  const std::string dir = base_ + "/logs";
  absl::StatusOr<int> dir_fd = OpenPrivateFolder(dir, true, "--log-dir");
  ASSERT_TRUE(dir_fd.ok());
  const std::string victim = base_ + "/victim";
  { std::ofstream(victim) << "precious"; }
  // A link, dangling or not.
  ASSERT_EQ(symlink(victim.c_str(), (dir + "/rank0.stdout").c_str()), 0);
  absl::StatusOr<int> fd =
      OpenPrivateFileAt(*dir_fd, dir, "rank0.stdout", O_TRUNC);
  EXPECT_EQ(fd.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(fd.status().message(), "link")) << fd.status();
  ASSERT_EQ(symlink((base_ + "/new").c_str(), (dir + "/rank1.stdout").c_str()),
            0);
  EXPECT_FALSE(OpenPrivateFileAt(*dir_fd, dir, "rank1.stdout", O_APPEND).ok());
  struct stat st;
  EXPECT_NE(stat((base_ + "/new").c_str(), &st), 0);
  // A second hard link: refused, and O_TRUNC did not touch it.
  ASSERT_EQ(link(victim.c_str(), (dir + "/rank2.stdout").c_str()), 0);
  fd = OpenPrivateFileAt(*dir_fd, dir, "rank2.stdout", O_TRUNC);
  EXPECT_EQ(fd.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(fd.status().message(), "hard link"));
  EXPECT_EQ(Read(victim), "precious");
  // A file of ours with a loose mode becomes 0600; a new one is 0600.
  { std::ofstream(dir + "/rank3.stdout") << "old\n"; }
  ASSERT_EQ(chmod((dir + "/rank3.stdout").c_str(), 0644), 0);
  fd = OpenPrivateFileAt(*dir_fd, dir, "rank3.stdout", O_APPEND);
  ASSERT_TRUE(fd.ok()) << fd.status();
  ASSERT_EQ(write(*fd, "new\n", 4), 4);
  close(*fd);
  EXPECT_EQ(Read(dir + "/rank3.stdout"), "old\nnew\n");
  ASSERT_EQ(stat((dir + "/rank3.stdout").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  fd = OpenPrivateFileAt(*dir_fd, dir, "rank4.stderr", O_APPEND);
  ASSERT_TRUE(fd.ok());
  close(*fd);
  ASSERT_EQ(stat((dir + "/rank4.stderr").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  if (geteuid() == 0) {
    // Another user's file is refused and left whole.
    { std::ofstream(dir + "/rank5.stdout") << "theirs"; }
    ASSERT_EQ(chown((dir + "/rank5.stdout").c_str(), 65534, 65534), 0);
    fd = OpenPrivateFileAt(*dir_fd, dir, "rank5.stdout", O_TRUNC);
    EXPECT_EQ(fd.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_TRUE(absl::StrContains(fd.status().message(), "uid 65534"));
    EXPECT_EQ(Read(dir + "/rank5.stdout"), "theirs");
  }
  close(*dir_fd);
}

}  // namespace
}  // namespace shoal
