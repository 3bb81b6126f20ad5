// Collectives across nodes: two "machines" (network namespaces joined by a
// veth pair) × 2 ranks each under `shoal launch --nnodes 2`. Host buffers
// take the hierarchical backend (shm within a namespace, gloo between them)
// or, forced, flat gloo. Skipped with a reason where namespaces cannot be
// made (they need root and iproute2).
#include <unistd.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/testing/command.h"
#include "tests/testing/netns_pair.h"
#include "tests/testing/test_env.h"

namespace shoal {
namespace {

using shoal::testing::RunfilePath;
using Result = testing::CommandResult;

using shoal::testing::NetnsPair;

using Env = std::map<std::string, std::optional<std::string>>;

class TwoNodes : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!net_.ok()) {
      GTEST_SKIP() << "cannot create network namespaces here (needs root and "
                      "iproute2): the tests across nodes did not run";
    }
  }

  // `shoal launch` for node k of 2, 2 ranks, running `command`.
  // `flags`: more flags of `shoal launch`.
  testing::RunningCommand Start(int node, std::vector<std::string> command,
                                const Env& env = {},
                                const std::vector<std::string>& flags = {}) {
    std::vector<std::string> argv = net_.In(node);
    for (const std::string& a : std::vector<std::string>{
             RunfilePath("tools/shoal"), "launch", "--store-bytes", "64M",
             "--nnodes", "2", "--node-rank", absl::StrCat(node),
             "--coordinator", absl::StrCat(net_.head_ip(), ":29412"),
             "--nproc-per-node", "2", "--tee", "--stop-grace", "10"}) {
      argv.push_back(a);
    }
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.push_back("--");
    argv.insert(argv.end(), command.begin(), command.end());
    return testing::StartCommand(argv, absl::StrCat("node", node), env);
  }

  // Both nodes running `command`; their results, node 0's first.
  std::pair<Result, Result> RunBoth(std::vector<std::string> command,
                                    const Env& env = {}) {
    auto node0 = Start(0, command, env);
    auto node1 = Start(1, command, env);
    Result r0 = node0.Finish(absl::Minutes(3));
    Result r1 = node1.Finish(absl::Minutes(3));
    return {r0, r1};
  }

  // Reads `node`'s output until both its ranks printed "started".
  // Errors: the ReadLine's (nothing within 60 s, or the node exited).
  static absl::Status BothRanksStarted(testing::RunningCommand& node) {
    for (int started = 0; started < 2;) {
      absl::StatusOr<std::string> line =
          node.process.ReadLine(absl::Seconds(60));
      if (!line.ok()) return line.status();
      started += absl::StrContains(*line, "started");
    }
    return absl::OkStatus();
  }

  static std::vector<std::string> Lines(const std::pair<Result, Result>& r) {
    std::vector<std::string> lines = r.first.out;
    lines.insert(lines.end(), r.second.out.begin(), r.second.out.end());
    return lines;
  }

  static int64_t Millis(const std::string& line) {
    const size_t at = line.find(" after ");
    int64_t ms = -1;
    if (at == std::string::npos ||
        !absl::SimpleAtoi(line.substr(at + 7, line.find(" ms") - at - 7),
                          &ms)) {
      return -1;
    }
    return ms;
  }

  NetnsPair net_{"shoaln", 78};
};

std::string CollProbe() { return RunfilePath("tests/collectives/coll_probe"); }
std::string NodesProbe() { return RunfilePath("tests/nodes/nodes_probe"); }

// Every op × dtype × size of tests/collectives, on 2 nodes × 2 ranks: the
// automatic choice (hierarchical), then flat gloo forced by the environment.
TEST_F(TwoNodes, EveryOpDtypeAndSizeMatchesTheReference) {
  for (const char* backend : {"auto", "gloo"}) {
    SCOPED_TRACE(backend);
    auto r =
        RunBoth({CollProbe(), "all"}, {{"SHOAL_COLLECTIVES_BACKEND", backend}});
    EXPECT_EQ(r.first.code, 0) << r.first.err;
    EXPECT_EQ(r.second.code, 0) << r.second.err;
    int ok = 0;
    for (const std::string& line : Lines(r))
      ok += absl::StrContains(line, " ok ");
    EXPECT_EQ(ok, 4) << r.first.OutText() << r.second.OutText() << r.first.err
                     << r.second.err;
  }
}

TEST_F(TwoNodes, AsyncOpsAndGroups) {
  for (const char* mode : {"async", "group"}) {
    SCOPED_TRACE(mode);
    auto r = RunBoth({CollProbe(), mode});
    EXPECT_EQ(r.first.code, 0) << r.first.err;
    EXPECT_EQ(r.second.code, 0) << r.second.err;
  }
}

