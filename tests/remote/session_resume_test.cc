// No result is lost to a slow reader or a broken connection (docs/protocol.md,
// "Sessions"; docs/security.md): a resumable session keeps every pushed
// result until its client acknowledges it, resends what a closed connection
// lost when the client is back, and a client whose session the node no
// longer knows is told so.
//
// - A reader that pipelines 512 fills (64 KiB of results each, 32 MiB in
//   all) and reads nothing for 13 s, with a tiny receive queue: every result
//   arrives, once. (Before sessions, the node's ZMTP heartbeat closed such a
//   connection while the client was not reading and the results libzmq held
//   for it were lost with no error: 256-399 of 512 in 5 of 8 trials.)
// - The C++ client's pipeline behind a proxy that cuts every connection
//   mid-pipeline, again and again: every result arrives once and each task
//   ran once (disabled: see the test).
// - A client whose session ended (the proxy held it off longer than
//   --resume-grace-ms) gets the session-reset error on its pending tasks,
//   not silence; a new session then works.
#include <unistd.h>

#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "coordinator/client.h"
#include "coordinator/discovery.h"
#include "gtest/gtest.h"
#include "ipc/messages.h"
#include "ipc/protocol.h"
#include "ipc/session_seq.h"
#include "ipc/socket.h"
#include "tests/remote/remote_node.h"
#include "tests/remote/tcp_proxy.h"

