// ShmCommunicator's results, in one process: every rank is a thread and the
// ranks meet through an InMemoryRendezvous (shm_test_support.h), so each
// case takes milliseconds. Parameterised over 1-4 ranks, every reducible
// dtype and op (reductions) or every element size (data movement), with
// counts on both sides of the one-step threshold and of the (small) slot
// size, in place and out of place, checked against references computed here.
#include "collectives/shm/shm_communicator.h"

#include <sched.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/reduce_op.h"
#include "collectives/shm/shm_test_support.h"
#include "gtest/gtest.h"
#include "ipc/tensor_meta.h"

namespace shoal::collectives {
namespace {

using testing::CheckReduced;
using testing::Counts;
using testing::Fill;
using testing::Pattern;
using testing::RunRanks;
using testing::SmallSlots;

constexpr DType kReducible[] = {DType::kF16, DType::kBF16, DType::kF32,
                                DType::kF64, DType::kI32,  DType::kI64};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin,
                             ReduceOp::kMax, ReduceOp::kAvg};

void ExpectAllCreated(const std::vector<absl::Status>& created) {
  for (size_t r = 0; r < created.size(); ++r) {
    EXPECT_TRUE(created[r].ok()) << "rank " << r << ": " << created[r];
  }
}

// Bytes of `count` elements.
int64_t Bytes(DType t, int64_t count) {
  return count * static_cast<int64_t>(DTypeSize(t));
}

// ---- reductions: world × dtype × op ----------------------------------------

// The tests read their parameters into plain locals, not a structured
// binding: the lambdas capture them, and clang 14 (tools/test's thread-safety
// build) cannot capture a structured binding.
using ReductionParam = std::tuple<int, DType, ReduceOp>;

class ShmReductionTest : public ::testing::TestWithParam<ReductionParam> {};

TEST_P(ShmReductionTest, AllReduceInAndOutOfPlace) {
  const int world = std::get<0>(GetParam());
  const DType t = std::get<1>(GetParam());
  const ReduceOp op = std::get<2>(GetParam());
  ExpectAllCreated(RunRanks(world, SmallSlots(), [&](ShmCommunicator& c) {
    for (int64_t n : Counts(t)) {
      SCOPED_TRACE(absl::StrCat("rank ", c.rank(), " count ", n));
      std::vector<uint8_t> in = Fill(t, c.rank(), n, op);
      std::vector<uint8_t> out(in.size(), 0xee);
      EXPECT_TRUE(c.AllReduce(in.data(), out.data(), n, t, op).ok());
      EXPECT_EQ(CheckReduced(t, op, world, out, n), "");
      EXPECT_EQ(out.back(), 0xee) << "wrote past the end";
      EXPECT_TRUE(c.AllReduce(in.data(), in.data(), n, t, op).ok());
      EXPECT_EQ(std::memcmp(in.data(), out.data(), in.size()), 0)
          << "in place differs from out of place";
    }
  }));
}

// Block k of rank r's input is Value(r, i + k·n): rank k's result is then
// Expected(i + k·n).
TEST_P(ShmReductionTest, ReduceScatterInAndOutOfPlace) {
  const int world = std::get<0>(GetParam());
  const DType t = std::get<1>(GetParam());
  const ReduceOp op = std::get<2>(GetParam());
  ExpectAllCreated(RunRanks(world, SmallSlots(), [&](ShmCommunicator& c) {
    for (int64_t n : Counts(t)) {
      SCOPED_TRACE(absl::StrCat("rank ", c.rank(), " count ", n));
      const int64_t shift = c.rank() * n;
      std::vector<uint8_t> in = Fill(t, c.rank(), world * n, op);
      std::vector<uint8_t> out(Bytes(t, n) + 8, 0xee);
      EXPECT_TRUE(c.ReduceScatter(in.data(), out.data(), n, t, op).ok());
      EXPECT_EQ(CheckReduced(t, op, world, out, n, shift), "");
      EXPECT_EQ(out.back(), 0xee) << "wrote past the end";
      // In place (as NCCL means it): the result lands in this rank's block.
      uint8_t* mine = in.data() + Bytes(t, shift);
      EXPECT_TRUE(c.ReduceScatter(in.data(), mine, n, t, op).ok());
      EXPECT_EQ(std::memcmp(mine, out.data(), Bytes(t, n)), 0);
    }
  }));
}

INSTANTIATE_TEST_SUITE_P(
    Ranks, ShmReductionTest,
    ::testing::Combine(::testing::Values(1, 2, 3, 4),
                       ::testing::ValuesIn(kReducible),
                       ::testing::ValuesIn(kOps)),
    [](const ::testing::TestParamInfo<ReductionParam>& info) {
      return absl::StrCat(std::get<0>(info.param), "ranks_",
                          DTypeName(std::get<1>(info.param)), "_",
                          ReduceOpName(std::get<2>(info.param)));
    });

// ---- reduce: world × dtype, every root
// ----------------------------------------

using RootedParam = std::tuple<int, DType>;

class ShmReduceTest : public ::testing::TestWithParam<RootedParam> {};

// Reduce runs all_reduce's chunked path (tested there with every op); what
// is its own is the root. Every root and count, the op rotating through all
// five, keeps the case small.
TEST_P(ShmReduceTest, ReduceToEveryRoot) {
  const int world = std::get<0>(GetParam());
  const DType t = std::get<1>(GetParam());
  ExpectAllCreated(RunRanks(world, SmallSlots(), [&](ShmCommunicator& c) {
    int turn = 0;
    for (int64_t n : Counts(t)) {
      for (int root = 0; root < world; ++root) {
        const ReduceOp op = kOps[turn++ % std::size(kOps)];
        SCOPED_TRACE(absl::StrCat("rank ", c.rank(), " count ", n, " root ",
                                  root, " ", ReduceOpName(op)));
        std::vector<uint8_t> in = Fill(t, c.rank(), n, op);
        std::vector<uint8_t> out(in.size(), 0xee);
        EXPECT_TRUE(c.Reduce(in.data(), out.data(), n, t, op, root).ok());
        if (c.rank() == root) {
          EXPECT_EQ(CheckReduced(t, op, world, out, n), "");
        } else {
          EXPECT_EQ(out, std::vector<uint8_t>(in.size(), 0xee))
              << "a non-root's out changed";
        }
        // In place: the root's input becomes the result.
        EXPECT_TRUE(c.Reduce(in.data(), in.data(), n, t, op, root).ok());
        if (c.rank() == root) {
          EXPECT_EQ(CheckReduced(t, op, world, in, n), "");
        }
      }
    }
  }));
}

INSTANTIATE_TEST_SUITE_P(Ranks, ShmReduceTest,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4),
                                            ::testing::ValuesIn(kReducible)),
                         [](const ::testing::TestParamInfo<RootedParam>& info) {
                           return absl::StrCat(
                               std::get<0>(info.param), "ranks_",
                               DTypeName(std::get<1>(info.param)));
                         });

