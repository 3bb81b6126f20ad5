// The gloo and hierarchical backends in one process: ranks are threads that
// meet through an InMemoryRendezvous, gloo connects over 127.0.0.1, and the
// hierarchical backend's "nodes" are node ids (each with its own shm segment).
// Real processes on two network namespaces are in tests/nodes.
#include "collectives/hierarchical/hierarchical_communicator.h"

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "base/mutex.h"
#include "collectives/gloo/gloo_communicator.h"
#include "collectives/reference_data.h"
#include "collectives/rendezvous/in_memory_rendezvous.h"
#include "collectives/shm/shm_test_support.h"
#include "gtest/gtest.h"

namespace shoal::collectives {
namespace {

using testing::Expected;
using testing::Fill;
using testing::LoadElement;

// One rank's backends: flat gloo, and the hierarchical one over it.
struct RankComms {
  std::unique_ptr<GlooCommunicator> flat;
  std::unique_ptr<HierarchicalCommunicator> hier;
};

// Makes rank `r`'s backends into `comms`.
absl::Status Make(InMemoryRendezvous& rendezvous, const std::string& name,
                  int r, const std::vector<int>& node_of,
                  absl::Duration timeout, bool small_through_leaders,
                  uint64_t pipeline_piece_bytes, RankComms& comms) {
  const int world = static_cast<int>(node_of.size());
  GlooCommOptions go;
  go.hostname = "127.0.0.1";
  go.timeout = timeout;
  auto flat =
      GlooCommunicator::Create(rendezvous, name + ".flat", r, world, go);
  if (!flat.ok()) return flat.status();
  comms.flat = std::move(*flat);
  HierarchicalOptions ho;
  ho.node_of = node_of;
  ho.job_id = name;
  ho.shm = testing::SmallSlots();
  ho.shm.timeout = timeout;
  ho.gloo = go;
  ho.small_bytes = 256;
  ho.small_through_leaders = small_through_leaders;
  ho.pipeline_piece_bytes = pipeline_piece_bytes;
  auto hier = HierarchicalCommunicator::Create(rendezvous, name, r,
                                               comms.flat.get(), ho);
  if (!hier.ok()) return hier.status();
  comms.hier = std::move(*hier);
  return absl::OkStatus();
}

// Runs `body` on `node_of.size()` threads, each with its RankComms.
void RunRanks(const std::vector<int>& node_of,
              const std::function<void(int, RankComms&)>& body,
              absl::Duration timeout = absl::Seconds(30),
              bool small_through_leaders = true,
              uint64_t pipeline_piece_bytes = 0) {
  static int serial = 0;
  const std::string name = absl::StrCat("t", getpid(), "-", serial++);
  InMemoryRendezvous rendezvous;
  const int world = static_cast<int>(node_of.size());
  // Every rank is made before any runs `body`: a body that fails its rank on
  // purpose must not reach ranks that are still connecting.
  Mutex mu;
  CondVar made_cv;
  int made = 0;
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      RankComms comms;
      const absl::Status status =
          Make(rendezvous, name, r, node_of, timeout, small_through_leaders,
               pipeline_piece_bytes, comms);
      {
        MutexLock lock(&mu);
        if (++made == world) made_cv.SignalAll();
        while (made < world) made_cv.Wait(&mu);
      }
      ASSERT_TRUE(status.ok()) << status;
      body(r, comms);
    });
  }
  for (std::thread& t : threads) t.join();
}

size_t Size(DType t) { return DTypeSize(t); }

const DType kTypes[] = {DType::kF16, DType::kBF16, DType::kF32,
                        DType::kF64, DType::kI32,  DType::kI64};
const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin,
                         ReduceOp::kMax, ReduceOp::kAvg};
const int64_t kCounts[] = {0, 1, 7, 1001, 5003};