// Rank 3 (node 1) is SIGKILLed: every other rank fails quickly (not at its
// 30 s timeout), with a reason that names the lost rank or node.
TEST_F(TwoNodes, AKilledRankOnTheOtherNodeFailsEveryRank) {
  auto r = RunBoth({NodesProbe(), "kill-rank", "3"});
  int saw = 0;
  for (const std::string& line : Lines(r)) {
    if (!absl::StrContains(line, "kill-rank after")) continue;
    ++saw;
    EXPECT_TRUE(absl::StrContains(line, "UNAVAILABLE")) << line;
    EXPECT_TRUE(absl::StrContains(line, "rank 1 (pid") ||
                absl::StrContains(line, "node 1"))
        << "names neither the rank nor its node: " << line;
    EXPECT_GE(Millis(line), 0) << line;
    EXPECT_LT(Millis(line), 10000) << line;
  }
  EXPECT_EQ(saw, 3) << r.first.OutText() << r.second.OutText() << r.first.err
                    << r.second.err;
}

// The same under ops other than all_reduce, on the hierarchical path and on
// flat gloo forced (whose own watcher wakes its calls): rank 3 dies as the
// others enter a broadcast or all_gather; each survivor fails within the
// timeout, naming the lost rank or its node.
TEST_F(TwoNodes, AKilledRankUnderOtherOpsFailsEveryRank) {
  const std::pair<const char*, const char*> cases[] = {
      {"broadcast", "auto"}, {"all_gather", "auto"}, {"broadcast", "gloo"}};
  for (const auto& [op, backend] : cases) {
    SCOPED_TRACE(absl::StrCat(op, " on ", backend));
    auto r = RunBoth({NodesProbe(), "kill-rank", "3", op},
                     {{"SHOAL_COLLECTIVES_BACKEND", backend}});
    const bool flat = std::string(backend) == "gloo";
    int saw = 0;
    for (const std::string& line : Lines(r)) {
      if (!absl::StrContains(line, "kill-rank after")) continue;
      ++saw;
      EXPECT_TRUE(absl::StrContains(line, "UNAVAILABLE")) << line;
      // Flat gloo has no shared memory to learn the dead rank from: a
      // survivor may name the rank whose give-up closed its connection first
      // (node 0's rank 1 after it lost rank 3), still by node and ranks.
      EXPECT_TRUE(absl::StrContains(line, "rank 1 (pid") ||
                  absl::StrContains(line, "node 1") ||
                  (flat && absl::StrContains(line, " is node ")))
          << "names neither the rank nor its node: " << line;
      EXPECT_GE(Millis(line), 0) << line;
      EXPECT_LT(Millis(line), 10000) << line;
    }
    EXPECT_EQ(saw, 3) << r.first.OutText() << r.second.OutText() << r.first.err
                      << r.second.err;
  }
}

// Every process of node 1 (its launcher and both ranks) is SIGKILLed in the
// middle of a loop of all_reduces: node 0's ranks fail quickly, naming it.
// (A rank whose gloo send was queued when its peer died is failed by its
// communicator's watcher, which sees the connection gone: gloo itself
// would leave it waiting until its timeout; gloo_connections.h.)
TEST_F(TwoNodes, AKilledNodeFailsTheOtherNodesRanks) {
  auto node0 = Start(0, {NodesProbe(), "loop"});
  auto node1 = Start(1, {NodesProbe(), "loop"});
  bool looping = false;
  std::vector<std::string> early;
  while (!looping) {
    absl::StatusOr<std::string> line =
        node0.process.ReadLine(absl::Seconds(60));
    if (!line.ok()) break;
    early.push_back(*line);
    looping = absl::StrContains(*line, "looping");
  }
  ASSERT_TRUE(looping) << absl::StrJoin(early, "\n");
  net_.KillAll(1);
  // Node 0's ranks report and exit; its launcher does not notice that node 1
  // is gone (launch/ has no liveness check of other nodes), so it is stopped
  // once they have.
  std::vector<std::string> reports;
  while (reports.size() < 2) {
    absl::StatusOr<std::string> line =
        node0.process.ReadLine(absl::Seconds(60));
    if (!line.ok()) break;
    if (absl::StrContains(*line, "loop after")) reports.push_back(*line);
  }
  net_.KillAll(0);
  Result r0 = node0.Finish(absl::Seconds(10));
  Result r1 = node1.Finish(absl::Seconds(10));
  for (const std::string& line : reports) {
    EXPECT_TRUE(absl::StrContains(line, "UNAVAILABLE")) << line;
    EXPECT_TRUE(absl::StrContains(line, "node 1")) << line;
    EXPECT_LT(Millis(line), 10000) << line;
    std::printf("%s\n", line.c_str());
  }
  EXPECT_EQ(reports.size(), 2u) << absl::StrJoin(reports, "\n") << "\nnode 0:\n"
                                << r0.OutText() << r0.err << "\nnode 1:\n"
                                << r1.OutText() << r1.err;
}

