// The remote path's pipelined submission with pushed results,
// against a real `shoal start` node on its tcp+CURVE frontend:
// - 64 concurrent clients, each submitting one SubmitAsync call per task
//   through a small window, get each of their results exactly once;
// - on the wire, a pushed submit is one request and one reply (no
//   SubmitReply), and a batch gets every result once;
// - a full window makes SubmitAsync give ResourceExhausted, not queue;
// - protocol 1.2: SubmitAsync calls are coalesced into batched requests
//   (push_ids: the ids come first), a refused task fails only itself, and a
//   pushed task can be cancelled by its handle before its result;
// - protocol 1.3: a quick one-task pushed submit with ids_with_result is
//   answered by its result alone, a slow one gets its ids first.

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "coordinator/client.h"
#include "coordinator/client_pipeline.h"
#include "coordinator/discovery.h"
#include "gtest/gtest.h"
#include "ipc/curve.h"
#include "ipc/protocol.h"
#include "ipc/socket.h"
#include "tests/remote/remote_node.h"

namespace shoal::remote {
namespace {

constexpr int kClients = 64;
constexpr int kTasksPerClient = 200;

class PipelinedClientsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<RemoteNode>> node = RemoteNode::Start();
    ASSERT_TRUE(node.ok()) << node.status();
    node_ = *std::move(node);
    job_ = node_->job();
    discovery_ = node_->discovery();
  }
  void TearDown() override {
    if (node_ == nullptr) return;
    absl::StatusOr<int> rc = node_->Stop();
    EXPECT_TRUE(rc.ok() && *rc == 0) << (rc.ok() ? absl::StrCat(*rc) : "");
  }

  absl::StatusOr<std::unique_ptr<coordinator::Client>> Connect(size_t window) {
    coordinator::ClientOptions o;
    o.job_id = job_;
    o.endpoint = discovery_.tcp;
    o.force_remote = true;
    o.rpc_timeout = absl::Seconds(60);
    o.window = window;
    return coordinator::Client::Connect(o);
  }

  // A raw DEALER on the TCP frontend with the owner's CURVE keys.
  absl::StatusOr<ipc::Socket> RawDealer() { return node_->RawDealer(); }

  std::string job_;
  coordinator::Discovery discovery_;
  std::unique_ptr<RemoteNode> node_;
};

ipc::TaskSpec Echo(int64_t value) {
  ipc::TaskSpec t;
  t.function = "echo";
  t.args = {value};
  return t;
}

// Submits kTasksPerClient echo tasks, one SubmitAsync each through a window
// of 16, then takes every result; "" when each is its own task's.
std::string RunClient(coordinator::Client& c, int tag,
                      std::vector<uint64_t>* task_ids) {
  std::vector<coordinator::PendingTask> pending;
  for (int i = 0; i < kTasksPerClient; ++i) {
    absl::StatusOr<coordinator::PendingTask> p =
        c.SubmitAsync(Echo(int64_t{tag} * 100000 + i));
    if (!p.ok()) return p.status().ToString();
    pending.push_back(*p);
  }
  for (int i = 0; i < kTasksPerClient; ++i) {
    absl::StatusOr<ipc::TaskResult> r = c.Await(pending[i], absl::Minutes(2));
    if (!r.ok()) return absl::StrCat("task ", i, ": ", r.status().ToString());
    const int64_t want = int64_t{tag} * 100000 + i;
    const int64_t* got =
        r->outputs.size() == 1 ? std::get_if<int64_t>(&r->outputs[0]) : nullptr;
    if (!r->status.ok() || got == nullptr || *got != want) {
      return absl::StrCat("task ", i, " (", want, "): ", r->status.ToString());
    }
    task_ids->push_back(r->task_id);
    // A handle gives its result once.
    if (c.Await(pending[i], absl::ZeroDuration()).status().code() !=
        absl::StatusCode::kNotFound) {
      return absl::StrCat("task ", i, "'s result was given twice");
    }
  }
  return "";
}