// ---- data movement: world × element size -----------------------------------

using MovementParam = std::tuple<int, DType>;

class ShmMovementTest : public ::testing::TestWithParam<MovementParam> {};

TEST_P(ShmMovementTest, BroadcastFromEveryRoot) {
  const int world = std::get<0>(GetParam());
  const DType t = std::get<1>(GetParam());
  ExpectAllCreated(RunRanks(world, SmallSlots(), [&](ShmCommunicator& c) {
    for (int64_t n : Counts(t)) {
      for (int root = 0; root < world; ++root) {
        SCOPED_TRACE(
            absl::StrCat("rank ", c.rank(), " count ", n, " root ", root));
        const std::vector<uint8_t> want = Pattern(root, 0, Bytes(t, n));
        std::vector<uint8_t> in = Pattern(c.rank(), 0, Bytes(t, n));
        std::vector<uint8_t> out(in.size(), 0xee);
        EXPECT_TRUE(c.Broadcast(in.data(), out.data(), n, t, root).ok());
        EXPECT_EQ(out, want);
        EXPECT_TRUE(c.Broadcast(in.data(), in.data(), n, t, root).ok());
        EXPECT_EQ(in, want);
      }
    }
  }));
}

TEST_P(ShmMovementTest, AllGatherInAndOutOfPlace) {
  const int world = std::get<0>(GetParam());
  const DType t = std::get<1>(GetParam());
  ExpectAllCreated(RunRanks(world, SmallSlots(), [&](ShmCommunicator& c) {
    for (int64_t n : Counts(t)) {
      SCOPED_TRACE(absl::StrCat("rank ", c.rank(), " count ", n));
      const int64_t bytes = Bytes(t, n);
      std::vector<uint8_t> want;
      for (int r = 0; r < world; ++r) {
        const std::vector<uint8_t> block = Pattern(r, 0, bytes);
        want.insert(want.end(), block.begin(), block.end());
      }
      const std::vector<uint8_t> in = Pattern(c.rank(), 0, bytes);
      std::vector<uint8_t> out(world * bytes, 0xee);
      EXPECT_TRUE(c.AllGather(in.data(), out.data(), n, t).ok());
      EXPECT_EQ(out, want);
      // In place (as NCCL means it): the input is this rank's block of out.
      std::vector<uint8_t> shared(world * bytes, 0xee);
      std::copy(in.begin(), in.end(), shared.begin() + c.rank() * bytes);
      EXPECT_TRUE(
          c.AllGather(shared.data() + c.rank() * bytes, shared.data(), n, t)
              .ok());
      EXPECT_EQ(shared, want);
    }
  }));
}

