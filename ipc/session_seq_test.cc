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

}  // namespace
}  // namespace shoal::ipc
