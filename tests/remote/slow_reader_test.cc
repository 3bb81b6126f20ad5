// A pushed result that finds the peer's ZeroMQ queue full is kept by the
// frontend and sent when the socket is writable again: a client
// that does not read while its tasks finish, with a small receive queue and
// far more tasks in flight than the queues between it and the node hold,
// still gets every result exactly once. The node's send queue per peer is
// lowered (SHOAL_FRONTEND_SEND_HWM=20) so the overflow happens early.

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/client.h"
#include "coordinator/discovery.h"
#include "gtest/gtest.h"
#include "ipc/protocol.h"
#include "ipc/socket.h"
#include "tests/remote/remote_node.h"

namespace shoal::remote {
namespace {

constexpr int kTasks = 20000;

ipc::TaskSpec Echo(int64_t value) {
  ipc::TaskSpec t;
  t.function = "echo";
  t.args = {value};
  return t;
}

TEST(SlowReaderTest, EveryPushedResultArrivesOnceThoughItsQueueWasFull) {
  absl::StatusOr<std::unique_ptr<RemoteNode>> node =
      RemoteNode::Start({{"SHOAL_FRONTEND_SEND_HWM", "20"}});
  ASSERT_TRUE(node.ok()) << node.status();

  // The slow reader: a raw DEALER (owner's keys) whose receive side holds
  // 5 messages and a 4 KiB kernel buffer.
  ipc::SocketOptions small;
  small.recv_hwm = 5;
  absl::StatusOr<ipc::Socket> dealer =
      (*node)->RawDealer(small, /*kernel_rcvbuf=*/4096);
  ASSERT_TRUE(dealer.ok()) << dealer.status();

  // One pushed submit per task: each result is a message of its own.
  for (int i = 0; i < kTasks; ++i) {
    ipc::SubmitRequest req;
    req.tasks = {Echo(i)};
    req.push = true;
    absl::StatusOr<std::string> frame = ipc::Encode(1000 + i, req);
    ASSERT_TRUE(frame.ok());
    ASSERT_TRUE(dealer->Send(*frame).ok());
  }
  // Read nothing until the node has finished (nearly) all of them: a task
  // submitted after them by another client, through the same FIFO, is done
  // once they were all claimed, and its result was found in the same pass
  // of the frontend as theirs or after it.
  coordinator::ClientOptions o;
  o.job_id = (*node)->job();
  o.endpoint = (*node)->discovery().tcp;
  o.force_remote = true;
  o.rpc_timeout = absl::Seconds(120);
  absl::StatusOr<std::unique_ptr<coordinator::Client>> marker =
      coordinator::Client::Connect(o);
  ASSERT_TRUE(marker.ok()) << marker.status();
  absl::StatusOr<coordinator::TaskRef> last = (*marker)->Submit(Echo(-1));
  ASSERT_TRUE(last.ok()) << last.status();
  absl::StatusOr<ipc::TaskResult> r =
      (*marker)->Wait(*last, absl::Seconds(120));
  ASSERT_TRUE(r.ok()) << r.status();

  std::set<int64_t> values;
  std::set<uint64_t> request_ids;
  while (static_cast<int>(values.size()) < kTasks) {
    std::vector<std::string> frames;
    ASSERT_TRUE(dealer->Recv(&frames, absl::Seconds(30)).ok())
        << values.size() << " of " << kTasks << " results came";
    ASSERT_EQ(frames.size(), 1u);
    ipc::DecodeResult m = ipc::Decode(frames[0]);
    ASSERT_TRUE(m.envelope.ok()) << m.envelope.status();
    const auto* w = std::get_if<ipc::WaitReply>(&m.envelope->body);
    ASSERT_NE(w, nullptr) << "got " << ipc::MessageName(m.envelope->body);
    ASSERT_EQ(w->results.size(), 1u);
    const ipc::TaskResult& one = w->results[0];
    ASSERT_TRUE(one.status.ok()) << one.status;
    ASSERT_EQ(one.outputs.size(), 1u);
    const int64_t v = std::get<int64_t>(one.outputs[0]);
    EXPECT_EQ(m.envelope->request_id, static_cast<uint64_t>(1000 + v));
    ASSERT_TRUE(values.insert(v).second) << "result " << v << " came twice";
    ASSERT_TRUE(request_ids.insert(m.envelope->request_id).second);
  }
  std::vector<std::string> extra;
  EXPECT_TRUE(
      absl::IsDeadlineExceeded(dealer->Recv(&extra, absl::Milliseconds(300))))
      << "more results than tasks";
  absl::StatusOr<int> rc = (*node)->Stop();
  EXPECT_TRUE(rc.ok() && *rc == 0) << (rc.ok() ? absl::StrCat(*rc) : "");
}

}  // namespace
}  // namespace shoal::remote