// Every op of `c` (a HostCollectives of `world` ranks) against references.
void CheckEveryOp(HostCollectives& c, int world) {
  const int me = c.rank();
  for (DType t : kTypes) {
    for (int64_t n : kCounts) {
      const std::string at = absl::StrCat(DTypeName(t), " n=", n);
      for (ReduceOp op : kOps) {
        std::vector<uint8_t> in = Fill(t, me, n, op), out(n * Size(t) + 1);
        ASSERT_TRUE(
            c.AllReduce(in.data(), out.data(), n, t, op, absl::ZeroDuration())
                .ok())
            << at;
        EXPECT_EQ(testing::CheckReduced(t, op, world, out, n), "")
            << "all_reduce " << ReduceOpName(op) << " " << at;
        ASSERT_TRUE(
            c.AllReduce(in.data(), in.data(), n, t, op, absl::ZeroDuration())
                .ok());
        EXPECT_EQ(std::memcmp(in.data(), out.data(), n * Size(t)), 0)
            << "in place " << at;
      }
      // reduce to the last rank, broadcast from rank 1.
      std::vector<uint8_t> in = Fill(t, me, n, ReduceOp::kMax),
                           out(n * Size(t) + 1);
      ASSERT_TRUE(c.Reduce(in.data(), out.data(), n, t, ReduceOp::kMax,
                           world - 1, absl::ZeroDuration())
                      .ok());
      if (me == world - 1) {
        EXPECT_EQ(testing::CheckReduced(t, ReduceOp::kMax, world, out, n), "")
            << "reduce " << at;
      }
      const int root = 1 % world;
      const std::vector<uint8_t> want = Fill(t, root, n, ReduceOp::kSum);
      in = Fill(t, me, n, ReduceOp::kSum);
      ASSERT_TRUE(
          c.Broadcast(in.data(), in.data(), n, t, root, absl::ZeroDuration())
              .ok());
      EXPECT_EQ(std::memcmp(in.data(), want.data(), n * Size(t)), 0)
          << "broadcast " << at;
      // all_gather, reduce_scatter, all_to_all.
      std::vector<uint8_t> all(world * n * Size(t) + 1);
      in = Fill(t, me, n, ReduceOp::kSum);
      ASSERT_TRUE(
          c.AllGather(in.data(), all.data(), n, t, absl::ZeroDuration()).ok());
      for (int r = 0; r < world; ++r) {
        const std::vector<uint8_t> block = Fill(t, r, n, ReduceOp::kSum);
        EXPECT_EQ(std::memcmp(all.data() + r * n * Size(t), block.data(),
                              n * Size(t)),
                  0)
            << "all_gather block " << r << " " << at;
      }
      std::vector<uint8_t> blocks(world * n * Size(t) + 1),
          mine(n * Size(t) + 1);
      for (int k = 0; k < world; ++k) {
        for (int64_t i = 0; i < n; ++i)
          testing::StoreElement(t, blocks.data(), k * n + i,
                                testing::Value(me, i + k, ReduceOp::kSum));
      }
      ASSERT_TRUE(c.ReduceScatter(blocks.data(), mine.data(), n, t,
                                  ReduceOp::kSum, absl::ZeroDuration())
                      .ok());
      EXPECT_EQ(testing::CheckReduced(t, ReduceOp::kSum, world, mine, n, me),
                "")
          << "reduce_scatter " << at;
      std::vector<uint8_t> a2a(world * n * Size(t) + 1),
          got(world * n * Size(t) + 1);
      for (int k = 0; k < world; ++k) {
        for (int64_t i = 0; i < n; ++i)
          testing::StoreElement(t, a2a.data(), k * n + i,
                                (me * 4 + k + i) % 50);
      }
      ASSERT_TRUE(
          c.AllToAll(a2a.data(), got.data(), n, t, absl::ZeroDuration()).ok());
      bool ok = true;
      for (int r = 0; r < world && ok; ++r) {
        for (int64_t i = 0; i < n && ok; ++i)
          ok = LoadElement(t, got.data(), r * n + i) == (r * 4 + me + i) % 50;
      }
      EXPECT_TRUE(ok) << "all_to_all " << at;
    }
  }
  // send/recv around the ring (within a node and across).
  const int64_t n = 3001;
  std::vector<uint8_t> mine = Fill(DType::kF32, me, n, ReduceOp::kSum),
                       got(n * 4);
  const int next = (me + 1) % world, prev = (me + world - 1) % world;
  if (me % 2 == 0) {
    ASSERT_TRUE(
        c.Send(mine.data(), n, DType::kF32, next, absl::ZeroDuration()).ok());
    ASSERT_TRUE(
        c.Recv(got.data(), n, DType::kF32, prev, absl::ZeroDuration()).ok());
  } else {
    ASSERT_TRUE(
        c.Recv(got.data(), n, DType::kF32, prev, absl::ZeroDuration()).ok());
    ASSERT_TRUE(
        c.Send(mine.data(), n, DType::kF32, next, absl::ZeroDuration()).ok());
  }
  const std::vector<uint8_t> want = Fill(DType::kF32, prev, n, ReduceOp::kSum);
  EXPECT_EQ(std::memcmp(got.data(), want.data(), n * 4), 0) << "send/recv";
  EXPECT_TRUE(c.Barrier(absl::ZeroDuration()).ok());
}

