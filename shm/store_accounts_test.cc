#include "shm/store_accounts.h"

#include "gtest/gtest.h"

namespace shoal::shm {
namespace {

constexpr uint64_t kMiB = 1 << 20;

TEST(StoreAccountsTest, ChargesUpToTheLimitAndNoFurther) {
  StoreAccounts book;
  ASSERT_TRUE(book.SetLimit(7, 8 * kMiB).ok());
  ASSERT_TRUE(book.CheckCharge(7, 4 * kMiB).ok());
  book.Charge(7, /*entry=*/10, 4 * kMiB);
  ASSERT_TRUE(book.CheckCharge(7, 4 * kMiB).ok());
  book.Charge(7, /*entry=*/11, 4 * kMiB);
  absl::Status s = book.CheckCharge(7, 64);
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_TRUE(StoreAccounts::IsLimitError(s)) << s;
  EXPECT_EQ(s.message(),
            "store account 7 holds 8388608 bytes in 2 objects; 64 more would "
            "exceed its limit of 8388608 bytes");
  auto usage = book.Get(7);
  ASSERT_TRUE(usage.ok());
  EXPECT_EQ(usage->used_bytes, 8 * kMiB);
  EXPECT_EQ(usage->objects, 2u);
  EXPECT_EQ(usage->limit_bytes, 8 * kMiB);
  EXPECT_EQ(book.AccountOf(10), 7u);

  book.Uncharge(10);
  EXPECT_EQ(book.Get(7)->used_bytes, 4 * kMiB);
  EXPECT_EQ(book.AccountOf(10), 0u);
  EXPECT_TRUE(book.CheckCharge(7, 4 * kMiB).ok());
  book.Uncharge(10);  // twice: nothing more
  EXPECT_EQ(book.Get(7)->used_bytes, 4 * kMiB);
}

TEST(StoreAccountsTest, AHugeRequestDoesNotOverflow) {
  StoreAccounts book;
  ASSERT_TRUE(book.SetLimit(1, 8 * kMiB).ok());
  book.Charge(1, 0, kMiB);
  EXPECT_TRUE(StoreAccounts::IsLimitError(book.CheckCharge(1, ~uint64_t{0})));
  EXPECT_TRUE(
      StoreAccounts::IsLimitError(book.CheckCharge(1, ~uint64_t{0} - kMiB)));
}

TEST(StoreAccountsTest, AccountZeroIsNoneAndUnknownAccountsAreRefused) {
  StoreAccounts book;
  EXPECT_TRUE(book.CheckCharge(0, ~uint64_t{0}).ok());
  book.Charge(0, 3, kMiB);  // nothing
  EXPECT_EQ(book.AccountOf(3), 0u);
  EXPECT_TRUE(absl::IsInvalidArgument(book.SetLimit(0, kMiB)));
  EXPECT_TRUE(absl::IsInvalidArgument(book.Get(0).status()));
  EXPECT_TRUE(absl::IsNotFound(book.Get(5).status()));
  absl::Status s = book.CheckCharge(5, 1);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_FALSE(StoreAccounts::IsLimitError(s));
  EXPECT_EQ(book.size(), 0u);
}

TEST(StoreAccountsTest, LimitZeroRemovesTheAccountOnceEmpty) {
  StoreAccounts book;
  ASSERT_TRUE(book.SetLimit(3, kMiB).ok());
  ASSERT_TRUE(book.SetLimit(3, 0).ok());
  EXPECT_TRUE(absl::IsNotFound(book.Get(3).status()));  // empty: gone now
  EXPECT_TRUE(book.SetLimit(3, 0).ok());                // no such: nothing

  ASSERT_TRUE(book.SetLimit(3, kMiB).ok());
  book.Charge(3, 1, 100);
  book.Charge(3, 2, 200);
  ASSERT_TRUE(book.SetLimit(3, 0).ok());
  ASSERT_TRUE(book.Get(3).ok());  // still holds objects
  absl::Status s = book.CheckCharge(3, 0);
  EXPECT_TRUE(StoreAccounts::IsLimitError(s)) << s;
  EXPECT_NE(s.message().find("being removed"), absl::string_view::npos) << s;
  book.Uncharge(1);
  EXPECT_EQ(book.Get(3)->used_bytes, 200u);
  book.Uncharge(2);
  EXPECT_TRUE(absl::IsNotFound(book.Get(3).status()));
}

TEST(StoreAccountsTest, ALowerLimitRefusesUntilEnoughIsFreed) {
  StoreAccounts book;
  ASSERT_TRUE(book.SetLimit(2, 8 * kMiB).ok());
  book.Charge(2, 1, 4 * kMiB);
  book.Charge(2, 2, 4 * kMiB);
  ASSERT_TRUE(book.SetLimit(2, 4 * kMiB).ok());
  EXPECT_TRUE(StoreAccounts::IsLimitError(book.CheckCharge(2, 1)));
  book.Uncharge(1);
  EXPECT_TRUE(StoreAccounts::IsLimitError(book.CheckCharge(2, 1)));
  book.Uncharge(2);
  EXPECT_TRUE(book.CheckCharge(2, 4 * kMiB).ok());
}

TEST(StoreAccountsTest, OtherResourceExhaustedErrorsAreNotLimitErrors) {
  EXPECT_FALSE(StoreAccounts::IsLimitError(absl::ResourceExhaustedError(
      "store full: requested 4194304 bytes, 0 bytes free")));
  EXPECT_FALSE(StoreAccounts::IsLimitError(absl::OkStatus()));
}

}  // namespace
}  // namespace shoal::shm
