// A real node (`shoal start`: coordinator, store, 2 worker processes) driven
// by clients in this process and in child processes.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/process_info.h"
#include "base/runtime_dir.h"
#include "coordinator/client.h"
#include "coordinator/discovery.h"
#include "gtest/gtest.h"
#include "ipc/curve.h"
#include "ipc/protocol.h"
#include "ipc/socket.h"
#include "proto/shoal.pb.h"
#include "tests/coordinator/node_fixture.h"
#include "tests/testing/test_env.h"

namespace shoal {
namespace {

using coordinator::Client;
using coordinator::TaskRef;
using shoal::testing::NodeProcess;
using shoal::testing::Task;
using shoal::testing::WaitUntil;

class NodeTest : public ::testing::Test {
 protected:
  void SetUp() override { StartNode({}); }

  void StartNode(std::vector<std::string> flags, SubprocessOptions o = {}) {
    client_.reset();
    node_.reset();
    auto node = NodeProcess::Start(std::move(flags), o);
    ASSERT_TRUE(node.ok()) << node.status();
    node_ = *std::move(node);
    auto client = node_->Connect();
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }

  ipc::NodeStatus Status() {
    auto s = client_->Status();
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *s : ipc::NodeStatus{};
  }

  std::string TempPath(const std::string& name) {
    return absl::StrCat(::testing::TempDir(), "/", node_->job_id(), "-", name);
  }

  std::unique_ptr<NodeProcess> node_;
  std::unique_ptr<Client> client_;
};

TEST_F(NodeTest, ManyTasksOverTwoWorkersGiveCorrectResults) {
  ASSERT_TRUE(client_->local());
  std::vector<ipc::TaskSpec> tasks;
  for (int64_t i = 0; i < 3000; ++i)
    tasks.push_back(Task("add", {i, int64_t{1000}}));
  auto refs = client_->Submit(std::move(tasks));
  ASSERT_TRUE(refs.ok()) << refs.status();
  auto results = client_->Wait(*refs, absl::Seconds(60));
  ASSERT_TRUE(results.ok()) << results.status();
  ASSERT_EQ(results->size(), 3000u);
  for (int64_t i = 0; i < 3000; ++i) {
    ASSERT_TRUE((*results)[i].status.ok()) << (*results)[i].status;
    ASSERT_EQ(std::get<int64_t>((*results)[i].outputs.at(0)), i + 1000);
  }
  // Tensors: inline and through the store (both directions), zero-copy reads.
  std::vector<float> big(100000, 2.0f);  // 400 KB: travels as a store object
  TensorValue t{
      TensorMeta::Contiguous(DType::kF32, {100000}),
      std::string(reinterpret_cast<const char*>(big.data()), big.size() * 4)};
  auto scaled = client_->Submit(Task("scale", {t, 1.5}));
  ASSERT_TRUE(scaled.ok());
  auto r = client_->Wait(*scaled, absl::Seconds(30));
  ASSERT_TRUE(r.ok() && r->status.ok()) << (r.ok() ? r->status : r.status());
  const auto* obj = std::get_if<ObjectValue>(&r->outputs.at(0));
  ASSERT_NE(obj, nullptr) << "a 400 KB output travels through the store";
  auto view = client_->store()->Get(obj->id);
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(reinterpret_cast<const float*>(view->data)[99999], 3.0f);
  ASSERT_TRUE(client_->store()->Release(obj->id).ok());
  client_->ReleaseOutputs(*r);
  auto sum =
      client_->Wait(*client_->Submit(Task("sum", {t})), absl::Seconds(30));
  ASSERT_TRUE(sum.ok() && sum->status.ok());
  EXPECT_DOUBLE_EQ(std::get<double>(sum->outputs.at(0)), 200000.0);
  // Both workers take part: eight 50 ms tasks in one batch (3000 no-ops may
  // all go to one worker on a loaded machine, done before the other wakes).
  std::vector<ipc::TaskSpec> naps;
  for (int i = 0; i < 8; ++i) naps.push_back(Task("sleep", {0.05}));
  auto nap_refs = client_->Submit(std::move(naps));
  ASSERT_TRUE(nap_refs.ok()) << nap_refs.status();
  auto napped = client_->Wait(*nap_refs, absl::Seconds(60));
  ASSERT_TRUE(napped.ok()) << napped.status();
  for (const ipc::TaskResult& n : *napped)
    ASSERT_TRUE(n.status.ok()) << n.status;
  ipc::NodeStatus st = Status();
  ASSERT_EQ(st.workers().size(), 2u);
  EXPECT_GT(st.workers(0).tasks_done(), 0u);
  EXPECT_GT(st.workers(1).tasks_done(), 0u);
}

TEST_F(NodeTest, RemoteClientThroughTheFrontend) {
  auto remote = node_->Connect(/*remote=*/true);
  ASSERT_TRUE(remote.ok()) << remote.status();
  EXPECT_FALSE((*remote)->local());
  std::vector<ipc::TaskSpec> tasks;
  for (int64_t i = 0; i < 200; ++i)
    tasks.push_back(Task("add", {i, int64_t{1}}));
  auto refs = (*remote)->Submit(std::move(tasks));
  ASSERT_TRUE(refs.ok()) << refs.status();
  auto results = (*remote)->Wait(*refs, absl::Seconds(30));
  ASSERT_TRUE(results.ok());
  ASSERT_EQ(results->size(), 200u);
  EXPECT_EQ(std::get<int64_t>((*results)[199].outputs[0]), 200);
  // A large output comes back as an object the remote client fetches.
  auto big =
      (*remote)->Wait(*(*remote)->Submit(Task("fill", {int64_t{50000}, 7.0})),
                      absl::Seconds(30));
  ASSERT_TRUE(big.ok() && big->status.ok());
  const auto* obj = std::get_if<ObjectValue>(&big->outputs.at(0));
  ASSERT_NE(obj, nullptr);
  auto bytes = (*remote)->Fetch(obj->id);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(bytes->data.size(), 200000u);
  EXPECT_EQ(reinterpret_cast<const float*>(bytes->data.data())[49999], 7.0f);
  // Unknown functions are refused up front on this path once the frontend
  // has heard a worker's hello (its list of functions). The tasks above may
  // all have run before that hello was handled (a loaded machine), and then
  // the worker refuses the task instead: either way the caller gets NotFound
  // naming the function.
  auto unknown = (*remote)->Submit(Task("no_such_function"));
  absl::Status refused = unknown.status();
  if (unknown.ok()) {
    auto r = (*remote)->Wait(*unknown, absl::Seconds(30));
    ASSERT_TRUE(r.ok()) << r.status();
    refused = r->status;
  }
  EXPECT_EQ(refused.code(), absl::StatusCode::kNotFound) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), "no_such_function"))
      << refused;
}