// Block k of rank r's input goes to block r of rank k's output.
TEST_P(ShmMovementTest, AllToAllInAndOutOfPlace) {
  const int world = std::get<0>(GetParam());
  const DType t = std::get<1>(GetParam());
  ExpectAllCreated(RunRanks(world, SmallSlots(), [&](ShmCommunicator& c) {
    for (int64_t n : Counts(t)) {
      SCOPED_TRACE(absl::StrCat("rank ", c.rank(), " count ", n));
      const int64_t bytes = Bytes(t, n);
      std::vector<uint8_t> in, want;
      for (int k = 0; k < world; ++k) {
        const std::vector<uint8_t> mine = Pattern(c.rank(), k, bytes);
        in.insert(in.end(), mine.begin(), mine.end());
        const std::vector<uint8_t> theirs = Pattern(k, c.rank(), bytes);
        want.insert(want.end(), theirs.begin(), theirs.end());
      }
      std::vector<uint8_t> out(in.size(), 0xee);
      EXPECT_TRUE(c.AllToAll(in.data(), out.data(), n, t).ok());
      EXPECT_EQ(out, want);
      EXPECT_TRUE(c.AllToAll(in.data(), in.data(), n, t).ok());
      EXPECT_EQ(in, want);
    }
  }));
}

INSTANTIATE_TEST_SUITE_P(
    Ranks, ShmMovementTest,
    ::testing::Combine(::testing::Values(1, 2, 3, 4),
                       ::testing::Values(DType::kU8, DType::kI16, DType::kF32,
                                         DType::kF64)),
    [](const ::testing::TestParamInfo<MovementParam>& info) {
      return absl::StrCat(std::get<0>(info.param), "ranks_",
                          DTypeName(std::get<1>(info.param)));
    });

// ---- point to point and barrier: world --------------------------------------

class ShmPointToPointTest : public ::testing::TestWithParam<int> {};