// Node 1's launcher and ranks are SIGKILLed (no word to anyone): node 0's
// launcher notices through the launchers' keep-alive (launch/
// node_keepalive.h: counters renewed every second, a node lost after 10 s
// without one), stops its own ranks and exits non-zero, naming node 1.
TEST_F(TwoNodes, ALauncherStopsItsRanksWhenTheOtherNodeIsLost) {
  const std::vector<std::string> ranks = {"/bin/sh", "-c",
                                          "echo started; exec sleep 600"};
  auto node0 = Start(0, ranks);
  auto node1 = Start(1, ranks);
  for (testing::RunningCommand* node : {&node0, &node1}) {
    absl::Status started = BothRanksStarted(*node);
    ASSERT_TRUE(started.ok()) << started;
  }
  const absl::Time killed = absl::Now();
  net_.KillAll(1);
  Result r0 = node0.Finish(absl::Seconds(90));
  const absl::Duration took = absl::Now() - killed;
  Result r1 = node1.Finish(absl::Seconds(10));
  std::printf("node 0's launcher exited %d, %s after node 1 was killed\n",
              r0.code, absl::FormatDuration(took).c_str());
  EXPECT_NE(r0.code, 0) << r0.OutText() << r0.err;
  EXPECT_TRUE(absl::StrContains(r0.err, "lost node 1")) << r0.err;
  // 10 s without a keep-alive, then SIGTERM stops `sleep` at once.
  EXPECT_LT(took, absl::Seconds(30)) << r0.err;
}

// Node 0 — the key-value store's host — is SIGKILLed (launcher and ranks):
// node 1's launcher finds node 0's key-value service silent for
// --keepalive-timeout (3 s here), stops its ranks and exits non-zero,
// naming node 0.
TEST_F(TwoNodes, NodeOnesLauncherStopsWhenNodeZeroIsLost) {
  const std::vector<std::string> ranks = {"/bin/sh", "-c",
                                          "echo started; exec sleep 600"};
  const std::vector<std::string> flags = {"--keepalive-timeout", "3"};
  auto node0 = Start(0, ranks, {}, flags);
  auto node1 = Start(1, ranks, {}, flags);
  for (testing::RunningCommand* node : {&node0, &node1}) {
    absl::Status started = BothRanksStarted(*node);
    ASSERT_TRUE(started.ok()) << started;
  }
  const absl::Time killed = absl::Now();
  net_.KillAll(0);
  Result r1 = node1.Finish(absl::Seconds(90));
  const absl::Duration took = absl::Now() - killed;
  Result r0 = node0.Finish(absl::Seconds(10));
  std::printf("node 1's launcher exited %d, %s after node 0 was killed\n",
              r1.code, absl::FormatDuration(took).c_str());
  EXPECT_NE(r1.code, 0) << r1.OutText() << r1.err;
  EXPECT_TRUE(absl::StrContains(r1.err, "lost node 0")) << r1.err;
  // 3 s without an answer, then SIGTERM stops `sleep` at once.
  EXPECT_LT(took, absl::Seconds(20)) << r1.err;
}

// torch.distributed's "shoal" backend across the two nodes (torchrun-style
// under `shoal launch`: torch's TCPStore on node 0): the group spans two
// machines, so CPU tensors take the hierarchical backend. all_reduce
// sum/max, broadcast from every root, all_gather and reduce_scatter on
// f32/f64/i64, small and large, each checked against the expected values.
TEST_F(TwoNodes, TorchDistributedAcrossNodes) {
  const Env env = {{"PYTHONPATH", RunfilePath("python/site")},
                   {"PYTHONDONTWRITEBYTECODE", "1"}};
  // The backend tells machines apart by host name and boot id: each node's
  // ranks get their own UTS namespace named after the node (network
  // namespaces alone share the host name).
  auto r = RunBoth({"unshare", "--uts", "sh", "-c",
                    "hostname shoal-node$GROUP_RANK && exec \"$@\"", "sh",
                    "/usr/bin/python3",
                    RunfilePath("torch_backend/tests/torch_probe.py"), "nodes"},
                   env);
  EXPECT_EQ(r.first.code, 0) << r.first.OutText() << r.first.err;
  EXPECT_EQ(r.second.code, 0) << r.second.OutText() << r.second.err;
  int ok = 0;
  for (const std::string& line : Lines(r)) {
    ok += absl::StrContains(line, "nodes of 4 ranks ok on shoal-node");
  }
  EXPECT_EQ(ok, 4) << r.first.OutText() << r.second.OutText() << r.first.err
                   << r.second.err;
}

}  // namespace
}  // namespace shoal