TEST_F(PipelinedClientsTest, SixtyFourClientsGetEachOfTheirResultsOnce) {
  std::vector<std::string> errors(kClients);
  std::vector<std::vector<uint64_t>> ids(kClients);
  std::vector<std::thread> threads;
  for (int k = 0; k < kClients; ++k) {
    threads.emplace_back([&, k] {
      absl::StatusOr<std::unique_ptr<coordinator::Client>> c = Connect(16);
      errors[k] =
          c.ok() ? RunClient(**c, k + 1, &ids[k]) : c.status().ToString();
    });
  }
  for (std::thread& t : threads) t.join();
  std::set<uint64_t> all;
  for (int k = 0; k < kClients; ++k) {
    EXPECT_EQ(errors[k], "") << "client " << k;
    all.insert(ids[k].begin(), ids[k].end());
  }
  EXPECT_EQ(all.size(), size_t{kClients} * kTasksPerClient)
      << "a task ran for two submissions, or a result is missing";
}

TEST_F(PipelinedClientsTest, APushedSubmitIsOneRequestAndOneReply) {
  absl::StatusOr<ipc::Socket> dealer = RawDealer();
  ASSERT_TRUE(dealer.ok()) << dealer.status();
  ipc::SubmitRequest one;
  one.tasks = {Echo(7)};
  one.push = true;
  ipc::SubmitRequest batch;
  batch.tasks = {Echo(1), Echo(2), Echo(3), Echo(4), Echo(5)};
  batch.push = true;
  for (auto& [id, req] : std::vector<std::pair<uint64_t, ipc::SubmitRequest>>{
           {41, one}, {42, batch}}) {
    absl::StatusOr<std::string> frame = ipc::Encode(id, req);
    ASSERT_TRUE(frame.ok());
    ASSERT_TRUE(dealer->Send(*frame).ok());
  }
  // Every message back is a WaitReply of one of the two requests; the
  // results: 7 for 41, and 1..5 for 42, each once.
  std::multiset<int64_t> got41, got42;
  while (got41.size() + got42.size() < 6) {
    std::vector<std::string> frames;
    ASSERT_TRUE(dealer->Recv(&frames, absl::Seconds(30)).ok());
    ASSERT_EQ(frames.size(), 1u);
    ipc::DecodeResult d = ipc::Decode(frames[0]);
    ASSERT_TRUE(d.envelope.ok()) << d.envelope.status();
    const auto* w = std::get_if<ipc::WaitReply>(&d.envelope->body);
    ASSERT_NE(w, nullptr) << "got " << ipc::MessageName(d.envelope->body);
    ASSERT_TRUE(d.envelope->request_id == 41 || d.envelope->request_id == 42);
    for (const ipc::TaskResult& r : w->results) {
      ASSERT_TRUE(r.status.ok()) << r.status;
      ASSERT_EQ(r.outputs.size(), 1u);
      (d.envelope->request_id == 41 ? got41 : got42)
          .insert(std::get<int64_t>(r.outputs[0]));
    }
  }
  EXPECT_EQ(got41, (std::multiset<int64_t>{7}));
  EXPECT_EQ(got42, (std::multiset<int64_t>{1, 2, 3, 4, 5}));
  std::vector<std::string> extra;
  EXPECT_TRUE(
      absl::IsDeadlineExceeded(dealer->Recv(&extra, absl::Milliseconds(300))))
      << "a pushed submit got more than its results";
}

TEST_F(PipelinedClientsTest, AFullWindowIsResourceExhaustedNotAQueue) {
  coordinator::ClientOptions o;
  o.job_id = job_;
  o.endpoint = discovery_.tcp;
  o.force_remote = true;
  o.window = 2;
  o.rpc_timeout = absl::Milliseconds(300);
  absl::StatusOr<std::unique_ptr<coordinator::Client>> c =
      coordinator::Client::Connect(o);
  ASSERT_TRUE(c.ok()) << c.status();
  ipc::TaskSpec slow;
  slow.function = "sleep";
  slow.args = {2.0};
  absl::StatusOr<coordinator::PendingTask> a = (*c)->SubmitAsync(slow);
  absl::StatusOr<coordinator::PendingTask> b = (*c)->SubmitAsync(slow);
  ASSERT_TRUE(a.ok() && b.ok());
  absl::StatusOr<coordinator::PendingTask> third = (*c)->SubmitAsync(Echo(3));
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted)
      << third.status();
  // Once a result is back, a credit is free again.
  absl::StatusOr<ipc::TaskResult> ra = (*c)->Await(*a, absl::Seconds(30));
  ASSERT_TRUE(ra.ok() && ra->status.ok()) << ra.status();
  absl::StatusOr<coordinator::PendingTask> fourth = (*c)->SubmitAsync(Echo(4));
  ASSERT_TRUE(fourth.ok()) << fourth.status();
  absl::StatusOr<ipc::TaskResult> r4 = (*c)->Await(*fourth, absl::Seconds(30));
  ASSERT_TRUE(r4.ok() && r4->status.ok()) << r4.status();
  EXPECT_EQ(std::get<int64_t>(r4->outputs[0]), 4);
  EXPECT_TRUE((*c)->Await(*b, absl::Seconds(30)).ok());
}

