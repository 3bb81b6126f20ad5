// Round trips of the coordinator's messages (ipc/protocol_tasks.cc): client
// hello and welcome, submit, wait, cancel, fetch, worker hello and heartbeat,
// node status.
#include <limits>
#include <string>
#include <vector>

#include "google/protobuf/text_format.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "ipc/protocol.h"
#include "ipc/protocol_test_util.h"
#include "proto/shoal.pb.h"

namespace shoal::ipc {
namespace {

using protocol_test::DecodeCode;
using protocol_test::EncodeDecodeCode;
using protocol_test::EveryKindOfValue;
using protocol_test::ExpectSameValues;
using protocol_test::RoundTrip;
using protocol_test::SameValue;
using protocol_test::Strided;
using protocol_test::Tensor;

TEST(ProtocolTaskTest, ClientHelloRoundTrip) {
  ClientHello m{4242, "my client", "0b5d6a2e-1c44-4f0a-9d63-2a1f3c4e5d6f"};
  ClientHello got = RoundTrip(m, "client_hello");
  EXPECT_EQ(got.pid, 4242);
  EXPECT_EQ(got.name, "my client");
  EXPECT_EQ(got.boot_id, m.boot_id);
  // Defaults survive too.
  ClientHello empty = RoundTrip(ClientHello{}, "client_hello");
  EXPECT_EQ(empty.pid, 0);
  EXPECT_EQ(empty.name, "");
  EXPECT_EQ(empty.boot_id, "");
}

TEST(ProtocolTaskTest, ClientHelloFieldLimits) {
  ClientHello m{1, "n", std::string(65, 'b')};
  EXPECT_EQ(EncodeDecodeCode(m), absl::StatusCode::kResourceExhausted);
  m.boot_id = std::string(64, 'b');
  EXPECT_EQ(EncodeDecodeCode(m), absl::StatusCode::kOk);
  DecodeLimits limits;
  limits.max_string_bytes = 8;
  m.name = std::string(9, 'n');
  EXPECT_EQ(EncodeDecodeCode(m, limits), absl::StatusCode::kResourceExhausted);
  m.name = std::string(8, 'n');
  EXPECT_EQ(EncodeDecodeCode(m, limits), absl::StatusCode::kOk);
}

TEST(ProtocolTaskTest, ClientWelcomeRoundTrip) {
  ClientWelcome m;
  m.job_id = "job-7";
  m.local = true;
  m.task_segment = "/shoal-tasks-7";
  m.task_client = 13;
  m.store_endpoint = "ipc:///run/shoal/store.sock";
  m.cpus_per_worker = 4;
  m.gpus_per_worker = 2;
  ClientWelcome got = RoundTrip(m, "client_welcome");
  EXPECT_EQ(got.job_id, m.job_id);
  EXPECT_TRUE(got.local);
  EXPECT_EQ(got.task_segment, m.task_segment);
  EXPECT_EQ(got.task_client, 13u);
  EXPECT_EQ(got.store_endpoint, m.store_endpoint);
  EXPECT_EQ(got.cpus_per_worker, 4u);
  EXPECT_EQ(got.gpus_per_worker, 2u);
  // Not a field: the sender's Envelope.minor, which the client reads to
  // know what the node speaks (1.2: push_ids).
  EXPECT_EQ(got.protocol_minor, kProtocolMinor);

  ClientWelcome remote;
  remote.job_id = "job-8";
  remote.local = false;
  ClientWelcome got2 = RoundTrip(remote, "client_welcome");
  EXPECT_EQ(got2.job_id, "job-8");
  EXPECT_FALSE(got2.local);
  EXPECT_EQ(got2.task_segment, "");
  EXPECT_EQ(got2.cpus_per_worker, 1u);
  EXPECT_EQ(got2.gpus_per_worker, 0u);
}

TEST(ProtocolTaskTest, SubmitRoundTripWithEveryValueKind) {
  SubmitRequest m;
  TaskSpec a;
  a.function = "add";
  a.args = {int64_t{2}, int64_t{3}};
  m.tasks.push_back(a);
  TaskSpec b;
  b.function = "py:mymodule.sub:train_step";
  b.args = EveryKindOfValue();
  b.resources = {8, 2};
  b.timeout_ms = 12345;
  b.max_retries = 0;
  m.tasks.push_back(b);
  TaskSpec c;
  c.function = std::string(95, 'f');  // the longest allowed name
  c.max_retries = 1000;
  c.timeout_ms = kMaxTimeoutMs;  // the longest allowed
  c.resources = {4096, 4096};
  m.tasks.push_back(c);

  SubmitRequest got = RoundTrip(m, "submit");
  EXPECT_FALSE(got.push);
  EXPECT_FALSE(got.push_ids);
  EXPECT_FALSE(got.ids_with_result);
  m.push = true;
  m.push_ids = true;
  m.ids_with_result = true;
  SubmitRequest pushed = RoundTrip(m, "submit");
  EXPECT_TRUE(pushed.push);
  EXPECT_TRUE(pushed.push_ids);
  EXPECT_TRUE(pushed.ids_with_result);
  ASSERT_EQ(got.tasks.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    SCOPED_TRACE(i);
    const TaskSpec& want = m.tasks[i];
    const TaskSpec& t = got.tasks[i];
    EXPECT_EQ(t.function, want.function);
    ExpectSameValues(want.args, t.args);
    EXPECT_EQ(t.resources.cpus, want.resources.cpus);
    EXPECT_EQ(t.resources.gpus, want.resources.gpus);
    EXPECT_EQ(t.timeout_ms, want.timeout_ms);
    EXPECT_EQ(t.max_retries, want.max_retries);
  }
  // Defaults: one cpu, no gpus, no timeout, the default retries.
  EXPECT_EQ(got.tasks[0].resources.cpus, 1u);
  EXPECT_EQ(got.tasks[0].resources.gpus, 0u);
  EXPECT_EQ(got.tasks[0].timeout_ms, 0);
  EXPECT_EQ(got.tasks[0].max_retries, -1);
}

TEST(ProtocolTaskTest, SubmitZeroCpusMeansOne) {
  SubmitRequest m;
  TaskSpec t;
  t.function = "noop";
  t.resources.cpus = 0;
  m.tasks.push_back(t);
  SubmitRequest got = RoundTrip(m, "submit");
  ASSERT_EQ(got.tasks.size(), 1u);
  EXPECT_EQ(got.tasks[0].resources.cpus, 1u);
}

TEST(ProtocolTaskTest, SubmitReplyRoundTrip) {
  SubmitReply m{{1, 2, 0xffffffffffffffffull, 1ull << 40}};
  SubmitReply got = RoundTrip(m, "submit_reply");
  EXPECT_EQ(got.task_ids, m.task_ids);
}

TEST(ProtocolTaskTest, WaitRequestRoundTrip) {
  WaitRequest m{{5, 6, 7}, 2500, 2, true};
  WaitRequest got = RoundTrip(m, "wait");
  EXPECT_EQ(got.task_ids, m.task_ids);
  EXPECT_EQ(got.timeout_ms, 2500);
  EXPECT_EQ(got.min_done, 2u);
  EXPECT_TRUE(got.release);

  WaitRequest forever{{9}, -1, 0, false};
  WaitRequest got2 = RoundTrip(forever, "wait");
  EXPECT_EQ(got2.task_ids, std::vector<uint64_t>{9});
  EXPECT_EQ(got2.timeout_ms, -1);
  EXPECT_EQ(got2.min_done, 0u);
  EXPECT_FALSE(got2.release);
}

TEST(ProtocolTaskTest, WaitReplyRoundTrip) {
  WaitReply m;
  TaskResult ok;
  ok.task_id = 11;
  ok.outputs = EveryKindOfValue();
  ok.attempts = 1;
  TaskResult failed;
  failed.task_id = 12;
  failed.status = absl::InternalError("worker 3 died: signal 9");
  failed.attempts = 4;
  TaskResult timed_out;
  timed_out.task_id = 13;
  timed_out.status = absl::DeadlineExceededError("");
  timed_out.outputs = {std::string("partial"), int64_t{7}};
  TaskResult not_found;
  not_found.task_id = 14;
  not_found.status = absl::UnauthenticatedError("the highest code");
  TaskResult raised;  // a Python exception: its fields beside the status
  raised.task_id = 15;
  raised.status = absl::UnknownError("ValueError: bad\nTraceback ...");
  raised.exception = TaskException{
      "builtins.ValueError", "bad\nTraceback (most recent call last):\n",
      "Traceback (most recent call last):\n  File \"t.py\", line 3\n",
      std::string("\x80\x05pickled\0bytes", 15)};
  m.results = {ok, failed, timed_out, not_found, raised};

  WaitReply got = RoundTrip(m, "wait_reply");
  ASSERT_EQ(got.results.size(), m.results.size());
  for (size_t i = 0; i < m.results.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(got.results[i].task_id, m.results[i].task_id);
    EXPECT_EQ(got.results[i].status, m.results[i].status);
    EXPECT_EQ(got.results[i].attempts, m.results[i].attempts);
    EXPECT_EQ(got.results[i].exception, m.results[i].exception);
    ExpectSameValues(m.results[i].outputs, got.results[i].outputs);
  }
  EXPECT_FALSE(got.results[1].exception.has_value());
  ASSERT_TRUE(got.results[4].exception.has_value());
  EXPECT_EQ(got.results[4].exception->message,
            "bad\nTraceback (most recent call last):\n");
  EXPECT_TRUE(got.results[0].status.ok());
  EXPECT_EQ(got.results[1].status.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(got.results[1].status.message(), "worker 3 died: signal 9");

  // No results at all.
  WaitReply none = RoundTrip(WaitReply{}, "wait_reply");
  EXPECT_TRUE(none.results.empty());
}

TEST(ProtocolTaskTest, CancelAndReleaseTasksRoundTrip) {
  CancelRequest c{{3, 1, 4, 1, 5}};
  EXPECT_EQ(RoundTrip(c, "cancel").task_ids, c.task_ids);
  ReleaseTasksRequest r{{9, 2, 6}};
  EXPECT_EQ(RoundTrip(r, "release_tasks").task_ids, r.task_ids);
}

// Regression test. At 5215d60 (before 0f137ac), BodyToWire (ipc/protocol.cc)
// created the SubmitReply, CancelRequest and ReleaseTasksRequest bodies only
// inside the loop over ids, so an empty list encoded as an Envelope with no
// body: Encode succeeded and Decode rejected the frame ("message has no body").
// This test failed against 5215d60.
TEST(ProtocolTaskTest, EmptyIdListsRoundTrip) {
  EXPECT_TRUE(RoundTrip(SubmitReply{}, "submit_reply").task_ids.empty());
  EXPECT_TRUE(RoundTrip(CancelRequest{}, "cancel").task_ids.empty());
  EXPECT_TRUE(
      RoundTrip(ReleaseTasksRequest{}, "release_tasks").task_ids.empty());
  EXPECT_TRUE(RoundTrip(WaitRequest{}, "wait").task_ids.empty());
}

TEST(ProtocolTaskTest, FetchObjectRoundTrip) {
  FetchObjectRequest req{ObjectId::Random()};
  EXPECT_EQ(RoundTrip(req, "fetch_object").id, req.id);

  for (const TensorMeta& meta :
       {TensorMeta::Contiguous(DType::kF32, {3, 5}),
        TensorMeta::Contiguous(DType::kI64, {}), TensorMeta::Bytes(0),
        Strided(DType::kF16, {4, 2}, {1, 4})}) {
    SCOPED_TRACE(meta.ToString());
    FetchObjectReply reply{Tensor(meta)};
    FetchObjectReply got = RoundTrip(reply, "fetch_object_reply");
    EXPECT_TRUE(SameValue(Value(reply.tensor), Value(got.tensor)));
  }
}

TEST(ProtocolTaskTest, FetchObjectRejectsBadIdAndSizeMismatch) {
  wire::Envelope w;
  w.mutable_fetch_object()->set_id(std::string(15, 'x'));
  EXPECT_EQ(DecodeCode(w), absl::StatusCode::kInvalidArgument);

  FetchObjectReply reply{Tensor(TensorMeta::Contiguous(DType::kF32, {4}))};
  reply.tensor.data.pop_back();
  EXPECT_EQ(EncodeDecodeCode(reply), absl::StatusCode::kInvalidArgument);
}

TEST(ProtocolTaskTest, WorkerHelloRoundTrip) {
  WorkerHello m{7, 31337, {"add", "echo", "py:pkg.mod:fn", ""}};
  WorkerHello got = RoundTrip(m, "worker_hello");
  EXPECT_EQ(got.worker_id, 7u);
  EXPECT_EQ(got.pid, 31337);
  EXPECT_EQ(got.functions, m.functions);

  WorkerHello none = RoundTrip(WorkerHello{1, 2, {}}, "worker_hello");
  EXPECT_EQ(none.worker_id, 1u);
  EXPECT_EQ(none.pid, 2);
  EXPECT_TRUE(none.functions.empty());
}

TEST(ProtocolTaskTest, WorkerHelloTooManyFunctions) {
  DecodeLimits limits;
  limits.max_ids = 3;
  WorkerHello m{1, 2, {"a", "b", "c"}};
  EXPECT_EQ(EncodeDecodeCode(m, limits), absl::StatusCode::kOk);
  m.functions.push_back("d");
  EXPECT_EQ(EncodeDecodeCode(m, limits), absl::StatusCode::kResourceExhausted);
}

TEST(ProtocolTaskTest, WorkerHeartbeatRoundTrip) {
  WorkerHeartbeat m{12, 1ull << 50};
  WorkerHeartbeat got = RoundTrip(m, "worker_heartbeat");
  EXPECT_EQ(got.worker_id, 12u);
  EXPECT_EQ(got.tasks_done, 1ull << 50);
  EXPECT_FALSE(got.blocked);
  m.blocked = true;  // a task of it waits for tasks (nested tasks)
  EXPECT_TRUE(RoundTrip(m, "worker_heartbeat").blocked);
}

TEST(ProtocolTaskTest, EmptyRequestsRoundTrip) {
  RoundTrip(StatusRequest{}, "status");
  RoundTrip(StopRequest{}, "stop");
}

TEST(ProtocolTaskTest, NodeStatusRoundTrip) {
  // A plain record (ipc/messages.h): the generated class itself, so every
  // field, present and future, must come back equal.
  NodeStatus m;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      R"pb(
        job_id: "job-99"
        coordinator_pid: 1234
        uptime_ms: 987654321
        workers {
          id: 0
          pid: 2001
          gpus: "0,1"
          state: "busy"
          tasks_done: 100
          tasks_failed: 3
          restarts: 1
          rss_bytes: 536870912
        }
        workers {
          id: 1
          pid: 2002
          state: "restarting"
          tasks_done: 7
          restarts: 5
          rss_bytes: 67108864
          last_exit: "killed by signal 9"
        }
        queued: 17
        running: 2
        submitted: 1000
        completed: 981
        store {
          capacity_bytes: 17179869184
          used_bytes: 1073741824
          objects: 12
          sealed_objects: 11
          referenced_objects: 4
          evictions: 3
          evicted_bytes: 1048576
          clients: 5
          prefaulted_bytes: 8589934592
          max_objects: 65536
          lock_repairs: 2
        }
        frontend: "tcp://0.0.0.0:5555"
        results_held: 9
      )pb",
      &m));
  NodeStatus got = RoundTrip(m, "node_status");
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(got, m))
      << got.DebugString();
}

