// A stranger against a two-node `shoal launch` job's gloo pairs (two network
// namespaces joined by a veth pair, as tests/nodes): another user racing the
// ranks for their pair listeners (gloo_stranger) while the job's ranks
// connect (gloo_probe). docs/security.md, "gloo between nodes".
//
// The window a stranger races for is a listener's life between its address
// being published and the peer's connection; the probe makes it wide
// (PROBE_DELAY_MS: a rank waits before it reads its peers' pair addresses),
// so that the stranger is there first every time. Skipped where namespaces
// cannot be made (root and iproute2), or uid 65534 cannot be taken.
#include <unistd.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/testing/command.h"
#include "tests/testing/netns_pair.h"
#include "tests/testing/test_env.h"

namespace shoal {
namespace {

using shoal::testing::NetnsPair;
using shoal::testing::RunfilePath;
using Result = testing::CommandResult;
using Env = std::map<std::string, std::optional<std::string>>;

// The stranger's summary line, as numbers.
std::map<std::string, int64_t> Summary(const Result& r) {
  std::map<std::string, int64_t> out;
  for (const std::string& line : r.out) {
    if (!absl::StartsWith(line, "stranger ")) continue;
    for (absl::string_view kv : absl::StrSplit(line.substr(9), ' ')) {
      std::vector<std::string> p = absl::StrSplit(kv, '=');
      int64_t v = 0;
      if (p.size() == 2 && absl::SimpleAtoi(p[1], &v)) out[p[0]] = v;
    }
  }
  return out;
}

// The ranks' outcome lines ("rank R: MODE ok|failed after N ms[: status]").
std::vector<std::string> Outcomes(const std::vector<Result>& nodes) {
  std::vector<std::string> out;
  for (const Result& r : nodes) {
    for (const std::string& line : r.out) {
      if (absl::StrContains(line, " ok after ") ||
          absl::StrContains(line, " failed after ")) {
        out.push_back(line);
      }
    }
  }
  return out;
}

int64_t Millis(const std::string& line) {
  const size_t at = line.find(" after ");
  int64_t ms = -1;
  if (at == std::string::npos) return -1;
  const std::string rest = line.substr(at + 7);
  (void)absl::SimpleAtoi(rest.substr(0, rest.find(" ms")), &ms);
  return ms;
}

std::string Text(const std::vector<Result>& rs) {
  std::string t;
  for (const Result& r : rs) absl::StrAppend(&t, r.OutText(), r.err, "\n");
  return t;
}

class GlooAttack : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!net_.ok()) {
      GTEST_SKIP() << "cannot create network namespaces here (needs root and "
                      "iproute2): the gloo attack tests did not run";
    }
    // The stranger must be able to become another user.
    Result probe =
        testing::RunCommand({RunfilePath("tests/security/gloo/gloo_stranger"),
                             "/proc/net/tcp", "127.0.0.1", "0", "65534", "0"},
                            "stranger-check");
    if (probe.code != 0) {
      GTEST_SKIP() << "cannot run a process as uid 65534 here: " << probe.err;
    }
  }

  // `shoal launch` of node k with `nproc` ranks running the probe in `mode`.
  testing::RunningCommand Start(int node, int nproc, const std::string& mode,
                                const Env& env = {}) {
    std::vector<std::string> argv = net_.In(node);
    for (const std::string& a : std::vector<std::string>{
             RunfilePath("tools/shoal"), "launch", "--store-bytes", "64M",
             "--nnodes", "2", "--node-rank", absl::StrCat(node),
             "--coordinator", absl::StrCat(net_.head_ip(), ":", port_),
             "--nproc-per-node", absl::StrCat(nproc), "--tee", "--stop-grace",
             "10", "--", RunfilePath("tests/security/gloo/gloo_probe"), mode}) {
      argv.push_back(a);
    }
    return testing::StartCommand(argv, absl::StrCat("node", node), env);
  }

  // The stranger in node k's namespace, reading `table`, for `seconds`.
  testing::RunningCommand Stranger(int node, const std::string& table,
                                   int seconds, bool speak) {
    std::vector<std::string> argv = net_.In(node);
    for (const std::string& a : std::vector<std::string>{
             RunfilePath("tests/security/gloo/gloo_stranger"), table,
             net_.head_ip(), absl::StrCat(geteuid()), "65534",
             absl::StrCat(seconds)}) {
      argv.push_back(a);
    }
    if (speak) argv.push_back("speak");
    return testing::StartCommand(argv, absl::StrCat("stranger", node));
  }

  NetnsPair net_{"shoalg", 77};
  int port_ = 29431;
};

// The attack as found: another user of the head node connects to a rank's
// pair listener before the peer on the other node does. The listener's
// filter drops the stranger's SYN (its connection never completes), the
// peer gets in, and the all_reduce is right.
TEST_F(GlooAttack, AStrangerOnTheHeadNodeCannotTakeAListener) {
  auto stranger = Stranger(0, "/proc/net/tcp", 8, /*speak=*/false);
  auto node0 = Start(0, 1, "flat");
  auto node1 = Start(1, 1, "flat", {{"PROBE_DELAY_MS", "1500"}});
  std::vector<Result> nodes = {node0.Finish(), node1.Finish()};
  Result s = stranger.Finish();
  const std::vector<std::string> outcomes = Outcomes(nodes);
  ASSERT_EQ(outcomes.size(), 2u) << Text(nodes);
  for (const std::string& line : outcomes) {
    EXPECT_TRUE(absl::StrContains(line, "flat ok")) << line << Text(nodes);
  }
  std::map<std::string, int64_t> got = Summary(s);
  std::printf("%s", s.OutText().c_str());
  EXPECT_GE(got["filtered"], 1)
      << "the stranger's SYN was not dropped: " << s.OutText();
  EXPECT_EQ(got["bytes"], 0) << s.OutText();
}

