// The process group with ranks as threads of this process, meeting in a
// c10d HashStore (each thread maps the shm segment as a process would).
#include "torch_backend/process_group.h"

#include <chrono>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace shoal::torch_backend {
namespace {

using std::chrono::milliseconds;

// Runs `body(rank, group)` on `world` threads, each with its own group.
void OnRanks(int world, milliseconds timeout,
             const std::function<void(int, ProcessGroupShoal&)>& body) {
  auto store = c10::make_intrusive<::c10d::HashStore>();
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      auto prefixed = c10::make_intrusive<::c10d::PrefixStore>("g0", store);
      auto pg = ProcessGroupShoal::Create(prefixed, r, world, timeout, "0");
      ASSERT_TRUE(pg.ok()) << pg.status();
      body(r, **pg);
    });
  }
  for (auto& t : threads) t.join();
}

TEST(ProcessGroupShoalTest, AllReduceBroadcastAndAllGather) {
  constexpr int kWorld = 3;
  OnRanks(kWorld, milliseconds(30000), [](int rank, ProcessGroupShoal& pg) {
    EXPECT_EQ(pg.getBackendName(), "shoal");
    std::vector<at::Tensor> t = {at::full({1000}, rank + 1.0)};
    pg.allreduce(t, {})->wait(::c10d::Store::kNoTimeout);
    EXPECT_TRUE(at::equal(t[0], at::full({1000}, 6.0)));

    ::c10d::AllreduceOptions max;
    max.reduceOp = ::c10d::ReduceOp::MAX;
    std::vector<at::Tensor> m = {at::full({5}, rank * 1.0, at::kLong)};
    pg.allreduce(m, max)->wait(::c10d::Store::kNoTimeout);
    EXPECT_TRUE(at::equal(m[0], at::full({5}, 2, at::kLong)));

    ::c10d::BroadcastOptions from1;
    from1.rootRank = 1;
    std::vector<at::Tensor> b = {at::arange(10) * (rank + 1)};
    pg.broadcast(b, from1)->wait(::c10d::Store::kNoTimeout);
    EXPECT_TRUE(at::equal(b[0], at::arange(10) * 2));

    at::Tensor out = at::empty({kWorld * 2}, at::kFloat);
    at::Tensor in = at::full({2}, rank * 1.0);
    auto work = pg._allgather_base(out, in, {});
    auto future = work->getFuture();  // completed by the group's thread
    future->wait();
    EXPECT_TRUE(work->isCompleted());
    for (int r = 0; r < kWorld; ++r) {
      EXPECT_TRUE(at::equal(out.narrow(0, 2 * r, 2), at::full({2}, r * 1.0)));
    }
  });
}

TEST(ProcessGroupShoalTest, RefusalsNameTheOpAndDtype) {
  OnRanks(2, milliseconds(30000), [](int rank, ProcessGroupShoal& pg) {
    std::vector<at::Tensor> bytes = {at::ones({3}, at::kByte)};
    try {
      pg.allreduce(bytes, {});
      ADD_FAILURE() << "a uint8 all_reduce was accepted";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("allreduce"), std::string::npos);
      EXPECT_NE(std::string(e.what()).find("Byte"), std::string::npos);
    }
    std::vector<at::Tensor> two = {at::ones({1}), at::ones({1})};
    EXPECT_THROW(pg.allreduce(two, {}), std::runtime_error);
    // Still in step afterwards: nothing was issued.
    pg.barrier({})->wait(::c10d::Store::kNoTimeout);
  });
}

TEST(ProcessGroupShoalTest, AStalledRankFailsTheOthersWithinTheTimeout) {
  OnRanks(2, milliseconds(500), [](int rank, ProcessGroupShoal& pg) {
    if (rank == 1) return;  // never joins the all_reduce
    std::vector<at::Tensor> t = {at::ones({100})};
    const absl::Time start = absl::Now();
    auto work = pg.allreduce(t, {});
    try {
      work->wait(::c10d::Store::kNoTimeout);
      ADD_FAILURE() << "the all_reduce succeeded without rank 1";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("shoal allreduce"),
                std::string::npos)
          << e.what();
    }
    EXPECT_LT(absl::Now() - start, absl::Seconds(10));
    EXPECT_TRUE(work->isCompleted());
    EXPECT_FALSE(work->isSuccess());
  });
}

}  // namespace
}  // namespace shoal::torch_backend
