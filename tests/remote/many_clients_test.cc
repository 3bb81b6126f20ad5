// 64 concurrent remote clients, each its own peer on the node's tcp+CURVE
// frontend, each submitting tasks one call at a time and taking all their
// results: no result lost, duplicated or given to the wrong client; the
// node's connections spread over its ZeroMQ I/O threads.

#include <dirent.h>

#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "coordinator/client.h"
#include "coordinator/discovery.h"
#include "gtest/gtest.h"
#include "tests/remote/remote_node.h"
#include "tests/testing/command.h"
#include "tests/testing/test_env.h"

namespace shoal::remote {
namespace {

constexpr int kClients = 64;
constexpr int kTasksPerClient = 200;

// What one client saw: the task ids it was given and the errors, if any.
struct ClientOutcome {
  std::vector<uint64_t> task_ids;
  std::string error;  // empty: every result came back right
};

// Submits kTasksPerClient echo(tag * 100000 + i) tasks, one Submit each, then
// waits for all and checks each result is its own task's.
ClientOutcome RunClient(const std::string& job, const std::string& tcp,
                        int tag) {
  ClientOutcome out;
  coordinator::ClientOptions o;
  o.job_id = job;
  o.endpoint = tcp;
  o.force_remote = true;
  o.rpc_timeout = absl::Seconds(60);
  absl::StatusOr<std::unique_ptr<coordinator::Client>> c =
      coordinator::Client::Connect(o);
  if (!c.ok()) return {{}, c.status().ToString()};
  std::vector<coordinator::TaskRef> refs;
  for (int i = 0; i < kTasksPerClient; ++i) {
    ipc::TaskSpec t;
    t.function = "echo";
    t.args = {int64_t{tag} * 100000 + i};
    absl::StatusOr<coordinator::TaskRef> r = (*c)->Submit(std::move(t));
    if (!r.ok()) return {{}, r.status().ToString()};
    refs.push_back(*r);
    out.task_ids.push_back(r->id);
  }
  absl::StatusOr<std::vector<ipc::TaskResult>> results =
      (*c)->Wait(refs, absl::Minutes(2), 0, /*release=*/true);
  if (!results.ok()) return {out.task_ids, results.status().ToString()};
  if (results->size() != refs.size()) {
    out.error = absl::StrCat(results->size(), " results for ", refs.size());
    return out;
  }
  for (int i = 0; i < kTasksPerClient; ++i) {
    const ipc::TaskResult& r = (*results)[i];
    const int64_t want = int64_t{tag} * 100000 + i;
    const int64_t* got =
        r.outputs.size() == 1 ? std::get_if<int64_t>(&r.outputs[0]) : nullptr;
    if (r.task_id != refs[i].id || !r.status.ok() || got == nullptr ||
        *got != want) {
      out.error = absl::StrCat("task ", refs[i].id, " (", want, "): got task ",
                               r.task_id, " ", r.status.ToString());
      return out;
    }
  }
  return out;
}

// Threads of process `pid` whose name starts with `prefix`.
int ThreadsNamed(pid_t pid, const std::string& prefix) {
  const std::string dir = absl::StrCat("/proc/", pid, "/task");
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return -1;
  int n = 0;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream comm(absl::StrCat(dir, "/", e->d_name, "/comm"));
    std::string name;
    if (std::getline(comm, name) && name.rfind(prefix, 0) == 0) ++n;
  }
  closedir(d);
  return n;
}

TEST(ManyClientsTest, SixtyFourClientsGetEachOfTheirResultsOnce) {
  absl::StatusOr<std::unique_ptr<RemoteNode>> node = RemoteNode::Start();
  ASSERT_TRUE(node.ok()) << node.status();
  const std::string& job = (*node)->job();
  const coordinator::Discovery* d = &(*node)->discovery();
  // The coordinator's default (CoordinatorOptions::io_threads).
  EXPECT_EQ(ThreadsNamed((*node)->pid(), "ZMQbg/IO/"), 2);

  std::vector<ClientOutcome> outcomes(kClients);
  std::vector<std::thread> threads;
  for (int k = 0; k < kClients; ++k) {
    threads.emplace_back(
        [&, k] { outcomes[k] = RunClient(job, d->tcp, k + 1); });
  }
  for (std::thread& t : threads) t.join();

  std::set<uint64_t> all_ids;
  for (int k = 0; k < kClients; ++k) {
    EXPECT_EQ(outcomes[k].error, "") << "client " << k;
    EXPECT_EQ(outcomes[k].task_ids.size(), size_t{kTasksPerClient});
    all_ids.insert(outcomes[k].task_ids.begin(), outcomes[k].task_ids.end());
  }
  EXPECT_EQ(all_ids.size(), size_t{kClients} * kTasksPerClient)
      << "a task id was given to two submissions";
  absl::StatusOr<int> rc = (*node)->Stop();
  EXPECT_TRUE(rc.ok() && *rc == 0) << (rc.ok() ? absl::StrCat(*rc) : "");
}

TEST(ManyClientsTest, IoThreadsFlagSetsTheNodesThreads) {
  absl::StatusOr<std::unique_ptr<RemoteNode>> node =
      RemoteNode::Start({}, {"--io-threads", "1"});
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_EQ(ThreadsNamed((*node)->pid(), "ZMQbg/IO/"), 1);
  absl::StatusOr<int> rc = (*node)->Stop();
  EXPECT_TRUE(rc.ok() && *rc == 0);
  testing::CommandResult refused = testing::RunCommand(
      {testing::RunfilePath("tools/shoal"), "start", "--io-threads", "0"},
      "start");
  EXPECT_EQ(refused.code, 2) << refused.OutText();  // a usage error
  EXPECT_TRUE(absl::StrContains(refused.err,
                                "--io-threads must be between 1 and 64, got 0"))
      << refused.err;
}

}  // namespace
}  // namespace shoal::remote