namespace shoal::remote {
namespace {

constexpr int kFills = 512;
constexpr int64_t kFillElements = int64_t{1} << 14;  // f32: 64 KiB each

ipc::TaskSpec Task(std::string function, std::vector<Value> args) {
  ipc::TaskSpec t;
  t.function = std::move(function);
  t.args = std::move(args);
  return t;
}

// Sends `body` on a raw resumable session.
absl::Status SendOn(ipc::Socket& s, uint64_t session,
                    const ipc::SessionSeq& seq, uint64_t request_id,
                    ipc::Message body) {
  ipc::Envelope e{request_id, std::move(body)};
  e.session = session;
  e.ack = seq.ack();
  absl::StatusOr<std::string> frame = ipc::Encode(e);
  if (!frame.ok()) return frame.status();
  return s.Send(*frame);
}

// The bytes of a fill's output, whether it came inline or as a store object
// (then only its size is known here).
uint64_t OutputBytes(const Value& v) {
  if (const auto* t = std::get_if<TensorValue>(&v)) return t->data.size();
  if (const auto* o = std::get_if<ObjectValue>(&v)) return o->nbytes;
  return 0;
}

TEST(SessionResumeTest, ThirteenSecondsWithoutReadingLosesNoResult) {
  absl::StatusOr<std::unique_ptr<RemoteNode>> node = RemoteNode::Start();
  ASSERT_TRUE(node.ok()) << node.status();
  // The slow reader: a raw DEALER (owner's keys) whose receive side holds 5
  // messages and a 4 KiB kernel buffer, so that it stops reading its
  // connection (heartbeats included) almost at once.
  ipc::SocketOptions small;
  small.recv_hwm = 5;
  absl::StatusOr<ipc::Socket> dealer =
      (*node)->RawDealer(small, /*kernel_rcvbuf=*/4096);
  ASSERT_TRUE(dealer.ok()) << dealer.status();
  ipc::SessionSeq seq;
  ipc::ClientHello hello;
  hello.pid = getpid();
  hello.name = "slow reader";
  hello.resumable = true;
  ASSERT_TRUE(SendOn(*dealer, 0, seq, 1, hello).ok());
  std::vector<std::string> frames;
  ASSERT_TRUE(dealer->Recv(&frames, absl::Seconds(20)).ok());
  ipc::DecodeResult welcome = ipc::Decode(frames.at(0));
  ASSERT_TRUE(welcome.envelope.ok()) << welcome.envelope.status();
  const auto* w = std::get_if<ipc::ClientWelcome>(&welcome.envelope->body);
  ASSERT_NE(w, nullptr) << ipc::MessageName(welcome.envelope->body);
  ASSERT_NE(w->session, 0u);
  const uint64_t session = w->session;
  ASSERT_TRUE(seq.Accept(welcome.envelope->seq));

  // 512 pushed fills, one request each (request id 1000 + i, value i).
  for (int i = 0; i < kFills; ++i) {
    ipc::SubmitRequest req;
    req.tasks = {Task(
        "fill", {kFillElements, static_cast<double>(i), std::string("f32")})};
    req.push = true;
    ASSERT_TRUE(SendOn(*dealer, session, seq, 1000 + i, req).ok());
  }
  absl::SleepFor(absl::Seconds(13));

  // Now it reads, acknowledging as it goes and when nothing comes (after a
  // reconnect the node resends when it hears from the session).
  std::set<uint64_t> got;
  uint64_t bytes = 0, duplicates = 0;
  const absl::Time deadline = absl::Now() + absl::Seconds(120);
  while (static_cast<int>(got.size()) < kFills && absl::Now() < deadline) {
    absl::Status r = dealer->Recv(&frames, absl::Seconds(1));
    if (absl::IsDeadlineExceeded(r)) {
      ASSERT_TRUE(SendOn(*dealer, session, seq, 0, ipc::SessionAck{}).ok());
      continue;
    }
    ASSERT_TRUE(r.ok()) << r;
    ASSERT_EQ(frames.size(), 1u);
    ipc::DecodeResult m = ipc::Decode(frames[0]);
    ASSERT_TRUE(m.envelope.ok()) << m.envelope.status();
    if (!seq.Accept(m.envelope->seq)) {
      ++duplicates;
      continue;
    }
    const auto* e = std::get_if<ipc::ErrorReply>(&m.envelope->body);
    ASSERT_EQ(e, nullptr) << "request " << m.envelope->request_id << ": "
                          << e->status;
    const auto* reply = std::get_if<ipc::WaitReply>(&m.envelope->body);
    ASSERT_NE(reply, nullptr) << ipc::MessageName(m.envelope->body);
    ASSERT_EQ(reply->results.size(), 1u);
    const ipc::TaskResult& one = reply->results[0];
    ASSERT_TRUE(one.status.ok()) << one.status;
    ASSERT_EQ(one.outputs.size(), 1u);
    const uint64_t request = m.envelope->request_id;
    ASSERT_GE(request, 1000u);
    ASSERT_LT(request, 1000u + kFills);
    ASSERT_TRUE(got.insert(request).second)
        << "the result of request " << request << " came twice";
    EXPECT_EQ(OutputBytes(one.outputs[0]), uint64_t{4} * kFillElements);
    if (const auto* t = std::get_if<TensorValue>(&one.outputs[0])) {
      float first = 0;
      std::memcpy(&first, t->data.data(), sizeof(first));
      EXPECT_EQ(first, static_cast<float>(request - 1000));
    }
    bytes += OutputBytes(one.outputs[0]);
    if (seq.unreported() >= 32) {
      ASSERT_TRUE(SendOn(*dealer, session, seq, 0, ipc::SessionAck{}).ok());
      seq.MarkReported();
    }
  }
  EXPECT_EQ(got.size(), static_cast<size_t>(kFills))
      << kFills - static_cast<int>(got.size()) << " results lost";
  std::cout << got.size() << " of " << kFills << " results (" << bytes
            << " bytes), " << duplicates << " duplicates dropped\n";
  absl::StatusOr<int> rc = (*node)->Stop();
  EXPECT_TRUE(rc.ok() && *rc == 0) << (rc.ok() ? absl::StrCat(*rc) : "");
}

class ProxiedTest : public ::testing::Test {
 protected:
  void StartNode(std::vector<std::string> flags = {}) {
    absl::StatusOr<std::unique_ptr<RemoteNode>> node =
        RemoteNode::Start({}, std::move(flags));
    ASSERT_TRUE(node.ok()) << node.status();
    node_ = *std::move(node);
    absl::StatusOr<std::unique_ptr<TcpProxy>> proxy =
        TcpProxy::Start(node_->discovery().tcp);
    ASSERT_TRUE(proxy.ok()) << proxy.status();
    proxy_ = *std::move(proxy);
  }

  // A remote client of the owner's through the proxy.
  absl::StatusOr<std::unique_ptr<coordinator::Client>> Connect() {
    coordinator::ClientOptions o;
    o.job_id = node_->job();
    o.endpoint = proxy_->endpoint();
    o.server_key = node_->discovery().server_key;
    o.client_key_file = node_->discovery().client_key_file;
    o.force_remote = true;
    o.rpc_timeout = absl::Seconds(30);
    return coordinator::Client::Connect(o);
  }

