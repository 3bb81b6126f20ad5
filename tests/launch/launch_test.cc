// `shoal launch` end to end: real launchers starting real processes.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/process_info.h"
#include "gtest/gtest.h"
#include "tests/testing/command.h"
#include "tests/testing/netns_pair.h"
#include "tests/testing/test_env.h"

namespace shoal {
namespace {

using shoal::testing::ReadFile;
using shoal::testing::RunfilePath;
using shoal::testing::WaitUntil;

std::string Probe() { return RunfilePath("tests/launch/launch_probe"); }

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

// A running `shoal launch`.
using Launch = testing::RunningCommand;

Launch Start(std::vector<std::string> flags, std::vector<std::string> command,
             std::map<std::string, std::optional<std::string>> env = {},
             std::vector<std::string> wrapper = {}) {
  std::vector<std::string> argv = wrapper;
  for (const std::string& a :
       {RunfilePath("tools/shoal"), std::string("launch"),
        std::string("--store-bytes"), std::string("64M")}) {
    argv.push_back(a);
  }
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.push_back("--");
  argv.insert(argv.end(), command.begin(), command.end());
  return testing::StartCommand(argv, "launch", std::move(env));
}

testing::CommandResult RunLaunch(
    std::vector<std::string> flags, std::vector<std::string> command,
    std::map<std::string, std::optional<std::string>> env = {}) {
  return Start(std::move(flags), std::move(command), std::move(env)).Finish();
}

TEST(LaunchTest, FourProcessesPassABarrierAndExchangeKeys) {
  auto r = RunLaunch({"--nproc-per-node", "4", "--tee"}, {Probe(), "keys"});
  EXPECT_EQ(r.code, 0) << r.err;
  std::set<std::string> lines(r.out.begin(), r.out.end());
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(lines.count(absl::StrCat("[", i, "] rank ", i, " of 4 ok")))
        << i;
  }
}

std::map<int, std::map<std::string, std::string>> EnvByRank(
    const std::vector<std::string>& out) {
  std::map<int, std::map<std::string, std::string>> env;
  for (const std::string& line : out) {
    // "[r] env NAME=VALUE"
    int rank;
    const size_t close = line.find("] env ");
    if (line.empty() || line[0] != '[' || close == std::string::npos ||
        !absl::SimpleAtoi(line.substr(1, close - 1), &rank)) {
      continue;
    }
    std::pair<std::string, std::string> kv =
        absl::StrSplit(line.substr(close + 6), absl::MaxSplits('=', 1));
    env[rank][kv.first] = kv.second;
  }
  return env;
}

TEST(LaunchTest, EveryProcessGetsItsEnvironment) {
  auto r = RunLaunch({"--nproc-per-node", "3", "--tee"}, {Probe(), "env"},
                     {{"OMP_NUM_THREADS", std::nullopt},
                      {"CUDA_VISIBLE_DEVICES", std::nullopt}});
  ASSERT_EQ(r.code, 0) << r.err;
  auto env = EnvByRank(r.out);
  ASSERT_EQ(env.size(), 3u);
  std::set<std::string> ports;
  for (int rank = 0; rank < 3; ++rank) {
    auto& e = env[rank];
    EXPECT_EQ(e["RANK"], absl::StrCat(rank));
    EXPECT_EQ(e["LOCAL_RANK"], absl::StrCat(rank));
    EXPECT_EQ(e["WORLD_SIZE"], "3");
    EXPECT_EQ(e["LOCAL_WORLD_SIZE"], "3");
    EXPECT_EQ(e["GROUP_RANK"], "0");
    EXPECT_EQ(e["MASTER_ADDR"], "127.0.0.1");
    int port;
    EXPECT_TRUE(absl::SimpleAtoi(e["MASTER_PORT"], &port) && port > 0)
        << e["MASTER_PORT"];
    ports.insert(e["MASTER_PORT"]);
    EXPECT_TRUE(absl::StartsWith(e["SHOAL_STORE_ENDPOINT"], "ipc://"));
    EXPECT_TRUE(absl::StartsWith(e["SHOAL_KV_ENDPOINT"], "tcp://127.0.0.1:"));
    EXPECT_EQ(e["SHOAL_RESTART_COUNT"], "0");
    EXPECT_EQ(e["SHOAL_NNODES"], "1");
    EXPECT_FALSE(e["SHOAL_JOB_ID"].empty());
    EXPECT_EQ(e["OMP_NUM_THREADS"], "1");
    EXPECT_EQ(e["CUDA_VISIBLE_DEVICES"], "<unset>");
  }
  EXPECT_EQ(ports.size(), 1u) << "one MASTER_PORT for the job";
  // OMP_NUM_THREADS is kept when set; --nproc-per-node gpu gives each process
  // one GPU, mapped through the launcher's own list.
  r = RunLaunch({"--nproc-per-node", "gpu", "--tee"}, {Probe(), "env"},
                {{"OMP_NUM_THREADS", "4"}, {"CUDA_VISIBLE_DEVICES", "3,5"}});
  ASSERT_EQ(r.code, 0) << r.err;
  env = EnvByRank(r.out);
  ASSERT_EQ(env.size(), 2u);
  EXPECT_EQ(env[0]["CUDA_VISIBLE_DEVICES"], "3");
  EXPECT_EQ(env[1]["CUDA_VISIBLE_DEVICES"], "5");
  EXPECT_EQ(env[1]["OMP_NUM_THREADS"], "4");
  // No GPU visible: --nproc-per-node gpu is an error; auto falls back to CPUs.
  r = RunLaunch({"--nproc-per-node", "gpu"}, {Probe(), "env"},
                {{"CUDA_VISIBLE_DEVICES", ""}});
  EXPECT_NE(r.code, 0);
  EXPECT_TRUE(absl::StrContains(r.err, "no GPU is visible")) << r.err;
}

TEST(LaunchTest, AFailingRankStopsTheGroupWithItsCodeAndWhy) {
  const absl::Time t0 = absl::Now();
  auto r = RunLaunch({"--nproc-per-node", "3", "--stop-grace", "2"},
                     {Probe(), "fail", "1", "7"});
  EXPECT_EQ(r.code, 7);
  EXPECT_LT(absl::Now() - t0, absl::Seconds(20))
      << "the others were stopped, not waited for";
  EXPECT_TRUE(absl::StrContains(r.err, "rank 1 (local rank 1 on node 0"))
      << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "exit code 7")) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "| rank 1: giving up with 7")) << r.err;
  // Death by a signal: 128 + signal, and the signal's name.
  r = RunLaunch({"--nproc-per-node", "2", "--stop-grace", "2"},
                {Probe(), "crash", "0"});
  EXPECT_EQ(r.code, 128 + SIGSEGV);
  EXPECT_TRUE(absl::StrContains(r.err, "killed by SIGSEGV")) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "about to crash")) << r.err;
  // A command that does not exist.
  r = RunLaunch({"--nproc-per-node", "2"}, {"/no/such/program"});
  EXPECT_NE(r.code, 0);
  EXPECT_TRUE(absl::StrContains(r.err, "/no/such/program")) << r.err;
}