TEST(ProtocolTaskTest, MessageNamesOfTaskMessages) {
  EXPECT_EQ(MessageName(ClientHello{}), "client_hello");
  EXPECT_EQ(MessageName(ClientWelcome{}), "client_welcome");
  EXPECT_EQ(MessageName(SubmitRequest{}), "submit");
  EXPECT_EQ(MessageName(SubmitReply{}), "submit_reply");
  EXPECT_EQ(MessageName(WaitRequest{}), "wait");
  EXPECT_EQ(MessageName(WaitReply{}), "wait_reply");
  EXPECT_EQ(MessageName(CancelRequest{}), "cancel");
  EXPECT_EQ(MessageName(ReleaseTasksRequest{}), "release_tasks");
  EXPECT_EQ(MessageName(FetchObjectRequest{}), "fetch_object");
  EXPECT_EQ(MessageName(FetchObjectReply{}), "fetch_object_reply");
  EXPECT_EQ(MessageName(WorkerHello{}), "worker_hello");
  EXPECT_EQ(MessageName(WorkerHeartbeat{}), "worker_heartbeat");
  EXPECT_EQ(MessageName(StatusRequest{}), "status");
  EXPECT_EQ(MessageName(NodeStatus{}), "node_status");
  EXPECT_EQ(MessageName(StopRequest{}), "stop");
}

TEST(ProtocolTaskTest, ActorMessagesRoundTrip) {
  ActorCreateRequest c;
  c.set_init_function("py:shoal._actor:_init");
  c.set_init(std::string("\x80\x05\0pickle", 10));
  c.set_python_path("/a:/b");
  c.set_cpus(2);
  c.set_gpus(1);
  c.set_max_restarts(3);
  c.set_detached(true);
  c.set_pid(1234);
  c.set_name("Counter");
  ActorCreateRequest got = RoundTrip(c, "actor_create");
  EXPECT_EQ(got.SerializeAsString(), c.SerializeAsString());
  ActorCreateReply r;
  r.set_actor_id(5);
  r.set_worker_id(9);
  EXPECT_EQ(RoundTrip(r, "actor_create_reply").worker_id(), 9u);
  ActorKillRequest k;
  k.set_actor_id(5);
  EXPECT_EQ(RoundTrip(k, "actor_kill").actor_id(), 5u);
}

}  // namespace
}  // namespace shoal::ipc