// A stranger on the peer's node passes the filter (its packets come from
// that node) and answers the rank's token request with a token of its own:
// the rank names it and every rank's creation fails, at once.
TEST_F(GlooAttack, AStrangerOnThePeersNodeIsRefusedByTheTokenCheck) {
  // Rank 0 starts once both launchers met; its peer waits 2 s before it
  // reads rank 0's pair addresses, time for the stranger to start.
  auto node0 = Start(0, 1, "flat");
  auto node1 = Start(1, 1, "flat", {{"PROBE_DELAY_MS", "2000"}});
  std::vector<std::string> early;
  int pid = -1;
  while (pid < 0) {
    absl::StatusOr<std::string> line =
        node0.process.ReadLine(absl::Seconds(60));
    ASSERT_TRUE(line.ok()) << line.status();
    early.push_back(*line);
    const size_t at = line->find(" pid ");
    if (at != std::string::npos)
      (void)absl::SimpleAtoi(line->substr(at + 5), &pid);
  }
  // The stranger reads rank 0's table (its namespace's) from node 1's.
  auto stranger = Stranger(1, absl::StrCat("/proc/", pid, "/net/tcp"), 8,
                           /*speak=*/true);
  std::vector<Result> nodes = {node0.Finish(), node1.Finish()};
  nodes[0].out.insert(nodes[0].out.begin(), early.begin(), early.end());
  Result s = stranger.Finish();
  std::printf("%s", s.OutText().c_str());
  const std::vector<std::string> outcomes = Outcomes(nodes);
  ASSERT_EQ(outcomes.size(), 2u) << Text(nodes);
  bool named = false;
  for (const std::string& line : outcomes) {
    std::printf("%s\n", line.c_str());
    EXPECT_TRUE(absl::StrContains(line, "flat failed")) << line;
    EXPECT_TRUE(absl::StrContains(line, "PERMISSION_DENIED")) << line;
    named |= absl::StrContains(
                 line,
                 "a process that does not hold the job's secret is connected "
                 "in place of rank 1") &&
             absl::StrContains(line, "sent a token that rank did not publish");
    EXPECT_GE(Millis(line), 0) << line;
    EXPECT_LT(Millis(line), 12000) << "waited for its timeout: " << line;
  }
  EXPECT_TRUE(named) << Text(nodes);
  EXPECT_EQ(Summary(s)["bytes"], 0) << s.OutText();
}

// A pair within a node: the filter lets the node's own addresses in, so
// another user of the node gets a connection; its owner (uid 65534, from
// /proc/net/tcp) gives it away, and every rank's creation fails at once. It
// breaks the job's start; it never joins.
TEST_F(GlooAttack, AnotherUserOnTheSameNodeIsRefusedByTheOwnerCheck) {
  auto stranger = Stranger(0, "/proc/net/tcp", 10, /*speak=*/false);
  auto node0 = Start(0, 2, "flat", {{"PROBE_DELAY_MS", "1000"}});
  auto node1 = Start(1, 2, "flat", {{"PROBE_DELAY_MS", "1000"}});
  std::vector<Result> nodes = {node0.Finish(), node1.Finish()};
  Result s = stranger.Finish();
  std::printf("%s", s.OutText().c_str());
  const std::vector<std::string> outcomes = Outcomes(nodes);
  ASSERT_EQ(outcomes.size(), 4u) << Text(nodes);
  bool named = false;
  for (const std::string& line : outcomes) {
    std::printf("%s\n", line.c_str());
    EXPECT_TRUE(absl::StrContains(line, "flat failed")) << line;
    named |= absl::StrContains(line, "is a socket of uid 65534");
    EXPECT_LT(Millis(line), 15000) << "waited for its timeout: " << line;
  }
  EXPECT_TRUE(named) << Text(nodes);
  EXPECT_EQ(Summary(s)["bytes"], 0) << s.OutText();
}

// The production path (Communicator::Create: the hierarchical backend and
// flat gloo, one rank per node, so every gloo pair crosses nodes) with the
// stranger racing for every listener as fast as it can: the job always
// completes.
TEST_F(GlooAttack, AStrangerRacingAJobsStartDoesNotBreakIt) {
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(absl::StrCat("round ", round));
    port_ = 29432 + round;
    auto stranger = Stranger(0, "/proc/net/tcp", 6, /*speak=*/false);
    auto node0 = Start(0, 1, "communicator");
    auto node1 = Start(1, 1, "communicator");
    std::vector<Result> nodes = {node0.Finish(), node1.Finish()};
    Result s = stranger.Finish();
    std::printf("%s", s.OutText().c_str());
    const std::vector<std::string> outcomes = Outcomes(nodes);
    ASSERT_EQ(outcomes.size(), 2u) << Text(nodes);
    for (const std::string& line : outcomes) {
      EXPECT_TRUE(absl::StrContains(line, "communicator ok"))
          << line << Text(nodes);
    }
    EXPECT_EQ(Summary(s)["bytes"], 0) << s.OutText();
  }
}

}  // namespace
}  // namespace shoal