TEST(HierarchicalCommunicatorTest, ShapesThatFit) {
  EXPECT_TRUE(HierarchicalCommunicator::Fits({0, 0, 1, 1}));
  EXPECT_TRUE(HierarchicalCommunicator::Fits({3, 5}));
  EXPECT_TRUE(HierarchicalCommunicator::Fits({7, 7, 7}));
  EXPECT_FALSE(HierarchicalCommunicator::Fits({0, 1, 0, 1}));  // not blocks
  EXPECT_FALSE(HierarchicalCommunicator::Fits({0, 0, 1}));     // unequal
  EXPECT_FALSE(HierarchicalCommunicator::Fits({0, 1, 1, 0}));  // node twice
  EXPECT_FALSE(HierarchicalCommunicator::Fits({}));
}

TEST(HierarchicalCommunicatorTest, TwoNodesOfTwoRanks) {
  RunRanks({0, 0, 1, 1}, [](int, RankComms& c) { CheckEveryOp(*c.hier, 4); });
}

TEST(HierarchicalCommunicatorTest, TwoNodesOfTwoRanksSmallThroughColumns) {
  RunRanks(
      {0, 0, 1, 1}, [](int, RankComms& c) { CheckEveryOp(*c.hier, 4); },
      absl::Seconds(30), /*small_through_leaders=*/false);
}

// The columns' pipeline in pieces of 1000 bytes per rank: several full
// pieces and a shorter last one (5003 elements), only a short one (1001),
// and an odd element left over (count % 2), every op and dtype, in and out
// of place, against the references.
TEST(HierarchicalCommunicatorTest, TwoNodesOfTwoRanksPipelined) {
  RunRanks(
      {0, 0, 1, 1}, [](int, RankComms& c) { CheckEveryOp(*c.hier, 4); },
      absl::Seconds(30), /*small_through_leaders=*/true,
      /*pipeline_piece_bytes=*/1000);
}

TEST(HierarchicalCommunicatorTest, ThreeNodesOfOneRank) {
  RunRanks({4, 5, 6}, [](int, RankComms& c) { CheckEveryOp(*c.hier, 3); });
}

TEST(GlooCommunicatorTest, FlatGlooOfThreeRanks) {
  RunRanks({0, 0, 0}, [](int, RankComms& c) { CheckEveryOp(*c.flat, 3); });
}