// Around the ring, even ranks sending first: sizes below, at and above the
// point-to-point chunk.
TEST_P(ShmPointToPointTest, SendRecvAroundTheRing) {
  const int world = GetParam();
  ExpectAllCreated(RunRanks(world, SmallSlots(), [&](ShmCommunicator& c) {
    const int next = (c.rank() + 1) % world;
    const int prev = (c.rank() + world - 1) % world;
    const int64_t chunk = static_cast<int64_t>(SmallSlots().p2p_bytes);
    for (int64_t bytes :
         {int64_t{0}, int64_t{1}, chunk, chunk + 1, 3 * chunk + 5}) {
      SCOPED_TRACE(absl::StrCat("rank ", c.rank(), " bytes ", bytes));
      const std::vector<uint8_t> out = Pattern(c.rank(), 1, bytes);
      std::vector<uint8_t> in(bytes, 0xee);
      auto send = [&] {
        EXPECT_TRUE(c.Send(out.data(), bytes, DType::kU8, next).ok());
      };
      auto recv = [&] {
        EXPECT_TRUE(c.Recv(in.data(), bytes, DType::kU8, prev).ok());
      };
      if (c.rank() % 2 == 0) {
        send();
        recv();
      } else {
        recv();
        send();
      }
      EXPECT_EQ(in, Pattern(prev, 1, bytes));
    }
    EXPECT_TRUE(c.Barrier().ok());
  }));
}

// Every rank sends and receives at once, the send on its own thread: a
// message of several chunks each way needs both directions to progress.
TEST_P(ShmPointToPointTest, SimultaneousSendAndRecvOnTwoThreads) {
  const int world = GetParam();
  ExpectAllCreated(RunRanks(world, SmallSlots(), [&](ShmCommunicator& c) {
    const int next = (c.rank() + 1) % world;
    const int prev = (c.rank() + world - 1) % world;
    const int64_t bytes = 5 * static_cast<int64_t>(SmallSlots().p2p_bytes) + 3;
    const std::vector<uint8_t> out = Pattern(c.rank(), 2, bytes);
    std::vector<uint8_t> in(bytes, 0xee);
    std::thread sender(
        [&] { EXPECT_TRUE(c.Send(out.data(), bytes, DType::kU8, next).ok()); });
    EXPECT_TRUE(c.Recv(in.data(), bytes, DType::kU8, prev).ok());
    sender.join();
    EXPECT_EQ(in, Pattern(prev, 2, bytes));
    EXPECT_TRUE(c.Barrier().ok());
  }));
}

INSTANTIATE_TEST_SUITE_P(Ranks, ShmPointToPointTest, ::testing::Values(2, 3, 4),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return absl::StrCat(info.param, "ranks");
                         });

// ---- waits ------------------------------------------------------------------

// CPU time (user + system) of the whole process so far, in seconds.
double ProcessCpuSeconds() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec +
         (u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

// Two ranks on one CPU (the scheduler packs ranks that sleep and wake each
// other): a rank that spins waits for a peer that cannot run until the spin
// ends or the scheduler preempts it. A wait for a peer last seen on its own
// CPU yields at once instead. With a pause loop of ~10^7 pauses, every sync
// would otherwise burn a scheduler slice (~1-4 ms) of CPU: 500 syncs ≥ 0.5 s.
// The CPU time does not depend on what else runs on the machine.
TEST(ShmWaitTest, RanksOnOneCpuYieldToEachOtherInsteadOfSpinning) {
  cpu_set_t allowed;
  ASSERT_EQ(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
  int cpu = 0;
  while (!CPU_ISSET(cpu, &allowed)) ++cpu;
  ShmCommOptions o = SmallSlots();
  o.spin_pauses = 10'000'000;
  const double cpu_before = ProcessCpuSeconds();
  ExpectAllCreated(RunRanks(2, o, [&](ShmCommunicator& c) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
    float x[16];
    for (int i = 0; i < 500; ++i) {
      std::fill(std::begin(x), std::end(x), 1.0f);
      ASSERT_TRUE(c.AllReduce(x, x, 16, DType::kF32, ReduceOp::kSum).ok());
      ASSERT_EQ(x[7], 2.0f);
    }
  }));
  const double used = ProcessCpuSeconds() - cpu_before;
  EXPECT_LT(used, 0.25) << "500 all_reduces of two ranks on CPU " << cpu
                        << " used " << used << " s of CPU";
}

}  // namespace
}  // namespace shoal::collectives