TEST_F(PipelinedClientsTest, ARefusedPushedSubmitShowsAtAwait) {
  absl::StatusOr<std::unique_ptr<coordinator::Client>> c = Connect(8);
  ASSERT_TRUE(c.ok()) << c.status();
  // More CPUs than a worker has: the frontend refuses the submit.
  ipc::TaskSpec bad = Echo(1);
  bad.resources.cpus = 1000;
  absl::StatusOr<coordinator::PendingTask> p = (*c)->SubmitAsync(bad);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ((*c)->Await(*p, absl::Seconds(30)).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<coordinator::PendingTask> ok = (*c)->SubmitAsync(Echo(9));
  ASSERT_TRUE(ok.ok());
  absl::StatusOr<ipc::TaskResult> r = (*c)->Await(*ok, absl::Seconds(30));
  ASSERT_TRUE(r.ok() && r->status.ok()) << r.status();
}

TEST_F(PipelinedClientsTest, WithPushIdsTheIdsComeFirstThenEachResultOnce) {
  absl::StatusOr<ipc::Socket> dealer = RawDealer();
  ASSERT_TRUE(dealer.ok()) << dealer.status();
  ipc::SubmitRequest batch;
  batch.tasks = {Echo(1), Echo(2), Echo(3), Echo(4), Echo(5)};
  batch.push = true;
  batch.push_ids = true;
  absl::StatusOr<std::string> frame = ipc::Encode(43, batch);
  ASSERT_TRUE(frame.ok());
  ASSERT_TRUE(dealer->Send(*frame).ok());
  std::vector<uint64_t> ids;
  std::multiset<uint64_t> result_ids;
  std::multiset<int64_t> values;
  while (result_ids.size() < 5) {
    std::vector<std::string> frames;
    ASSERT_TRUE(dealer->Recv(&frames, absl::Seconds(30)).ok());
    ASSERT_EQ(frames.size(), 1u);
    ipc::DecodeResult d = ipc::Decode(frames[0]);
    ASSERT_TRUE(d.envelope.ok()) << d.envelope.status();
    ASSERT_EQ(d.envelope->request_id, 43u);
    if (ids.empty()) {
      const auto* r = std::get_if<ipc::SubmitReply>(&d.envelope->body);
      ASSERT_NE(r, nullptr)
          << "first came " << ipc::MessageName(d.envelope->body);
      ids = r->task_ids;
      ASSERT_EQ(ids.size(), 5u);
      continue;
    }
    const auto* w = std::get_if<ipc::WaitReply>(&d.envelope->body);
    ASSERT_NE(w, nullptr) << "got " << ipc::MessageName(d.envelope->body);
    for (const ipc::TaskResult& r : w->results) {
      ASSERT_TRUE(r.status.ok()) << r.status;
      result_ids.insert(r.task_id);
      values.insert(std::get<int64_t>(r.outputs[0]));
    }
  }
  EXPECT_EQ(result_ids, std::multiset<uint64_t>(ids.begin(), ids.end()));
  EXPECT_EQ(values, (std::multiset<int64_t>{1, 2, 3, 4, 5}));
}

// Protocol 1.3: a one-task pushed submit with ids_with_result. A task that
// finishes within the frontend's hold is answered by its result alone, which
// names its id; otherwise the ids come first, and never after the result.
// A slow task gets its ids at the hold's end and can be cancelled by them.
TEST_F(PipelinedClientsTest, IdsWithResultAnswerAQuickTaskOnce) {
  absl::StatusOr<ipc::Socket> dealer = RawDealer();
  ASSERT_TRUE(dealer.ok()) << dealer.status();
  auto next = [&]() -> absl::StatusOr<ipc::Envelope> {
    std::vector<std::string> frames;
    SHOAL_RETURN_IF_ERROR(dealer->Recv(&frames, absl::Seconds(30)));
    if (frames.size() != 1) return absl::InternalError("frames");
    ipc::DecodeResult d = ipc::Decode(frames[0]);
    SHOAL_RETURN_IF_ERROR(d.envelope.status());
    return *std::move(d.envelope);
  };
  auto one = [](ipc::TaskSpec t) {
    ipc::SubmitRequest r;
    r.tasks = {std::move(t)};
    r.push = true;
    r.push_ids = true;
    r.ids_with_result = true;
    return r;
  };
  int alone = 0;
  for (int i = 0; i < 200; ++i) {
    const uint64_t rid = 1000 + i;
    absl::StatusOr<std::string> frame = ipc::Encode(rid, one(Echo(i)));
    ASSERT_TRUE(frame.ok());
    ASSERT_TRUE(dealer->Send(*frame).ok());
    // Sequential requests: a reply to an earlier request arriving here
    // (ids after their result) fails the request id check.
    absl::StatusOr<ipc::Envelope> first = next();
    ASSERT_TRUE(first.ok()) << first.status();
    ASSERT_EQ(first->request_id, rid);
    std::optional<uint64_t> id;
    ipc::Envelope result = *std::move(first);
    if (const auto* ids = std::get_if<ipc::SubmitReply>(&result.body)) {
      ASSERT_EQ(ids->task_ids.size(), 1u);
      id = ids->task_ids[0];
      absl::StatusOr<ipc::Envelope> second = next();
      ASSERT_TRUE(second.ok()) << second.status();
      ASSERT_EQ(second->request_id, rid);
      result = *std::move(second);
    } else {
      ++alone;
    }
    const auto* w = std::get_if<ipc::WaitReply>(&result.body);
    ASSERT_NE(w, nullptr) << "got " << ipc::MessageName(result.body);
    ASSERT_EQ(w->results.size(), 1u);
    ASSERT_TRUE(w->results[0].status.ok()) << w->results[0].status;
    EXPECT_NE(w->results[0].task_id, 0u);
    if (id) {
      EXPECT_EQ(w->results[0].task_id, *id);
    }
    EXPECT_EQ(std::get<int64_t>(w->results[0].outputs[0]), i);
  }
  // Echo tasks finish in microseconds: most are answered once (at least one,
  // however loaded the machine).
  EXPECT_GT(alone, 0) << "every quick task got a submit_reply too";

  // A 5 s task: its ids come at the hold's end, long before its result.
  ipc::TaskSpec sleep;
  sleep.function = "sleep";
  sleep.args = {5.0};
  absl::StatusOr<std::string> frame = ipc::Encode(7, one(sleep));
  ASSERT_TRUE(frame.ok());
  const absl::Time sent = absl::Now();
  ASSERT_TRUE(dealer->Send(*frame).ok());
  absl::StatusOr<ipc::Envelope> first = next();
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->request_id, 7u);
  const auto* ids = std::get_if<ipc::SubmitReply>(&first->body);
  ASSERT_NE(ids, nullptr) << "first came " << ipc::MessageName(first->body);
  EXPECT_LT(absl::Now() - sent, absl::Seconds(2)) << "the ids waited";
  frame = ipc::Encode(8, ipc::CancelRequest{ids->task_ids});
  ASSERT_TRUE(frame.ok());
  ASSERT_TRUE(dealer->Send(*frame).ok());
  absl::StatusOr<ipc::Envelope> ok = next();
  ASSERT_TRUE(ok.ok()) << ok.status();
  ASSERT_EQ(ok->request_id, 8u);
  ASSERT_TRUE(std::holds_alternative<ipc::OkReply>(ok->body))
      << ipc::MessageName(ok->body);
  absl::StatusOr<ipc::Envelope> cancelled = next();
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  ASSERT_EQ(cancelled->request_id, 7u);
  const auto* w = std::get_if<ipc::WaitReply>(&cancelled->body);
  ASSERT_NE(w, nullptr) << "got " << ipc::MessageName(cancelled->body);
  ASSERT_EQ(w->results.size(), 1u);
  EXPECT_EQ(w->results[0].status.code(), absl::StatusCode::kCancelled)
      << w->results[0].status;
}

