#include "ipc/object_id.h"

#include <sys/wait.h>
#include <unistd.h>

#include <set>

#include "gtest/gtest.h"

namespace shoal {
namespace {

TEST(ObjectIdTest, RandomIdsAreDistinctAndNotNil) {
  std::set<ObjectId> seen;
  for (int i = 0; i < 10000; ++i) {
    ObjectId id = ObjectId::Random();
    EXPECT_FALSE(id.IsNil());
    EXPECT_TRUE(seen.insert(id).second);
  }
}

TEST(ObjectIdTest, ForkedChildDrawsDifferentIds) {
  ObjectId parent_first = ObjectId::Random();
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t pid = fork();
  if (pid == 0) {
    ObjectId id = ObjectId::Random();
    _exit(write(fds[1], id.data(), ObjectId::kSize) == ObjectId::kSize ? 0 : 1);
  }
  ObjectId mine = ObjectId::Random();
  char buf[ObjectId::kSize];
  ASSERT_EQ(read(fds[0], buf, sizeof(buf)), static_cast<ssize_t>(sizeof(buf)));
  int status;
  waitpid(pid, &status, 0);
  auto child = ObjectId::FromBinary(absl::string_view(buf, sizeof(buf)));
  ASSERT_TRUE(child.ok());
  EXPECT_NE(*child, mine);
  EXPECT_NE(*child, parent_first);
  close(fds[0]);
  close(fds[1]);
}

TEST(ObjectIdTest, HexRoundTrip) {
  ObjectId id = ObjectId::Random();
  std::string hex = id.ToHex();
  EXPECT_EQ(hex.size(), 32u);
  auto back = ObjectId::FromHex(hex);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, id);
}

TEST(ObjectIdTest, RejectsBadInput) {
  EXPECT_EQ(ObjectId::FromHex("abc").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ObjectId::FromHex(std::string(32, 'g')).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ObjectId::FromBinary(std::string(15, 'x')).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shoal