// The one-exchange all_reduce: every dtype and op against the references,
// in and out of place, every rank the same bits, over sizes on both sides
// of its staging bound (the larger ones take the ring).
TEST(GlooCommunicatorTest, ExchangeAllReduceOfThreeRanks) {
  std::vector<std::vector<uint8_t>> results(3);
  RunRanks({0, 1, 2}, [&](int me, RankComms& c) {
    for (DType t : kTypes) {
      for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1001},
                        int64_t{70000}}) {
        for (ReduceOp op : kOps) {
          const std::string at =
              absl::StrCat(DTypeName(t), " n=", n, " ", ReduceOpName(op));
          std::vector<uint8_t> in = Fill(t, me, n, op), out(n * Size(t) + 1);
          ASSERT_TRUE(c.flat
                          ->ExchangeAllReduce(in.data(), out.data(), n, t, op,
                                              absl::ZeroDuration())
                          .ok())
              << at;
          EXPECT_EQ(testing::CheckReduced(t, op, 3, out, n), "") << at;
          ASSERT_TRUE(c.flat
                          ->ExchangeAllReduce(in.data(), in.data(), n, t, op,
                                              absl::ZeroDuration())
                          .ok())
              << at;
          EXPECT_EQ(std::memcmp(in.data(), out.data(), n * Size(t)), 0)
              << "in place " << at;
          if (t == DType::kF16 && n == 1001 && op == ReduceOp::kAvg) {
            results[me] = out;
          }
        }
      }
    }
  });
  EXPECT_EQ(results[0], results[1]);
  EXPECT_EQ(results[0], results[2]);
}

// Runs `body` on `world` threads, each with a gloo communicator whose
// small exchange goes through pairs in gloo's sync mode.
void RunSyncRanks(int world,
                  const std::function<void(int, GlooCommunicator&)>& body,
                  absl::Duration timeout = absl::Seconds(30)) {
  static int serial = 0;
  const std::string name = absl::StrCat("s", getpid(), "-", serial++);
  InMemoryRendezvous rendezvous;
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      GlooCommOptions go;
      go.hostname = "127.0.0.1";
      go.timeout = timeout;
      go.sync_exchange = true;
      go.exchange_bytes = 2 << 20;
      auto comm = GlooCommunicator::Create(rendezvous, name, r, world, go);
      ASSERT_TRUE(comm.ok()) << comm.status();
      body(r, **comm);
    });
  }
  for (std::thread& t : threads) t.join();
}

// The sync-mode exchange (the leaders' small all_reduce): every dtype and op
// against the references, in and out of place, every rank the same bits,
// over sizes of one chunk, several chunks, and past its bound (those take
// the unbound-buffer exchange on the same communicator, interleaved).
TEST(GlooCommunicatorTest, SyncExchangeAllReduceOfThreeRanks) {
  std::vector<std::vector<uint8_t>> results(3);
  RunSyncRanks(3, [&](int me, GlooCommunicator& c) {
    for (DType t : kTypes) {
      for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{1001}, int64_t{70001},
                        int64_t{300000}}) {
        for (ReduceOp op : kOps) {
          const std::string at =
              absl::StrCat(DTypeName(t), " n=", n, " ", ReduceOpName(op));
          std::vector<uint8_t> in = Fill(t, me, n, op), out(n * Size(t) + 1);
          ASSERT_TRUE(c.ExchangeAllReduce(in.data(), out.data(), n, t, op,
                                          absl::ZeroDuration())
                          .ok())
              << at;
          EXPECT_EQ(testing::CheckReduced(t, op, 3, out, n), "") << at;
          ASSERT_TRUE(c.ExchangeAllReduce(in.data(), in.data(), n, t, op,
                                          absl::ZeroDuration())
                          .ok())
              << at;
          EXPECT_EQ(std::memcmp(in.data(), out.data(), n * Size(t)), 0)
              << "in place " << at;
          if (t == DType::kBF16 && n == 70001 && op == ReduceOp::kAvg) {
            results[me] = out;
          }
        }
      }
    }
  });
  EXPECT_EQ(results[0], results[1]);
  EXPECT_EQ(results[0], results[2]);
}