TEST_F(NodeTest, UnknownFunctionFailsWithTheList) {
  auto r = client_->Wait(*client_->Submit(Task("no_such_function")),
                         absl::Seconds(30));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status.code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(r->status.message(), "noop")) << r->status;
  auto failing =
      client_->Wait(*client_->Submit(Task("fail", {std::string("on purpose")})),
                    absl::Seconds(30));
  ASSERT_TRUE(failing.ok());
  EXPECT_EQ(failing->status.code(), absl::StatusCode::kUnknown);
  EXPECT_EQ(failing->status.message(), "on purpose");
  // Resource requests no worker can satisfy are refused at submit.
  ipc::TaskSpec gpu = Task("noop");
  gpu.resources.gpus = 1;
  EXPECT_EQ(client_->Submit(gpu).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(NodeTest, WorkerKilledMidTaskIsRestartedAndTheTaskRetried) {
  const std::string marker = TempPath("pid");
  auto ref = client_->Submit(Task("signal_me", {marker, 30.0}));
  ASSERT_TRUE(ref.ok());
  ASSERT_TRUE(WaitUntil([&] { return access(marker.c_str(), F_OK) == 0; },
                        absl::Seconds(20)));
  pid_t victim = 0;
  {
    std::ifstream in(marker);
    in >> victim;
  }
  ASSERT_GT(victim, 0);
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  auto r = client_->Wait(*ref, absl::Seconds(30));
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->status.ok()) << r->status;
  EXPECT_EQ(std::get<int64_t>(r->outputs.at(0)), 2) << "ran a second time";
  EXPECT_EQ(r->attempts, 2u);
  // The worker came back, and status shows the restart and how it died.
  EXPECT_TRUE(WaitUntil(
      [&] {
        ipc::NodeStatus st = Status();
        for (const ipc::WorkerStatus& w : st.workers()) {
          if (w.restarts() == 1 &&
              absl::StrContains(w.last_exit(), "SIGKILL") && w.pid() != 0 &&
              w.pid() != victim) {
            return true;
          }
        }
        return false;
      },
      absl::Seconds(20)));
}

