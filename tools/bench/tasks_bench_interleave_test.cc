#include "tools/bench/tasks_bench_interleave.h"

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace shoal::bench {
namespace {

// A fake clock that each system's round trip advances by its own cost, so
// latencies are exact and the test does not depend on the machine.
struct Fake {
  double clock = 0;
  std::vector<std::string> calls;  // system name per round trip, in order
  InterleavedSystem System(const std::string& name,
                           std::function<double(int)> cost) {
    auto count = std::make_shared<int>(0);
    return {name, [this, name, cost, count] {
              calls.push_back(name);
              clock += cost((*count)++);
              return absl::OkStatus();
            }};
  }
  InterleaveOptions Options(int blocks, int per_block, int warmup) {
    InterleaveOptions o;
    o.blocks = blocks;
    o.per_block = per_block;
    o.warmup = warmup;
    o.now = [this] { return clock; };
    return o;
  }
};

std::string Joined(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += x;
  return s;
}

TEST(InterleaveTest, WarmsUpThenAlternatesTheOrderPerBlock) {
  Fake f;
  auto flat = [](int) { return 1e-6; };
  absl::StatusOr<std::vector<InterleavedLatency>> r = MeasureInterleaved(
      {f.System("a", flat), f.System("b", flat), f.System("c", flat)},
      f.Options(/*blocks=*/3, /*per_block=*/2, /*warmup=*/1));
  ASSERT_TRUE(r.ok()) << r.status();
  // Warm-ups a, b, c; block 0 forward, block 1 backward, block 2 forward.
  EXPECT_EQ(Joined(f.calls), "abcaabbccccbbaaaabbcc");
  ASSERT_EQ(r->size(), 3u);
  for (const InterleavedLatency& l : *r) {
    EXPECT_EQ(l.samples.size(), 6u);  // warm-ups not timed
    EXPECT_EQ(l.block_p50.size(), 3u);
  }
  EXPECT_EQ((*r)[1].name, "b");
}

TEST(InterleaveTest, TimesEachSystemAndItsBlocks) {
  Fake f;
  // a costs 10 µs per round trip in blocks 0 and 1 and 40 µs in block 2;
  // b costs 20 µs always. Warm-up: 2 each (a's counter counts them).
  auto a_cost = [](int i) { return i < 2 + 2 * 4 ? 10e-6 : 40e-6; };
  auto b_cost = [](int) { return 20e-6; };
  absl::StatusOr<std::vector<InterleavedLatency>> r =
      MeasureInterleaved({f.System("a", a_cost), f.System("b", b_cost)},
                         f.Options(/*blocks=*/3, /*per_block=*/4,
                                   /*warmup=*/2));
  ASSERT_TRUE(r.ok()) << r.status();
  const InterleavedLatency& a = (*r)[0];
  const InterleavedLatency& b = (*r)[1];
  ASSERT_EQ(a.block_p50.size(), 3u);
  EXPECT_NEAR(a.block_p50[0], 10e-6, 1e-12);
  EXPECT_NEAR(a.block_p50[1], 10e-6, 1e-12);
  EXPECT_NEAR(a.block_p50[2], 40e-6, 1e-12);
  EXPECT_NEAR(a.p50_us, 10, 1e-6);  // 8 of 12 samples at 10 µs
  EXPECT_NEAR(a.p99_us, 40, 1e-6);
  EXPECT_NEAR(b.p50_us, 20, 1e-6);
  const std::vector<double> ratios = BlockRatios(a, b);
  ASSERT_EQ(ratios.size(), 3u);
  EXPECT_NEAR(ratios[0], 0.5, 1e-9);
  EXPECT_NEAR(ratios[1], 0.5, 1e-9);
  EXPECT_NEAR(ratios[2], 2.0, 1e-9);
}

TEST(InterleaveTest, CountsSwitchesPerTimedRoundTrip) {
  Fake f;
  int64_t switches = 0;
  // a hands off 4 times per round trip, b 6 times; warm-ups count too, but
  // only timed blocks are counted.
  std::vector<InterleavedSystem> systems = {{"a",
                                             [&] {
                                               switches += 4;
                                               return absl::OkStatus();
                                             }},
                                            {"b", [&] {
                                               switches += 6;
                                               return absl::OkStatus();
                                             }}};
  InterleaveOptions o = f.Options(/*blocks=*/3, /*per_block=*/5,
                                  /*warmup=*/7);
  o.switches = [&] { return switches; };
  absl::StatusOr<std::vector<InterleavedLatency>> r =
      MeasureInterleaved(systems, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_DOUBLE_EQ((*r)[0].switches_per_op, 4);
  EXPECT_DOUBLE_EQ((*r)[1].switches_per_op, 6);
}

TEST(InterleaveTest, AnUnreadableCounterIsNotCounted) {
  Fake f;
  InterleaveOptions o = f.Options(2, 3, 0);
  o.switches = [] { return int64_t{-1}; };
  absl::StatusOr<std::vector<InterleavedLatency>> r =
      MeasureInterleaved({f.System("a", [](int) { return 1e-6; })}, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].switches_per_op, -1);
}

// The real counter: a thread that blocks until another wakes it is switched
// out and in, so 200 hand-offs add at least 200 switches.
TEST(InterleaveTest, MachineContextSwitchesCountsRealHandOffs) {
  const int64_t before = MachineContextSwitches();
  ASSERT_GE(before, 0) << "/proc/stat has no ctxt line";
  std::mutex mu;
  std::condition_variable cv;
  int turn = 0;  // even: the main thread's, odd: the other's
  std::thread other([&] {
    for (int i = 0; i < 100; ++i) {
      std::unique_lock<std::mutex> l(mu);
      cv.wait(l, [&] { return turn % 2 == 1; });
      ++turn;
      cv.notify_all();
    }
  });
  for (int i = 0; i < 100; ++i) {
    std::unique_lock<std::mutex> l(mu);
    ++turn;
    cv.notify_all();
    cv.wait(l, [&] { return turn % 2 == 0; });
  }
  other.join();
  EXPECT_GE(MachineContextSwitches() - before, 200);
}

TEST(InterleaveTest, StopsAtTheFirstError) {
  Fake f;
  int b_calls = 0;
  std::vector<InterleavedSystem> systems = {
      f.System("a", [](int) { return 1e-6; }),
      {"b", [&] {
         return ++b_calls == 3 ? absl::UnavailableError("gone")
                               : absl::OkStatus();
       }}};
  absl::StatusOr<std::vector<InterleavedLatency>> r =
      MeasureInterleaved(systems, f.Options(4, 5, 0));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(b_calls, 3);
}

TEST(InterleaveTest, RefusesBadOptions) {
  Fake f;
  auto flat = [](int) { return 1e-6; };
  EXPECT_EQ(MeasureInterleaved({}, f.Options(1, 1, 0)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MeasureInterleaved({f.System("a", flat)}, f.Options(0, 1, 0))
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MeasureInterleaved({f.System("a", flat)}, f.Options(1, 0, 0))
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(f.calls.empty());
}

}  // namespace
}  // namespace shoal::bench