TEST_F(PipelinedClientsTest, SubmitAsyncCallsGoOutInBatchedRequests) {
  absl::StatusOr<ipc::CurveKeyPair> keys =
      ipc::ReadKeyPair(discovery_.client_key_file);
  ASSERT_TRUE(keys.ok()) << keys.status();
  ipc::RpcChannelOptions channel;
  channel.server_key = discovery_.server_key;
  channel.client_keys = *keys;
  coordinator::PipelineOptions options;
  options.window = 1024;
  options.max_batch = 64;
  options.flush_after = absl::InfiniteDuration();  // only size and Take
  absl::StatusOr<coordinator::RemotePipeline> p =
      coordinator::RemotePipeline::Connect(discovery_.tcp, channel, options);
  ASSERT_TRUE(p.ok()) << p.status();
  std::vector<uint64_t> handles;
  for (int i = 0; i < 200; ++i) {
    absl::StatusOr<uint64_t> h = p->Submit(Echo(i), absl::Seconds(30));
    ASSERT_TRUE(h.ok()) << h.status();
    handles.push_back(*h);
  }
  EXPECT_EQ(p->requests_sent(), 3u);  // 3 full batches; 8 tasks wait
  EXPECT_EQ(p->batched(), 8u);
  for (int i = 0; i < 200; ++i) {
    absl::StatusOr<ipc::TaskResult> r = p->Take(handles[i], absl::Minutes(1));
    ASSERT_TRUE(r.ok() && r->status.ok()) << i << ": " << r.status();
    EXPECT_EQ(std::get<int64_t>(r->outputs[0]), i);
  }
  EXPECT_EQ(p->requests_sent(), 4u);  // the first Take sent the last 8
  EXPECT_EQ(p->in_flight(), 0u);
  // A lone task is sent by its Take, not by a deadline (there is none here).
  absl::StatusOr<uint64_t> lone = p->Submit(Echo(77), absl::Seconds(30));
  ASSERT_TRUE(lone.ok());
  absl::StatusOr<ipc::TaskResult> r = p->Take(*lone, absl::Seconds(30));
  ASSERT_TRUE(r.ok() && r->status.ok()) << r.status();
  EXPECT_EQ(std::get<int64_t>(r->outputs[0]), 77);
}