TEST_F(NodeTest, TaskThatAlwaysCrashesFailsAfterMaxRetries) {
  ipc::TaskSpec t = Task("crash");
  t.max_retries = 2;
  auto r = client_->Wait(*client_->Submit(t), absl::Seconds(60));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status.code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(absl::StrContains(r->status.message(), "SIGABRT")) << r->status;
  EXPECT_EQ(r->attempts, 3u);
  // A task that crashes once succeeds on its retry.
  auto once =
      client_->Wait(*client_->Submit(Task("crash_once", {TempPath("crash")})),
                    absl::Seconds(60));
  ASSERT_TRUE(once.ok());
  ASSERT_TRUE(once->status.ok()) << once->status;
  EXPECT_EQ(std::get<int64_t>(once->outputs.at(1)), 2);
}

TEST_F(NodeTest, CancelQueuedAndRunningAndTimeouts) {
  // Occupy both workers, then queue one more.
  auto a = client_->Submit(Task("sleep", {30.0}));
  auto b = client_->Submit(Task("sleep", {30.0}));
  ASSERT_TRUE(
      WaitUntil([&] { return Status().running() == 2; }, absl::Seconds(20)));
  auto queued = client_->Submit(Task("noop"));
  ASSERT_TRUE(client_->Cancel(*queued).ok());
  auto rq = client_->Wait(*queued, absl::Seconds(5));
  ASSERT_TRUE(rq.ok());
  EXPECT_EQ(rq->status.code(), absl::StatusCode::kCancelled);
  // Running: the function sees the cancellation and stops.
  const absl::Time t0 = absl::Now();
  ASSERT_TRUE(client_->Cancel(*a).ok());
  ASSERT_TRUE(client_->Cancel(*b).ok());
  auto ra = client_->Wait(*a, absl::Seconds(10));
  ASSERT_TRUE(ra.ok());
  EXPECT_EQ(ra->status.code(), absl::StatusCode::kCancelled);
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
  // A timeout the function honours: DeadlineExceeded.
  ipc::TaskSpec slow = Task("sleep", {30.0});
  slow.timeout_ms = 300;
  auto rt = client_->Wait(*client_->Submit(slow), absl::Seconds(20));
  ASSERT_TRUE(rt.ok());
  EXPECT_EQ(rt->status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(absl::StrContains(rt->status.message(), "300 ms")) << rt->status;
  // A timeout the function ignores: its worker is killed and restarted, the
  // task fails with DeadlineExceeded (not retried).
  ipc::TaskSpec stuck = Task("hang", {60.0});
  stuck.timeout_ms = 200;
  auto rs = client_->Wait(*client_->Submit(stuck), absl::Seconds(30));
  ASSERT_TRUE(rs.ok());
  EXPECT_EQ(rs->status.code(), absl::StatusCode::kDeadlineExceeded)
      << rs->status;
  EXPECT_EQ(rs->attempts, 1u);
  EXPECT_TRUE(WaitUntil(
      [&] {
        uint32_t restarts = 0;
        const ipc::NodeStatus st = Status();  // workers() refers into it
        for (const ipc::WorkerStatus& w : st.workers())
          restarts += w.restarts();
        return restarts == 1;
      },
      absl::Seconds(20)));
}

// Speaks raw ZeroMQ to the frontend.
class RawFrontend {
 public:
  explicit RawFrontend(const std::string& endpoint) {
    socket_ = *ipc::Socket::Create(ZMQ_DEALER);
    EXPECT_TRUE(socket_.Connect(endpoint).ok());
  }
  // The reply's status (OK for a non-error reply).
  absl::Status Roundtrip(const std::string& frame) {
    EXPECT_TRUE(socket_.Send(frame).ok());
    std::vector<std::string> reply;
    absl::Status s = socket_.Recv(&reply, absl::Seconds(20));
    if (!s.ok())
      return absl::InternalError(absl::StrCat("no reply: ", s.message()));
    ipc::DecodeLimits limits;
    limits.max_frame_bytes = 128 << 20;
    ipc::DecodeResult d = ipc::Decode(reply.at(0), limits);
    if (!d.envelope.ok()) return absl::InternalError("undecodable reply");
    if (auto* e = std::get_if<ipc::ErrorReply>(&d.envelope->body))
      return e->status;
    return absl::OkStatus();
  }

 private:
  ipc::Socket socket_;
};

TEST_F(NodeTest, BadRequestsGetErrorRepliesAndTheCoordinatorStaysUp) {
  RawFrontend raw(node_->frontend());
  EXPECT_EQ(raw.Roundtrip("\x01\x02 not protobuf").code(),
            absl::StatusCode::kInvalidArgument);
  wire::Envelope w;
  w.set_major(ipc::kProtocolMajor + 1);
  w.mutable_status();
  EXPECT_EQ(raw.Roundtrip(w.SerializeAsString()).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(raw.Roundtrip(std::string((64 << 20) + 10, 'x')).code(),
            absl::StatusCode::kResourceExhausted);
  ipc::SubmitRequest unknown;
  unknown.tasks.push_back(Task("no_such_function"));
  // Workers report their functions in their hello; give them a moment.
  EXPECT_TRUE(WaitUntil([&] { return Status().workers().size() == 2; },
                        absl::Seconds(5)));
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_EQ(raw.Roundtrip(*ipc::Encode(1, unknown)).code(),
            absl::StatusCode::kNotFound);
  ipc::SubmitRequest huge_name;
  huge_name.tasks.push_back(Task(std::string(500, 'f')));
  EXPECT_EQ(raw.Roundtrip(*ipc::Encode(2, huge_name)).code(),
            absl::StatusCode::kInvalidArgument);
  ipc::WaitRequest bogus;
  bogus.task_ids = {12345};
  bogus.timeout_ms = 0;
  EXPECT_EQ(raw.Roundtrip(*ipc::Encode(3, bogus)).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(raw.Roundtrip(*ipc::Encode(4, ipc::StoreStatsRequest{})).code(),
            absl::StatusCode::kInvalidArgument);
  for (int i = 0; i < 500; ++i) {
    std::string junk(static_cast<size_t>(i % 97), static_cast<char>(i * 37));
    EXPECT_FALSE(raw.Roundtrip(junk).ok());
  }
  // Still serving.
  auto r =
      client_->Wait(*client_->Submit(Task("add", {int64_t{1}, int64_t{2}})),
                    absl::Seconds(10));
  ASSERT_TRUE(r.ok() && r->status.ok());
  EXPECT_TRUE(node_->process().running());
}

TEST_F(NodeTest, ClientThatDiesHoldingResultsHasThemFreed) {
  const ipc::NodeStatus before = Status();
  // A child process: connects, runs tasks with large outputs, keeps the
  // results, reports, and waits to be killed.
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const std::string job = node_->job_id();
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    coordinator::ClientOptions o;
    o.job_id = job;
    auto c = Client::Connect(o);
    if (!c.ok()) _exit(2);
    std::vector<TaskRef> refs;
    for (int i = 0; i < 5; ++i) {
      auto r = (*c)->Submit(Task("fill", {int64_t{100000}, 1.0}));
      if (!r.ok()) _exit(3);
      refs.push_back(*r);
    }
    // Wait without releasing: the results (and their store objects) are held.
    auto results = (*c)->Wait(refs, absl::Seconds(30), 0, /*release=*/false);
    if (!results.ok() || results->size() != 5) _exit(4);
    // Also leave one task queued behind a long one.
    (void)(*c)->Submit(Task("sleep", {30.0}));
    (void)(*c)->Submit(Task("sleep", {30.0}));
    (void)(*c)->Submit(Task("noop"));
    ssize_t unused = write(fds[1], "x", 1);
    (void)unused;
    pause();
    _exit(0);
  }
  close(fds[1]);
  char c;
  ASSERT_EQ(read(fds[0], &c, 1), 1);
  close(fds[0]);
  EXPECT_TRUE(WaitUntil([&] { return Status().results_held() >= 5; },
                        absl::Seconds(10)));
  EXPECT_GE(Status().store().objects(), before.store().objects() + 5);
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  EXPECT_TRUE(WaitUntil(
      [&] {
        ipc::NodeStatus st = Status();
        return st.results_held() == 0 && st.queued() == 0 &&
               st.running() == 0 &&
               st.store().objects() == before.store().objects() &&
               st.store().used_bytes() == before.store().used_bytes();
      },
      absl::Seconds(20)))
      << "held " << Status().results_held() << " objects "
      << Status().store().objects();
}

TEST_F(NodeTest, CoordinatorKilledTakesItsWorkersAndLeavesNothingStale) {
  const ipc::NodeStatus st = Status();
  std::vector<pid_t> workers;
  for (const ipc::WorkerStatus& w : st.workers()) workers.push_back(w.pid());
  ASSERT_EQ(workers.size(), 2u);
  const std::string old_job = node_->job_id();
  client_.reset();
  node_->process().Signal(SIGKILL);
  ASSERT_TRUE(node_->process().Wait(absl::Seconds(10)).ok());
  const absl::Time killed = absl::Now();
  EXPECT_TRUE(WaitUntil(
      [&] {
        for (pid_t p : workers) {
          if (ProcessIsAlive(p)) return false;
        }
        return true;
      },
      absl::Seconds(2)))
      << "workers outlived their coordinator";
  EXPECT_LT(absl::Now() - killed, absl::Seconds(2));
  // Its janitor removes the segments with no later start needed
  // (coordinator/janitor.h).
  EXPECT_TRUE(WaitUntil(
      [&] {
        return !shoal::testing::ShmExists(
                   absl::StrCat("shoal-", old_job, "-store")) &&
               !shoal::testing::ShmExists(
                   absl::StrCat("shoal-", old_job, "-tasks"));
      },
      absl::Seconds(10)))
      << "the killed node's segments are still in /dev/shm";
  // The next start sweeps what else the killed one left (its folder).
  StartNode({});
  EXPECT_FALSE(
      shoal::testing::ShmExists(absl::StrCat("shoal-", old_job, "-store")));
  EXPECT_FALSE(
      shoal::testing::ShmExists(absl::StrCat("shoal-", old_job, "-tasks")));
  struct stat sb;
  EXPECT_NE(stat(absl::StrCat(RuntimeRoot(), "/", old_job).c_str(), &sb), 0)
      << "the dead job's runtime folder (sockets) is gone";
  // And a clean stop removes its own.
  const std::string job = node_->job_id();
  client_.reset();
  auto status = node_->Stop();
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(*status, 0) << DescribeWaitStatus(*status);
  EXPECT_FALSE(
      shoal::testing::ShmExists(absl::StrCat("shoal-", job, "-store")));
  EXPECT_FALSE(
      shoal::testing::ShmExists(absl::StrCat("shoal-", job, "-tasks")));
  EXPECT_FALSE(coordinator::ReadDiscovery(job).ok());
}

TEST_F(NodeTest, WorkersSeeOnlyTheirGpus) {
  SubprocessOptions o;
  o.env["CUDA_VISIBLE_DEVICES"] = "3,5";
  StartNode({"--gpus-per-worker", "1"}, o);
  std::set<std::string> seen;
  ipc::TaskSpec t = Task("getenv", {std::string("CUDA_VISIBLE_DEVICES")});
  t.resources.gpus = 1;
  // Keep both workers busy at once so each reports.
  std::vector<ipc::TaskSpec> tasks;
  for (int i = 0; i < 40; ++i) tasks.push_back(t);
  auto results = client_->Wait(*client_->Submit(tasks), absl::Seconds(30));
  ASSERT_TRUE(results.ok());
  for (const ipc::TaskResult& r : *results) {
    ASSERT_TRUE(r.status.ok()) << r.status;
    seen.insert(std::get<std::string>(r.outputs.at(0)));
  }
  EXPECT_TRUE(seen.count("3") || seen.count("5"));
  for (const std::string& s : seen) EXPECT_TRUE(s == "3" || s == "5") << s;
  ipc::NodeStatus st = Status();
  ASSERT_EQ(st.workers().size(), 2u);
  EXPECT_EQ(st.workers(0).gpus(), "3");
  EXPECT_EQ(st.workers(1).gpus(), "5");
  // UUIDs pass through verbatim; asking for more than exist fails at start.
  client_.reset();
  node_.reset();
  SubprocessOptions uuids;
  uuids.env["CUDA_VISIBLE_DEVICES"] =
      "GPU-8f6c3a2e-1b2c-4d5e-9f00-112233445566";
  auto node = NodeProcess::Start({"-n", "1", "--gpus-per-worker", "1"}, uuids);
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_EQ((*node)->Connect().value()->Status()->workers(0).gpus(),
            "GPU-8f6c3a2e-1b2c-4d5e-9f00-112233445566");
  node->reset();
  SubprocessOptions two;
  two.env["CUDA_VISIBLE_DEVICES"] = "0,1";
  auto too_many =
      NodeProcess::Start({"-n", "2", "--gpus-per-worker", "2"}, two);
  EXPECT_FALSE(too_many.ok());
  SubprocessOptions none;
  none.env["CUDA_VISIBLE_DEVICES"] = "";
  auto empty = NodeProcess::Start({"-n", "1", "--gpus-per-worker", "1"}, none);
  EXPECT_FALSE(empty.ok());
}

}  // namespace
}  // namespace shoal

