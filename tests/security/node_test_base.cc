#include "tests/security/node_test_base.h"

#include <fstream>
#include <utility>
#include <variant>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "coordinator/client.h"

namespace shoal::testing {

std::string WriteClientKeys(
    absl::string_view file_name,
    std::initializer_list<const ipc::CurveKeyPair*> keys) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/", file_name);
  std::ofstream out(path);
  for (const ipc::CurveKeyPair* k : keys) out << k->public_key << "\n";
  return path;
}

void NodeTest::StartNode(std::vector<std::string> flags) {
  auto node = NodeProcess::Start(std::move(flags));
  ASSERT_TRUE(node.ok()) << node.status();
  node_ = *std::move(node);
  auto d = coordinator::ReadDiscovery(node_->job_id());
  ASSERT_TRUE(d.ok()) << d.status();
  discovery_ = *d;
}

bool NodeTest::NodeAlive() {
  return absl::IsDeadlineExceeded(
      node_->process().Wait(absl::ZeroDuration()).status());
}

void NodeTest::ExpectServesOwner(bool remote) {
  ASSERT_TRUE(NodeAlive()) << "the node exited";
  auto client = node_->Connect(remote);
  ASSERT_TRUE(client.ok()) << client.status();
  auto task = (*client)->Submit(Task("add", {int64_t{2}, int64_t{40}}));
  ASSERT_TRUE(task.ok()) << task.status();
  auto r = (*client)->Wait(*task, absl::Seconds(20));
  ASSERT_TRUE(r.ok() && r->status.ok()) << r.status();
  EXPECT_EQ(std::get<int64_t>(r->outputs.at(0)), 42);
}

uint64_t NodeTest::SubmitRaw(RawClient& raw, ipc::TaskSpec t) {
  ipc::SubmitRequest s;
  s.tasks.push_back(std::move(t));
  auto reply = raw.Call(s);
  EXPECT_TRUE(reply.ok()) << reply.status();
  if (!reply.ok()) return 0;
  return std::get<ipc::SubmitReply>(*reply).task_ids.at(0);
}

}  // namespace shoal::testing
