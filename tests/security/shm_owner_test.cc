// A shared-memory segment that belongs to another user is never mapped
// (docs/security.md, "The store service"): the store's segment of a real
// `shoal store` is handed to another uid, a client refuses it by name, and
// serves again once the segment is the user's.
#include <sys/stat.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/testing/store_fixture.h"

namespace shoal {
namespace {

TEST(ShmOwner, ASegmentOfAnotherUserIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to chown a segment away";
  auto store = testing::StoreProcess::Start(uint64_t{32} << 20);
  ASSERT_TRUE(store.ok()) << store.status();
  const std::string path = "/dev/shm/" + (*store)->segment_name();
  ASSERT_EQ(chown(path.c_str(), 65534, 65534), 0);
  auto refused = (*store)->Connect("victim");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied)
      << refused.status();
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "uid 65534"))
      << refused.status();
  ASSERT_EQ(chown(path.c_str(), 0, 0), 0);
  auto normal = (*store)->Connect("normal");
  EXPECT_TRUE(normal.ok()) << normal.status();
}

}  // namespace
}  // namespace shoal
