// ShmCommunicator when ranks disagree, stall or misuse it, in one process
// (ranks are threads, shm_test_support.h): every rank must fail promptly with
// the right code instead of hanging, and the communicator refuses work
// afterwards. A rank that dies needs a process: tests/collectives.
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "collectives/reduce_op.h"
#include "collectives/rendezvous/in_memory_rendezvous.h"
#include "collectives/shm/shm_communicator.h"
#include "collectives/shm/shm_test_support.h"
#include "gtest/gtest.h"
#include "ipc/tensor_meta.h"
#include "observe/timeline.h"

namespace shoal::collectives {
namespace {

using testing::RunRanks;
using testing::SmallSlots;

// Short enough to keep the tests fast, long enough that a loaded machine
// (2 cores under TSan) does not time a healthy rank out.
constexpr absl::Duration kStallTimeout = absl::Milliseconds(500);

void ExpectAllCreated(const std::vector<absl::Status>& created) {
  for (size_t r = 0; r < created.size(); ++r) {
    EXPECT_TRUE(created[r].ok()) << "rank " << r << ": " << created[r];
  }
}

// Runs `world` ranks. Rank 1 stays away while each other rank runs
// `before`, then an all_reduce of 1,000 floats that rank 1 never joins
// (timeout kStallTimeout), then `check` with the time that call took and
// its status.
void WithRank1Stalled(
    int world,
    absl::FunctionRef<void(ShmCommunicator&, absl::Duration,
                           const absl::Status&)>
        check,
    absl::FunctionRef<void()> before = [] {}) {
  absl::Notification others_done;
  std::atomic<int> finished{0};
  ExpectAllCreated(RunRanks(world, SmallSlots(), [&](ShmCommunicator& c) {
    if (c.rank() == 1) {
      others_done.WaitForNotification();
      return;
    }
    std::vector<float> x(1000, 1.0f);  // one step and chunked alike
    before();
    const absl::Time t0 = absl::Now();
    const absl::Status s = c.AllReduce(x.data(), x.data(), 1000, DType::kF32,
                                       ReduceOp::kSum, kStallTimeout);
    check(c, absl::Now() - t0, s);
    if (finished.fetch_add(1) + 1 == world - 1) others_done.Notify();
  }));
}

class ShmFailureTest : public ::testing::TestWithParam<int> {};

// Rank r all_reduces 10 + r elements: every rank reports the mismatch itself.
TEST_P(ShmFailureTest, MismatchedCountsAreReportedByEveryRank) {
  const int world = GetParam();
  ExpectAllCreated(RunRanks(world, SmallSlots(), [&](ShmCommunicator& c) {
    const int64_t n = 10 + c.rank();
    std::vector<float> x(n, 1.0f);
    absl::Status s =
        c.AllReduce(x.data(), x.data(), n, DType::kF32, ReduceOp::kSum);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "mismatch")) << s;
    s = c.Barrier();
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  }));
}

// Rank 0 calls a barrier, the others a broadcast.
TEST_P(ShmFailureTest, MismatchedCollectivesAreReportedByEveryRank) {
  const int world = GetParam();
  ExpectAllCreated(RunRanks(world, SmallSlots(), [&](ShmCommunicator& c) {
    std::vector<float> x(4, 1.0f);
    const absl::Status s =
        c.rank() == 0 ? c.Barrier()
                      : c.Broadcast(x.data(), x.data(), 4, DType::kF32, 0);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "mismatch")) << s;
  }));
}

// Rank 1 stays away from the all_reduce: every other rank fails with
// DeadlineExceeded naming rank 1, after about the timeout — whether it timed
// out itself or first saw another waiting rank give up (the code travels).
TEST_P(ShmFailureTest, AStalledRankMakesTheOthersFailWithDeadlineExceeded) {
  WithRank1Stalled(GetParam(), [](ShmCommunicator& c, absl::Duration took,
                                  const absl::Status& s) {
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "rank 1 did not arrive")) << s;
    // Another rank's deadline may fall a little earlier than this one's.
    EXPECT_GE(took, kStallTimeout - absl::Milliseconds(100)) << s;
    EXPECT_LT(took, kStallTimeout + absl::Seconds(5)) << s;
    const absl::Status after = c.Barrier();
    EXPECT_EQ(after.code(), absl::StatusCode::kFailedPrecondition) << after;
  });
}