namespace shoal {
namespace {

TEST(NodeCurveTest, OffLoopbackNeedsCurveAndAdmitsOnlyListedKeys) {
  const std::string dir = ::testing::TempDir();
  // Without keys or --insecure: refused at start, saying what to do.
  auto refused = shoal::testing::NodeProcess::Start({"--bind", "0.0.0.0:0"});
  ASSERT_FALSE(refused.ok());
  // With a client key admitted.
  auto allowed = ipc::GenerateCurveKeyPair();
  auto stranger = ipc::GenerateCurveKeyPair();
  ASSERT_TRUE(allowed.ok() && stranger.ok());
  const std::string allowed_file = absl::StrCat(dir, "/allowed.key");
  const std::string stranger_file = absl::StrCat(dir, "/stranger.key");
  unlink(allowed_file.c_str());
  unlink(stranger_file.c_str());
  ASSERT_TRUE(ipc::WriteKeyPair(allowed_file, *allowed).ok());
  ASSERT_TRUE(ipc::WriteKeyPair(stranger_file, *stranger).ok());
  const std::string list = absl::StrCat(dir, "/clients.txt");
  std::ofstream(list) << "# admitted\n" << allowed->public_key << "\n";
  auto node = shoal::testing::NodeProcess::Start(
      {"--bind", "0.0.0.0:0", "--client-keys", list});
  ASSERT_TRUE(node.ok()) << node.status();
  auto d = coordinator::ReadDiscovery((*node)->job_id());
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->server_key.empty());
  const std::string port = d->tcp.substr(d->tcp.rfind(':'));
  coordinator::ClientOptions o;
  o.endpoint = absl::StrCat("tcp://127.0.0.1", port);
  o.server_key = d->server_key;
  o.force_remote = true;
  o.rpc_timeout = absl::Seconds(2);
  o.client_key_file = allowed_file;
  auto good = coordinator::Client::Connect(o);
  ASSERT_TRUE(good.ok()) << good.status();
  ipc::TaskSpec add;
  add.function = "add";
  add.args = {int64_t{20}, int64_t{22}};
  auto r = (*good)->Wait(*(*good)->Submit(add), absl::Seconds(10));
  ASSERT_TRUE(r.ok() && r->status.ok());
  EXPECT_EQ(std::get<int64_t>(r->outputs[0]), 42);
  o.client_key_file = stranger_file;
  auto bad = coordinator::Client::Connect(o);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kPermissionDenied)
      << bad.status();
  coordinator::ClientOptions plain;
  plain.endpoint = o.endpoint;
  // Not the owner's job: no keys are found for it (the owner's own client
  // would find them through the discovery file and be admitted).
  plain.job_id = "no-such-job";
  plain.force_remote = true;
  plain.rpc_timeout = absl::Seconds(2);
  auto no_curve = coordinator::Client::Connect(plain);
  EXPECT_FALSE(no_curve.ok());
}

}  // namespace
}  // namespace shoal