TEST_F(PipelinedClientsTest, ARefusedTaskInABatchFailsOnlyItself) {
  coordinator::ClientOptions o;
  o.job_id = job_;
  o.endpoint = discovery_.tcp;
  o.force_remote = true;
  o.flush_after = absl::InfiniteDuration();  // the three go in one batch
  absl::StatusOr<std::unique_ptr<coordinator::Client>> c =
      coordinator::Client::Connect(o);
  ASSERT_TRUE(c.ok()) << c.status();
  ipc::TaskSpec bad = Echo(2);
  bad.resources.cpus = 1000;
  absl::StatusOr<coordinator::PendingTask> a = (*c)->SubmitAsync(Echo(1));
  absl::StatusOr<coordinator::PendingTask> b = (*c)->SubmitAsync(bad);
  absl::StatusOr<coordinator::PendingTask> d = (*c)->SubmitAsync(Echo(3));
  ASSERT_TRUE(a.ok() && b.ok() && d.ok());
  absl::StatusOr<ipc::TaskResult> ra = (*c)->Await(*a, absl::Seconds(30));
  ASSERT_TRUE(ra.ok() && ra->status.ok()) << ra.status();
  EXPECT_EQ(std::get<int64_t>(ra->outputs[0]), 1);
  EXPECT_EQ((*c)->Await(*b, absl::Seconds(30)).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<ipc::TaskResult> rd = (*c)->Await(*d, absl::Seconds(30));
  ASSERT_TRUE(rd.ok() && rd->status.ok()) << rd.status();
  EXPECT_EQ(std::get<int64_t>(rd->outputs[0]), 3);
}

TEST_F(PipelinedClientsTest, APushedTaskIsCancelledByItsHandle) {
  absl::StatusOr<std::unique_ptr<coordinator::Client>> c = Connect(16);
  ASSERT_TRUE(c.ok()) << c.status();
  ipc::TaskSpec slow;
  slow.function = "sleep";
  slow.args = {1.0};
  // Two workers busy for a second; the third task waits in the queue.
  std::vector<coordinator::PendingTask> p;
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<coordinator::PendingTask> t = (*c)->SubmitAsync(slow);
    ASSERT_TRUE(t.ok()) << t.status();
    p.push_back(*t);
  }
  absl::StatusOr<uint64_t> id = (*c)->TaskId(p[2]);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_NE(*id, 0u);
  ASSERT_TRUE((*c)->Cancel(p[2]).ok());
  absl::StatusOr<ipc::TaskResult> r = (*c)->Await(p[2], absl::Seconds(30));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->task_id, *id);
  EXPECT_EQ(r->status.code(), absl::StatusCode::kCancelled) << r->status;
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<ipc::TaskResult> s = (*c)->Await(p[i], absl::Seconds(30));
    ASSERT_TRUE(s.ok() && s->status.ok()) << s.status();
  }
  // Awaited: its handle is spent.
  EXPECT_EQ((*c)->Cancel(p[2]).code(), absl::StatusCode::kNotFound);
}