TEST(LaunchTest, RestartsAreCountedAndLimited) {
  // Fails on the first run only: one restart and it succeeds.
  auto r = RunLaunch({"--nproc-per-node", "2", "--max-restarts", "2", "--tee",
                      "--stop-grace", "2"},
                     {Probe(), "fail-once", "0", "3"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "restarting the group (restart 1 of 2)"))
      << r.err;
  std::set<std::string> lines(r.out.begin(), r.out.end());
  EXPECT_TRUE(lines.count("[1] rank 1 running (restart 1)"));
  // Fails every time: two restarts, then the code.
  r = RunLaunch(
      {"--nproc-per-node", "2", "--max-restarts", "2", "--stop-grace", "2"},
      {Probe(), "fail", "1", "5"});
  EXPECT_EQ(r.code, 5);
  EXPECT_TRUE(absl::StrContains(r.err, "restart 2 of 2")) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "after 2 restarts")) << r.err;
}

std::vector<pid_t> ReadPids(Launch& l, int n) {
  std::vector<pid_t> pids;
  while (static_cast<int>(pids.size()) < n) {
    auto line = l.process.ReadLine(absl::Seconds(20));
    if (!line.ok()) break;
    const size_t at = line->find("pid ");
    pid_t pid;
    if (at != std::string::npos && absl::SimpleAtoi(line->substr(at + 4), &pid))
      pids.push_back(pid);
  }
  return pids;
}

bool AllGone(const std::vector<pid_t>& pids) {
  for (pid_t p : pids) {
    if (ProcessIsAlive(p)) return false;
  }
  return true;
}

TEST(LaunchTest, ChildrenDieWithAKilledLauncher) {
  Launch l =
      Start({"--nproc-per-node", "3", "--tee"}, {Probe(), "sleep", "60"});
  std::vector<pid_t> pids = ReadPids(l, 3);
  ASSERT_EQ(pids.size(), 3u);
  l.process.Signal(SIGKILL);
  ASSERT_TRUE(l.process.Wait(absl::Seconds(10)).ok());
  EXPECT_TRUE(WaitUntil([&] { return AllGone(pids); }, absl::Seconds(2)))
      << "children outlived their launcher";
}

TEST(LaunchTest, SigtermIsForwardedAndTheLauncherExits) {
  Launch l =
      Start({"--nproc-per-node", "2", "--tee"}, {Probe(), "sleep", "60"});
  std::vector<pid_t> pids = ReadPids(l, 2);
  ASSERT_EQ(pids.size(), 2u);
  l.process.Signal(SIGTERM);
  auto r = l.Finish(absl::Seconds(20));
  EXPECT_EQ(r.code, 128 + SIGTERM) << r.err;
  EXPECT_TRUE(AllGone(pids));
}