// A sync-mode exchange blocks in the socket itself, where gloo's
// abortWaitRecv cannot reach: a peer that never comes gives DeadlineExceeded
// at the call's timeout; Abort from another thread (as the watchers do)
// ends the blocked call at once with its reason; a peer that goes (its
// sockets close) gives Unavailable.
TEST(GlooCommunicatorTest, ABlockedSyncExchangeEndsByTimeoutAbortOrLoss) {
  absl::Notification timed_out, aborted;
  absl::Status late, stopped, lost;
  absl::Duration late_took, stopped_took, lost_took;
  RunSyncRanks(2, [&](int r, GlooCommunicator& c) {
    if (r == 1) {
      timed_out.WaitForNotification();
      return;
    }
    std::vector<float> x(1000, 1.0f);
    absl::Time t0 = absl::Now();
    late = c.ExchangeAllReduce(x.data(), x.data(), x.size(), DType::kF32,
                               ReduceOp::kSum, absl::Milliseconds(300));
    late_took = absl::Now() - t0;
    timed_out.Notify();
  });
  EXPECT_EQ(late.code(), absl::StatusCode::kDeadlineExceeded) << late;
  EXPECT_LT(late_took, absl::Seconds(5)) << late;
  RunSyncRanks(2, [&](int r, GlooCommunicator& c) {
    if (r == 1) {
      aborted.WaitForNotification();
      return;
    }
    std::thread aborter([&] {
      absl::SleepFor(absl::Milliseconds(200));
      c.Abort(absl::UnavailableError("the test gave up")).IgnoreError();
    });
    std::vector<float> x(1000, 1.0f);
    const absl::Time t0 = absl::Now();
    stopped = c.ExchangeAllReduce(x.data(), x.data(), x.size(), DType::kF32,
                                  ReduceOp::kSum, absl::Seconds(20));
    stopped_took = absl::Now() - t0;
    aborter.join();
    aborted.Notify();
  });
  EXPECT_EQ(stopped.code(), absl::StatusCode::kUnavailable) << stopped;
  EXPECT_TRUE(absl::StrContains(stopped.message(), "the test gave up"))
      << stopped;
  EXPECT_LT(stopped_took, absl::Seconds(5)) << stopped;
  absl::Notification goes;
  RunSyncRanks(2, [&](int r, GlooCommunicator& c) {
    if (r == 1) {
      goes.WaitForNotification();
      return;  // its communicator, and its sockets, go
    }
    std::vector<float> x(1000, 1.0f);
    std::thread leaver([&] {
      absl::SleepFor(absl::Milliseconds(200));
      goes.Notify();
    });
    const absl::Time t0 = absl::Now();
    lost = c.ExchangeAllReduce(x.data(), x.data(), x.size(), DType::kF32,
                               ReduceOp::kSum, absl::Seconds(20));
    lost_took = absl::Now() - t0;
    leaver.join();
  });
  EXPECT_EQ(lost.code(), absl::StatusCode::kUnavailable) << lost;
  EXPECT_LT(lost_took, absl::Seconds(5)) << lost;
}

// Flat gloo used directly (its own watcher started, as Communicator does): a
// root that goes while the others wait in its broadcast fails them well
// before the call's timeout.
TEST(GlooCommunicatorTest, ABroadcastFromARankThatWentFailsAtOnce) {
  std::vector<absl::Status> got(3);
  std::vector<absl::Duration> took(3);
  RunRanks(
      {0, 1, 2},
      [&](int r, RankComms& c) {
        c.flat->StartWatching();
        if (r == 2) return;  // the root goes: its sockets close
        std::vector<float> x(1 << 20);
        const absl::Time t0 = absl::Now();
        got[r] = c.flat->Broadcast(x.data(), x.data(), x.size(), DType::kF32, 2,
                                   absl::Seconds(20));
        took[r] = absl::Now() - t0;
      },
      absl::Seconds(20));
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(got[r].code(), absl::StatusCode::kUnavailable) << got[r];
    EXPECT_LT(took[r], absl::Seconds(10)) << r << ": " << got[r];
  }
}