// A call's deadline counts from the start its communicator took for the
// timeline (observe::SetCallStart): handed a start a whole timeout ago, a
// rank waiting for a stalled peer gives up within the health check's period,
// not a timeout later; the start is used once.
TEST_P(ShmFailureTest, TheDeadlineCountsFromTheHandedCallStart) {
  WithRank1Stalled(
      GetParam(),
      [](ShmCommunicator&, absl::Duration took, const absl::Status& s) {
        EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
        EXPECT_LT(took, kStallTimeout / 2) << s;
        EXPECT_EQ(observe::TakeCallStart(), 0) << "the start was not taken";
      },
      [] {
        observe::SetCallStart(observe::TimelineNowNs() -
                              absl::ToInt64Nanoseconds(kStallTimeout));
      });
}

// The last rank never comes to Create: the others' Create fails in time.
TEST_P(ShmFailureTest, ARankThatNeverComesFailsCreate) {
  const int world = GetParam();
  ShmCommOptions o = SmallSlots();
  o.timeout = kStallTimeout;
  const std::vector<absl::Status> created =
      RunRanks(world, o, [](ShmCommunicator&) { ADD_FAILURE() << "created"; },
               {world - 1});
  for (int r = 0; r < world - 1; ++r) {
    EXPECT_EQ(created[r].code(), absl::StatusCode::kDeadlineExceeded)
        << "rank " << r << ": " << created[r];
  }
}

// A receive that does not match the send's size fails on the receiver; the
// sender's next collective fails with the receiver's code and reason.
TEST_P(ShmFailureTest, AMismatchedRecvFailsBothEnds) {
  const int world = GetParam();
  ExpectAllCreated(RunRanks(world, SmallSlots(), [&](ShmCommunicator& c) {
    std::vector<float> x(12, 1.0f);
    if (c.rank() == 0) {
      EXPECT_TRUE(c.Send(x.data(), 10, DType::kF32, 1).ok());
    } else if (c.rank() == 1) {
      const absl::Status s = c.Recv(x.data(), 12, DType::kF32, 0);
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    }
    const absl::Status s = c.Barrier();
    if (c.rank() == 1) {
      EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    } else {
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
      EXPECT_TRUE(absl::StrContains(s.message(), "rank 1 gave up")) << s;
    }
  }));
}

// Arguments refused before anything is published leave the communicator
// usable.
TEST_P(ShmFailureTest, BadArgumentsAreRefusedLocally) {
  const int world = GetParam();
  ExpectAllCreated(RunRanks(world, SmallSlots(), [&](ShmCommunicator& c) {
    std::vector<uint8_t> x(64);
    EXPECT_EQ(c.Broadcast(x.data(), x.data(), 4, DType::kU8, world).code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(
        c.AllReduce(x.data(), x.data(), -1, DType::kF32, ReduceOp::kSum).code(),
        absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(
        c.AllReduce(x.data(), x.data(), 4, DType::kU8, ReduceOp::kSum).code(),
        absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(c.Send(x.data(), 4, DType::kU8, c.rank()).code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(c.Barrier().ok());
  }));
}

INSTANTIATE_TEST_SUITE_P(Ranks, ShmFailureTest, ::testing::Values(2, 3, 4),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return absl::StrCat(info.param, "ranks");
                         });

TEST(ShmCreateTest, RefusesBadRanksAndSlotSizes) {
  InMemoryRendezvous rv;
  EXPECT_EQ(ShmCommunicator::Create(rv, "inproc", "bad", 2, 2).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ShmCommunicator::Create(rv, "inproc", "bad", 0, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  ShmCommOptions o;
  o.slot_bytes = 1000;
  EXPECT_EQ(
      ShmCommunicator::Create(rv, "inproc", "bad", 0, 1, o).status().code(),
      absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shoal::collectives