// AwaitSome (the Python client's wait): the finished ones of many handles,
// in the order given, as soon as `min_done` of them are; a refused submit's
// error is its entry; spent handles are NotFound and nothing is taken.
TEST_F(PipelinedClientsTest, AwaitSomeTakesTheFinishedOnesInOrder) {
  absl::StatusOr<std::unique_ptr<coordinator::Client>> c = Connect(64);
  ASSERT_TRUE(c.ok()) << c.status();
  ipc::TaskSpec slow;
  slow.function = "sleep";
  slow.args = {30.0};
  absl::StatusOr<coordinator::PendingTask> s = (*c)->SubmitAsync(slow);
  ASSERT_TRUE(s.ok()) << s.status();
  std::vector<coordinator::PendingTask> quick;
  for (int i = 0; i < 10; ++i) {
    absl::StatusOr<coordinator::PendingTask> t = (*c)->SubmitAsync(Echo(i));
    ASSERT_TRUE(t.ok()) << t.status();
    quick.push_back(*t);
  }
  ipc::TaskSpec bad = Echo(99);
  bad.resources.cpus = 1000;
  absl::StatusOr<coordinator::PendingTask> b = (*c)->SubmitAsync(bad);
  ASSERT_TRUE(b.ok()) << b.status();
  // The slow one first in the list, then the quick ones and the refused one:
  // all but the slow one come back, in that order.
  std::vector<coordinator::PendingTask> all = {*s};
  all.insert(all.end(), quick.begin(), quick.end());
  all.push_back(*b);
  std::vector<
      std::pair<coordinator::PendingTask, absl::StatusOr<ipc::TaskResult>>>
      got;
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (got.size() < 11 && absl::Now() < deadline) {
    std::vector<coordinator::PendingTask> left;
    for (const coordinator::PendingTask& p : all) {
      bool taken = false;
      for (const auto& g : got) taken |= g.first.handle == p.handle;
      if (!taken) left.push_back(p);
    }
    auto some = (*c)->AwaitSome(left, 11 - got.size(), absl::Seconds(1));
    ASSERT_TRUE(some.ok()) << some.status();
    for (auto& g : *some) got.push_back(std::move(g));
  }
  ASSERT_EQ(got.size(), 11u);
  for (int i = 0; i < 10; ++i) {
    ASSERT_EQ(got[i].first.handle, quick[i].handle);
    ASSERT_TRUE(got[i].second.ok() && got[i].second->status.ok());
    EXPECT_EQ(std::get<int64_t>(got[i].second->outputs[0]), i);
  }
  EXPECT_EQ(got[10].first.handle, b->handle);
  EXPECT_EQ(got[10].second.status().code(), absl::StatusCode::kInvalidArgument);
  // A spent handle among them: NotFound, and the slow one is not taken.
  EXPECT_EQ(
      (*c)->AwaitSome({*s, quick[0]}, 1, absl::ZeroDuration()).status().code(),
      absl::StatusCode::kNotFound);
  // Nothing finished yet: an empty answer at the deadline.
  auto none = (*c)->AwaitSome({*s}, 1, absl::Milliseconds(50));
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->empty());
  ASSERT_TRUE((*c)->Cancel(*s).ok());
  auto cancelled = (*c)->AwaitSome({*s}, 0, absl::Seconds(30));
  ASSERT_TRUE(cancelled.ok() && cancelled->size() == 1) << cancelled.status();
}

}  // namespace
}  // namespace shoal::remote