// The connection watch under gloo (gloo_connections.h): every pair's socket
// is found, and a connection lost under a running call (rank 2 goes while
// rank 0 waits on rank 1) fails the communicator, naming rank 2, well before
// the call's own timeout; the call returns that failure.
TEST(GlooCommunicatorTest, ALostConnectionUnderARunningCallIsSeen) {
  absl::Notification rank0_done;
  absl::Status seen, call;
  absl::Duration took;
  RunRanks({0, 1, 2}, [&](int r, RankComms& c) {
    EXPECT_EQ(c.flat->watched_connections(), 2) << "rank " << r;
    if (r == 2) return;  // its communicators go, and their sockets
    if (r == 1) {
      rank0_done.WaitForNotification();
      return;
    }
    std::vector<float> x(10);
    std::thread waiting([&] {
      call = c.flat->Recv(x.data(), x.size(), DType::kF32, 1, absl::Seconds(4));
    });
    const absl::Time t0 = absl::Now();
    while (seen.ok() && absl::Now() - t0 < absl::Seconds(3)) {
      absl::SleepFor(absl::Milliseconds(10));
      seen = c.flat->CheckConnections(absl::Milliseconds(100));
    }
    took = absl::Now() - t0;
    waiting.join();
    rank0_done.Notify();
  });
  EXPECT_EQ(seen.code(), absl::StatusCode::kUnavailable) << seen;
  EXPECT_TRUE(absl::StrContains(seen.message(), "rank 2")) << seen;
  EXPECT_LT(took, absl::Seconds(3));
  EXPECT_EQ(call.code(), absl::StatusCode::kUnavailable) << call;
  EXPECT_TRUE(absl::StrContains(call.message(), "rank 2")) << call;
}

// A rank that fails makes the others — on its node through shm, on the other
// node through closed gloo connections — fail at once, not at their 20 s
// timeout; every later call is refused.
class FailureTest : public ::testing::TestWithParam<uint64_t> {};

TEST_P(FailureTest, AFailureReachesEveryRankAtOnce) {
  std::vector<absl::Status> got(4);
  std::vector<absl::Duration> took(4);
  RunRanks(
      {0, 0, 1, 1},
      [&](int r, RankComms& c) {
        std::vector<float> x(100000, 1.0f);
        if (r == 3) {
          // A barrier against the others' all_reduce, with a 1 ms timeout:
          // it fails (a mismatch or a timeout) and must take everyone down.
          got[r] = c.hier->Barrier(absl::Milliseconds(1));
          return;
        }
        const absl::Time t0 = absl::Now();
        got[r] = c.hier->AllReduce(x.data(), x.data(), x.size(), DType::kF32,
                                   ReduceOp::kSum, absl::ZeroDuration());
        took[r] = absl::Now() - t0;
        absl::Status again = c.hier->Barrier(absl::ZeroDuration());
        EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition) << again;
      },
      absl::Seconds(20), /*small_through_leaders=*/true, GetParam());
  EXPECT_FALSE(got[3].ok());
  for (int r = 0; r < 3; ++r) {
    EXPECT_FALSE(got[r].ok()) << r;
    EXPECT_LT(took[r], absl::Seconds(10)) << r << ": " << got[r];
  }
}

// Unpipelined, and the pipeline in pieces of 16 KiB per rank.
INSTANTIATE_TEST_SUITE_P(HierarchicalCommunicatorTest, FailureTest,
                         ::testing::Values(0, 16 << 10));

}  // namespace
}  // namespace shoal::collectives
