#include "ipc/session_seq.h"

#include "gtest/gtest.h"

namespace shoal::ipc {
namespace {

TEST(SessionSeqTest, AcknowledgesInOrderAndDropsDuplicates) {
  SessionSeq s;
  EXPECT_TRUE(s.Accept(0));  // unnumbered
  EXPECT_EQ(s.ack(), 0u);
  EXPECT_TRUE(s.Accept(1));
  EXPECT_TRUE(s.Accept(2));
  EXPECT_EQ(s.ack(), 2u);
  EXPECT_FALSE(s.Accept(2));
  // 3 and 4 were lost with a connection; 5 arrives, then everything again.
  EXPECT_TRUE(s.Accept(5));
  EXPECT_TRUE(s.gap());
  EXPECT_EQ(s.ack(), 2u);
  EXPECT_TRUE(s.Accept(3));
  EXPECT_TRUE(s.Accept(4));
  EXPECT_FALSE(s.Accept(5));
  EXPECT_FALSE(s.gap());
  EXPECT_EQ(s.ack(), 5u);
  EXPECT_EQ(s.unreported(), 5u);
  s.MarkReported();
  EXPECT_EQ(s.unreported(), 0u);
  s.Reset();
  EXPECT_TRUE(s.Accept(1));
}

TEST(SessionSeqTest, AForgottenNumberIsAcceptedAgainAndNoOther) {
  SessionSeq s;
  for (uint64_t n = 1; n <= 6; ++n) EXPECT_TRUE(s.Accept(n));
  s.Forget(3);  // discarded unserved: the client sends it again
  EXPECT_EQ(s.ack(), 2u);
  EXPECT_FALSE(s.Accept(4));
  EXPECT_FALSE(s.Accept(6));
  EXPECT_TRUE(s.Accept(3));
  EXPECT_EQ(s.ack(), 6u);
  EXPECT_FALSE(s.Accept(3));
  EXPECT_TRUE(s.Accept(8));
  s.Forget(8);
  EXPECT_FALSE(s.gap());
  EXPECT_TRUE(s.Accept(8));
}

TEST(SessionSeqTest, AGapGivenUpCountsAsArrived) {
  SessionSeq s;
  EXPECT_TRUE(s.Accept(1));
  for (uint64_t n = 3; n <= 10; ++n) EXPECT_TRUE(s.Accept(n));  // 2 lost
  EXPECT_EQ(s.above(), 8u);
  s.SkipGap();
  EXPECT_EQ(s.ack(), 10u);
  EXPECT_EQ(s.above(), 0u);
  EXPECT_FALSE(s.Accept(2));
}

TEST(SessionSeqTest, ForgettingFarBelowAJumpIsBounded) {
  SessionSeq s;
  EXPECT_TRUE(s.Accept(1));
  EXPECT_TRUE(s.Accept(2));
  // A client whose ids jump: the node gives the gap up.
  const uint64_t far = uint64_t{1} << 62;
  for (uint64_t n = far; n < far + 8; ++n) EXPECT_TRUE(s.Accept(n));
  s.SkipGap();
  EXPECT_EQ(s.ack(), far + 7);
  s.Forget(2);  // would list 2^62 numbers: stays arrived, at once
  EXPECT_EQ(s.ack(), far + 7);
  EXPECT_FALSE(s.Accept(2));
}

}  // namespace
}  // namespace shoal::ipc