  std::unique_ptr<RemoteNode> node_;
  std::unique_ptr<TcpProxy> proxy_;
};

// Connections cut while submits are in flight, while results are on their
// way and while half of them are read: a request written to a connection
// that breaks before the node reads it goes again (the node says which it
// has when it finds the session on the new connection), a reply goes again
// until acknowledged, and each task runs exactly once.
TEST_F(ProxiedTest, ConnectionsCutMidPipelineLoseNoResult) {
  StartNode();
  absl::StatusOr<std::unique_ptr<coordinator::Client>> client = Connect();
  ASSERT_TRUE(client.ok()) << client.status();
  constexpr int kRounds = 5, kPerRound = 600;
  int64_t next = 0;
  int cuts = 0;  // cuts that closed a connection
  auto cut = [&] { cuts += proxy_->CutOnceConnected(absl::Seconds(5)) > 0; };
  for (int round = 0; round < kRounds; ++round) {
    std::vector<std::pair<int64_t, coordinator::PendingTask>> pending;
    for (int i = 0; i < kPerRound; ++i, ++next) {
      absl::StatusOr<coordinator::PendingTask> t =
          (*client)->SubmitAsync(Task("echo", {next}));
      ASSERT_TRUE(t.ok()) << t.status();
      pending.emplace_back(next, *t);
      if (i == kPerRound / 3) cut();  // submits in flight
    }
    ASSERT_TRUE((*client)->Flush().ok());
    cut();  // results on their way
    for (int i = 0; i < kPerRound; ++i) {
      if (i == kPerRound / 2) cut();  // half of them read
      absl::StatusOr<ipc::TaskResult> r =
          (*client)->Await(pending[i].second, absl::Seconds(60));
      if (!r.ok()) {
        // Which side lost it: a task the node never saw was a request lost
        // on a cut connection; one it saw, a reply.
        absl::StatusOr<ipc::NodeStatus> st = (*client)->Status();
        FAIL() << "task " << pending[i].first << ": " << r.status()
               << "; the node saw "
               << (st.ok() ? absl::StrCat(st->submitted()) : "?") << " of the "
               << next << " tasks submitted";
      }
      ASSERT_TRUE(r->status.ok()) << r->status;
      ASSERT_EQ(r->outputs.size(), 1u);
      EXPECT_EQ(std::get<int64_t>(r->outputs[0]), pending[i].first);
      // Given once: the handle is spent.
      EXPECT_TRUE(absl::IsNotFound(
          (*client)->Await(pending[i].second, absl::ZeroDuration()).status()));
    }
  }
  EXPECT_EQ(cuts, kRounds * 3) << "a cut found no connection to close";
  // Each task ran once: nothing was submitted twice.
  absl::StatusOr<ipc::NodeStatus> st = (*client)->Status();
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->submitted(), static_cast<uint64_t>(kRounds * kPerRound));
  std::cout << kRounds * kPerRound << " results through " << proxy_->forwarded()
            << " connections (" << proxy_->cut() << " cut)\n";
}

TEST_F(ProxiedTest, ASessionTheNodeForgotIsAnErrorNotSilence) {
  StartNode({"--resume-grace-ms", "200"});
  absl::StatusOr<std::unique_ptr<coordinator::Client>> client = Connect();
  ASSERT_TRUE(client.ok()) << client.status();
  std::vector<coordinator::PendingTask> pending;
  for (int i = 0; i < 4; ++i) {
    absl::StatusOr<coordinator::PendingTask> t =
        (*client)->SubmitAsync(Task("sleep", {2.0}));
    ASSERT_TRUE(t.ok()) << t.status();
    pending.push_back(*t);
  }
  ASSERT_TRUE((*client)->Flush().ok());
  // Both workers are busy with them: the results are not back yet.
  absl::SleepFor(absl::Milliseconds(300));
  proxy_->SetDown(true);
  proxy_->CutAll();
  // Far longer than the grace (and the frontend's 100 ms tick).
  absl::SleepFor(absl::Seconds(2));
  proxy_->SetDown(false);
  const absl::Time start = absl::Now();
  for (const coordinator::PendingTask& t : pending) {
    absl::StatusOr<ipc::TaskResult> r = (*client)->Await(t, absl::Seconds(30));
    ASSERT_FALSE(r.ok()) << "a result of a session the node forgot";
    EXPECT_TRUE(ipc::IsSessionReset(r.status())) << r.status();
    EXPECT_EQ(r.status().code(), absl::StatusCode::kAborted) << r.status();
  }
  // Told within the pipeline's acknowledgement period, not at a timeout.
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  // A new session works.
  absl::StatusOr<std::unique_ptr<coordinator::Client>> again = Connect();
  ASSERT_TRUE(again.ok()) << again.status();
  absl::StatusOr<coordinator::TaskRef> t =
      (*again)->Submit(Task("add", {int64_t{2}, int64_t{40}}));
  ASSERT_TRUE(t.ok()) << t.status();
  absl::StatusOr<ipc::TaskResult> r = (*again)->Wait(*t, absl::Seconds(20));
  ASSERT_TRUE(r.ok() && r->status.ok()) << r.status();
  EXPECT_EQ(std::get<int64_t>(r->outputs.at(0)), 42);
}

}  // namespace
}  // namespace shoal::remote
