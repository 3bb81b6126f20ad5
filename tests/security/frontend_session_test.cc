// A remote client's session ends with its connection
// (docs/security.md "Sessions end with their connection"): a client process
// SIGKILLed with tasks queued and running and an output object held has all
// of them freed within seconds, not at remote_result_ttl (10 minutes).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "coordinator/client.h"
#include "coordinator/discovery.h"
#include "gtest/gtest.h"
#include "tests/coordinator/node_fixture.h"

namespace shoal::security {
namespace {

using shoal::testing::NodeProcess;
using shoal::testing::Task;

absl::StatusOr<std::unique_ptr<coordinator::Client>> RemoteClient(
    const std::string& job, const std::string& tcp) {
  coordinator::ClientOptions o;
  o.job_id = job;
  o.endpoint = tcp;
  o.force_remote = true;
  return coordinator::Client::Connect(o);
}

// The child: holds a pushed result's output object (4 MiB, in the store),
// one task running and four queued, then says so on `ready` and waits to be
// killed. Exit codes > 0 say which step failed.
[[noreturn]] void RunDoomedClient(const std::string& job,
                                  const std::string& tcp, int ready) {
  auto c = RemoteClient(job, tcp);
  if (!c.ok()) _exit(2);
  auto fill = (*c)->SubmitAsync(
      Task("fill", {int64_t{1} << 20, 1.5, std::string("f32")}));
  if (!fill.ok()) _exit(3);
  auto r = (*c)->Await(*fill, absl::Seconds(30));
  if (!r.ok() || !r->status.ok() || r->outputs.size() != 1 ||
      !std::holds_alternative<ObjectValue>(r->outputs[0]))
    _exit(4);
  for (int i = 0; i < 5; ++i) {
    if (!(*c)->Submit(Task("sleep", {60.0})).ok()) _exit(5);
  }
  if (write(ready, "r", 1) != 1) _exit(6);
  while (true) pause();
}

TEST(FrontendSessionTest, AKilledClientsTasksAndOutputsAreFreedAtOnce) {
  auto node = NodeProcess::Start({"-n", "1"});
  ASSERT_TRUE(node.ok()) << node.status();
  auto d = coordinator::ReadDiscovery((*node)->job_id());
  ASSERT_TRUE(d.ok()) << d.status();
  auto watcher = RemoteClient((*node)->job_id(), d->tcp);
  ASSERT_TRUE(watcher.ok()) << watcher.status();
  auto before = (*watcher)->Status();
  ASSERT_TRUE(before.ok()) << before.status();

  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(pipe_fds[0]);
    RunDoomedClient((*node)->job_id(), d->tcp, pipe_fds[1]);
  }
  close(pipe_fds[1]);
  char byte = 0;
  const ssize_t got = read(pipe_fds[0], &byte, 1);
  close(pipe_fds[0]);
  if (got != 1) {
    int status = 0;
    waitpid(child, &status, 0);
    FAIL() << "the client child failed: exit " << WEXITSTATUS(status);
  }
  auto during = (*watcher)->Status();
  ASSERT_TRUE(during.ok()) << during.status();
  EXPECT_EQ(during->running() + during->queued(), 5u);
  EXPECT_EQ(during->store().objects(), before->store().objects() + 1);

  ASSERT_EQ(kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  // Freed within seconds (heartbeats are not needed: the kernel closes a
  // killed process's connections). Polled, as the node offers no event.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  ipc::NodeStatus after;
  while (absl::Now() < deadline) {
    auto st = (*watcher)->Status();
    ASSERT_TRUE(st.ok()) << st.status();
    after = *st;
    if (after.running() + after.queued() == 0 &&
        after.store().objects() == before->store().objects())
      break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_EQ(after.queued(), 0u) << "the dead client's queued tasks remain";
  EXPECT_EQ(after.running(), 0u) << "its running task was not cancelled";
  EXPECT_EQ(after.store().objects(), before->store().objects())
      << "the output object it held remains";
  // The node still serves others.
  auto task = (*watcher)->Submit(Task("add", {int64_t{2}, int64_t{40}}));
  ASSERT_TRUE(task.ok()) << task.status();
  auto r = (*watcher)->Wait(*task, absl::Seconds(20));
  ASSERT_TRUE(r.ok() && r->status.ok()) << r.status();
  EXPECT_EQ(std::get<int64_t>(r->outputs.at(0)), 42);
}

}  // namespace
}  // namespace shoal::security