TEST(LaunchTest, TeeAndLogDir) {
  const std::string dir =
      absl::StrCat(::testing::TempDir(), "/logs-", getpid());
  auto r = RunLaunch(
      {"--nproc-per-node", "2", "--log-dir", dir, "--stop-grace", "2"},
      {Probe(), "fail", "1", "4"});
  EXPECT_EQ(r.code, 4);
  EXPECT_TRUE(
      absl::StrContains(ReadFile(dir + "/rank1.stderr"), "giving up with 4"));
  EXPECT_TRUE(
      absl::StrContains(ReadFile(dir + "/rank0.stdout"), "rank 0 running"));
  EXPECT_FALSE(absl::StrContains(ReadFile(dir + "/rank0.stderr"), "giving up"));
}

TEST(LaunchTest, TwoNodesOnLoopback) {
  const std::string coordinator = absl::StrCat("127.0.0.1:", FreePort());
  std::vector<std::string> common = {
      "--nnodes",         "2", "--coordinator", coordinator,
      "--nproc-per-node", "2", "--tee"};
  auto flags = [&](int k) {
    std::vector<std::string> f = common;
    f.push_back("--node-rank");
    f.push_back(absl::StrCat(k));
    return f;
  };
  Launch node0 = Start(flags(0), {Probe(), "keys"});
  Launch node1 = Start(flags(1), {Probe(), "keys"});
  auto r0 = node0.Finish();
  auto r1 = node1.Finish();
  EXPECT_EQ(r0.code, 0) << r0.err;
  EXPECT_EQ(r1.code, 0) << r1.err;
  std::set<std::string> lines(r0.out.begin(), r0.out.end());
  lines.insert(r1.out.begin(), r1.out.end());
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(lines.count(absl::StrCat("[", i, "] rank ", i, " of 4 ok")))
        << i;
  }
  // A failure on node 1 stops node 0 too; both exit with its code.
  node0 = Start(flags(0), {Probe(), "fail", "3", "9"});
  node1 = Start(flags(1), {Probe(), "fail", "3", "9"});
  r0 = node0.Finish();
  r1 = node1.Finish();
  EXPECT_EQ(r0.code, 9) << r0.err;
  EXPECT_EQ(r1.code, 9) << r1.err;
  EXPECT_TRUE(absl::StrContains(r0.err, "rank 3 (local rank 1 on node 1"))
      << r0.err;
}

TEST(LaunchTest, TwoNodesInNetworkNamespaces) {
  // Each launcher in its own namespace, over 10.77.x.0/24.
  shoal::testing::NetnsPair net("shoal", 77);
  if (!net.ok())
    GTEST_SKIP()
        << "cannot create network namespaces here (needs root and iproute2)";
  const std::string coordinator = absl::StrCat(net.head_ip(), ":29411");
  auto flags = [&](int k) {
    return std::vector<std::string>{
        "--nnodes",      "2",         "--node-rank",      absl::StrCat(k),
        "--coordinator", coordinator, "--nproc-per-node", "2",
        "--tee"};
  };
  Launch node0 = Start(flags(0), {Probe(), "keys"}, {}, net.In(0));
  Launch node1 = Start(flags(1), {Probe(), "keys"}, {}, net.In(1));
  auto r0 = node0.Finish();
  auto r1 = node1.Finish();
  EXPECT_EQ(r0.code, 0) << r0.err;
  EXPECT_EQ(r1.code, 0) << r1.err;
  std::set<std::string> lines(r0.out.begin(), r0.out.end());
  lines.insert(r1.out.begin(), r1.out.end());
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(lines.count(absl::StrCat("[", i, "] rank ", i, " of 4 ok")))
        << i;
  }
}

TEST(LaunchTest, MissingNodeIsNamedAfterTheStartTimeout) {
  const std::string coordinator = absl::StrCat("127.0.0.1:", FreePort());
  auto r = RunLaunch({"--nnodes", "3", "--node-rank", "0", "--coordinator",
                      coordinator, "--start-timeout", "1"},
                     {Probe(), "barrier"});
  EXPECT_NE(r.code, 0);
  EXPECT_TRUE(absl::StrContains(r.err, "nodes 1, 2 (of 3) did not join"))
      << r.err;
}

TEST(LaunchTest, BadFlagsSayWhatToDo) {
  auto r = RunLaunch({"--nproc-per-node", "lots"}, {Probe()});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(absl::StrContains(r.err, "--nproc-per-node")) << r.err;
  r = RunLaunch({"--nnodes", "2"}, {Probe()});
  EXPECT_NE(r.code, 0);
  EXPECT_TRUE(absl::StrContains(r.err, "--coordinator")) << r.err;
}

}  // namespace
}  // namespace shoal
