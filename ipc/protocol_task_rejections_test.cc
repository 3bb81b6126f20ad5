// How the coordinator's messages (ipc/protocol_tasks.cc) reject bad input:
// malformed values and task specs, limits on counts, invalid status codes, and
// randomly mutated frames.
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "ipc/protocol.h"
#include "ipc/protocol_test_util.h"
#include "proto/shoal.pb.h"

namespace shoal::ipc {
namespace {

using protocol_test::DecodeCode;
using protocol_test::EncodeDecodeCode;
using protocol_test::EveryKindOfValue;
using protocol_test::MutateBytes;
using protocol_test::Pattern;
using protocol_test::RoundTrip;
using protocol_test::Strided;
using protocol_test::Tensor;

SubmitRequest OneTask(TaskSpec t) {
  SubmitRequest m;
  m.tasks.push_back(std::move(t));
  return m;
}

TaskSpec Named(std::string function) {
  TaskSpec t;
  t.function = std::move(function);
  return t;
}

TEST(ProtocolTaskTest, RejectsInlineTensorOfWrongSize) {
  for (int delta : {-1, +1}) {
    SCOPED_TRACE(delta);
    TensorValue t = Tensor(TensorMeta::Contiguous(DType::kF32, {2, 3}));
    if (delta < 0) {
      t.data.pop_back();
    } else {
      t.data.push_back('x');
    }
    TaskSpec spec = Named("f");
    spec.args = {t};
    EXPECT_EQ(EncodeDecodeCode(OneTask(spec)),
              absl::StatusCode::kInvalidArgument);
    // The same in a result.
    TaskResult r;
    r.task_id = 1;
    r.outputs = {t};
    EXPECT_EQ(EncodeDecodeCode(WaitReply{{r}}),
              absl::StatusCode::kInvalidArgument);
  }
  // A strided tensor needs the span of its elements, not their count: a 2x2
  // view with strides (4,1) spans elements 0..5, so it needs 6 floats.
  TaskSpec spec = Named("f");
  TensorValue strided;
  strided.meta = Strided(DType::kF32, {2, 2}, {4, 1});  // span 4+1+1 = 6
  strided.data = Pattern(4 * 4);                        // 4 elements: wrong
  spec.args = {strided};
  EXPECT_EQ(EncodeDecodeCode(OneTask(spec)),
            absl::StatusCode::kInvalidArgument);
  strided.data = Pattern(6 * 4);
  spec.args = {strided};
  EXPECT_EQ(EncodeDecodeCode(OneTask(spec)), absl::StatusCode::kOk);
}

TEST(ProtocolTaskTest, RejectsInvalidInlineTensorMeta) {
  wire::Envelope w;
  auto* spec = w.mutable_submit()->add_tasks();
  spec->set_function("f");
  auto* meta = spec->add_args()->mutable_tensor()->mutable_meta();
  meta->set_dtype(99);  // unknown dtype
  EXPECT_EQ(DecodeCode(w), absl::StatusCode::kInvalidArgument);
  meta->set_dtype(static_cast<uint32_t>(DType::kF32));
  meta->add_shape(-2);  // negative dimension
  EXPECT_EQ(DecodeCode(w), absl::StatusCode::kInvalidArgument);
  meta->set_shape(0, 2);
  meta->add_strides(1);
  meta->add_strides(1);  // strides of another rank than shape
  EXPECT_EQ(DecodeCode(w), absl::StatusCode::kInvalidArgument);
}

TEST(ProtocolTaskTest, RejectsBadFunctionNames) {
  EXPECT_EQ(EncodeDecodeCode(OneTask(Named(""))),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodeDecodeCode(OneTask(Named(std::string(200, 'f')))),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodeDecodeCode(OneTask(Named(std::string(96, 'f')))),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodeDecodeCode(OneTask(Named(std::string(95, 'f')))),
            absl::StatusCode::kOk);
  EXPECT_EQ(EncodeDecodeCode(OneTask(Named("f"))), absl::StatusCode::kOk);
}

TEST(ProtocolTaskTest, RejectsNegativeTimeout) {
  TaskSpec t = Named("f");
  t.timeout_ms = -1;
  EXPECT_EQ(EncodeDecodeCode(OneTask(t)), absl::StatusCode::kInvalidArgument);
  t.timeout_ms = std::numeric_limits<int64_t>::min();
  EXPECT_EQ(EncodeDecodeCode(OneTask(t)), absl::StatusCode::kInvalidArgument);
  t.timeout_ms = 0;
  EXPECT_EQ(EncodeDecodeCode(OneTask(t)), absl::StatusCode::kOk);
}

// 2^62 ms became an overflowing nanosecond deadline in the task table.
TEST(ProtocolTaskTest, RejectsTimeoutsOverTenYearsNamingTheField) {
  TaskSpec t = Named("f");
  for (int64_t bad : {kMaxTimeoutMs + 1, int64_t{1} << 62,
                      std::numeric_limits<int64_t>::max()}) {
    SCOPED_TRACE(bad);
    t.timeout_ms = bad;
    absl::StatusOr<std::string> frame = Encode(1, OneTask(t));
    ASSERT_TRUE(frame.ok());
    DecodeResult d = Decode(*frame);
    EXPECT_EQ(d.envelope.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(d.envelope.status().message().find("timeout_ms"),
              absl::string_view::npos)
        << d.envelope.status();
    WaitRequest w{{1}, bad, 0, false};
    EXPECT_EQ(EncodeDecodeCode(w), absl::StatusCode::kInvalidArgument);
  }
  t.timeout_ms = kMaxTimeoutMs;
  EXPECT_EQ(EncodeDecodeCode(OneTask(t)), absl::StatusCode::kOk);
  EXPECT_EQ(EncodeDecodeCode(WaitRequest{{1}, -1, 0, false}),
            absl::StatusCode::kOk);
}

TEST(ProtocolTaskTest, RejectsActorRequestsOutOfRange) {
  ActorCreateRequest ok;
  ok.set_init_function("py:m:f");
  ok.set_cpus(2);
  ok.set_gpus(1);
  ok.set_max_restarts(kMaxActorRestarts);
  EXPECT_EQ(EncodeDecodeCode(ok), absl::StatusCode::kOk);
  ActorCreateRequest restarts = ok;
  restarts.set_max_restarts(kMaxActorRestarts + 1);
  EXPECT_EQ(EncodeDecodeCode(restarts), absl::StatusCode::kInvalidArgument);
  restarts.set_max_restarts(std::numeric_limits<uint32_t>::max());
  EXPECT_EQ(EncodeDecodeCode(restarts), absl::StatusCode::kInvalidArgument);
  ActorCreateRequest cpus = ok;
  cpus.set_cpus(std::numeric_limits<uint32_t>::max());
  EXPECT_EQ(EncodeDecodeCode(cpus), absl::StatusCode::kInvalidArgument);
  ActorCreateRequest pid = ok;
  pid.set_pid(-5);
  EXPECT_EQ(EncodeDecodeCode(pid), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodeDecodeCode(ClientHello{-1, "x", ""}),
            absl::StatusCode::kInvalidArgument);
}

TEST(ProtocolTaskTest, RejectsMaxRetriesOutOfRange) {
  TaskSpec t = Named("f");
  for (int32_t bad : {-2, -100, 1001, std::numeric_limits<int32_t>::max(),
                      std::numeric_limits<int32_t>::min()}) {
    SCOPED_TRACE(bad);
    t.max_retries = bad;
    EXPECT_EQ(EncodeDecodeCode(OneTask(t)), absl::StatusCode::kInvalidArgument);
  }
  for (int32_t good : {-1, 0, 3, 1000}) {
    SCOPED_TRACE(good);
    t.max_retries = good;
    EXPECT_EQ(EncodeDecodeCode(OneTask(t)), absl::StatusCode::kOk);
  }
}

TEST(ProtocolTaskTest, PythonPathRoundTripsUpToItsLimit) {
  TaskSpec t = Named("py:mod:fn");
  t.python_path = "/home/me/project:/opt/lib";
  SubmitRequest got = RoundTrip(OneTask(t), "submit");
  ASSERT_EQ(got.tasks.size(), 1u);
  EXPECT_EQ(got.tasks[0].python_path, t.python_path);
  t.python_path = std::string(kMaxPythonPathBytes, 'p');
  EXPECT_EQ(EncodeDecodeCode(OneTask(t)), absl::StatusCode::kOk);
  t.python_path.push_back('p');
  EXPECT_EQ(EncodeDecodeCode(OneTask(t)), absl::StatusCode::kInvalidArgument);
}

TEST(ProtocolTaskTest, RejectsImplausibleResources) {
  TaskSpec t = Named("f");
  t.resources = {4097, 0};
  EXPECT_EQ(EncodeDecodeCode(OneTask(t)), absl::StatusCode::kInvalidArgument);
  t.resources = {1, 4097};
  EXPECT_EQ(EncodeDecodeCode(OneTask(t)), absl::StatusCode::kInvalidArgument);
}

TEST(ProtocolTaskTest, RejectsSubmitOfNoTasks) {
  wire::Envelope w;
  w.mutable_submit();
  EXPECT_EQ(DecodeCode(w), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodeDecodeCode(SubmitRequest{}),
            absl::StatusCode::kInvalidArgument);
}

TEST(ProtocolTaskTest, RejectsTooManyTasksIdsArgsOutputs) {
  DecodeLimits limits;
  limits.max_ids = 3;
  const auto code = [&](const Message& m) {
    return EncodeDecodeCode(m, limits);
  };
  const std::vector<uint64_t> three = {1, 2, 3};
  const std::vector<uint64_t> four = {1, 2, 3, 4};

  // Tasks in one submit.
  SubmitRequest submit;
  for (int i = 0; i < 3; ++i) submit.tasks.push_back(Named("f"));
  EXPECT_EQ(code(submit), absl::StatusCode::kOk);
  submit.tasks.push_back(Named("f"));
  EXPECT_EQ(code(submit), absl::StatusCode::kResourceExhausted);

  // Task ids in every message that lists them.
  EXPECT_EQ(code(SubmitReply{three}), absl::StatusCode::kOk);
  EXPECT_EQ(code(SubmitReply{four}), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(code(WaitRequest{three}), absl::StatusCode::kOk);
  EXPECT_EQ(code(WaitRequest{four}), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(code(CancelRequest{three}), absl::StatusCode::kOk);
  EXPECT_EQ(code(CancelRequest{four}), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(code(ReleaseTasksRequest{three}), absl::StatusCode::kOk);
  EXPECT_EQ(code(ReleaseTasksRequest{four}),
            absl::StatusCode::kResourceExhausted);

  // Arguments of one task.
  TaskSpec t = Named("f");
  t.args = {int64_t{1}, int64_t{2}, int64_t{3}};
  EXPECT_EQ(code(OneTask(t)), absl::StatusCode::kOk);
  t.args.push_back(int64_t{4});
  EXPECT_EQ(code(OneTask(t)), absl::StatusCode::kResourceExhausted);

  // Results in one wait reply, and outputs of one result.
  TaskResult r;
  r.outputs = {true, false, true};
  EXPECT_EQ(code(WaitReply{{r, r, r}}), absl::StatusCode::kOk);
  EXPECT_EQ(code(WaitReply{{r, r, r, r}}),
            absl::StatusCode::kResourceExhausted);
  r.outputs.push_back(false);
  EXPECT_EQ(code(WaitReply{{r}}), absl::StatusCode::kResourceExhausted);
}

TEST(ProtocolTaskTest, RejectsObjectValueWithShortId) {
  for (size_t n : {size_t{0}, size_t{15}, size_t{17}}) {
    SCOPED_TRACE(n);
    wire::Envelope w;
    auto* spec = w.mutable_submit()->add_tasks();
    spec->set_function("f");
    auto* obj = spec->add_args()->mutable_object();
    obj->set_id(std::string(n, 'i'));
    obj->mutable_meta()->set_dtype(static_cast<uint32_t>(DType::kF32));
    obj->mutable_meta()->add_shape(4);
    obj->set_nbytes(16);
    EXPECT_EQ(DecodeCode(w), absl::StatusCode::kInvalidArgument);
    // The same as an output.
    wire::Envelope reply;
    *reply.mutable_wait_reply()->add_results()->add_outputs() = spec->args(0);
    EXPECT_EQ(DecodeCode(reply), absl::StatusCode::kInvalidArgument);
  }
  // 16 bytes is fine.
  wire::Envelope w;
  auto* spec = w.mutable_submit()->add_tasks();
  spec->set_function("f");
  spec->add_args()->mutable_object()->set_id(std::string(16, 'i'));
  EXPECT_EQ(DecodeCode(w), absl::StatusCode::kOk);
}

// Regression test. At 5215d60 (before 0f137ac), StatusFromWire
// (ipc/wire_convert.cc:15-18) returned `absl::InvalidArgumentError(...)` from a
// function returning absl::StatusOr<absl::Status>; the error became the
// StatusOr's *value*, so a TaskResult or GetReply ObjectInfo with code 99
// decoded "successfully" with status InvalidArgument("invalid status code 99")
// instead of the frame being rejected. This test failed against 5215d60.
TEST(ProtocolTaskTest, RejectsWaitReplyWithInvalidStatusCode) {
  for (int32_t code : {99, 17, -1, std::numeric_limits<int32_t>::min()}) {
    SCOPED_TRACE(code);
    wire::Envelope w;
    auto* r = w.mutable_wait_reply()->add_results();
    r->set_task_id(5);
    r->set_code(code);
    r->set_message("bogus");
    EXPECT_EQ(DecodeCode(w), absl::StatusCode::kInvalidArgument);
  }
  // The same helper decodes a GetReply's per-object status.
  {
    wire::Envelope w;
    auto* o = w.mutable_get_reply()->add_objects();
    o->set_id(std::string(16, 'g'));
    o->set_code(99);
    EXPECT_EQ(DecodeCode(w), absl::StatusCode::kInvalidArgument);
  }
  // Every real code decodes, with its message.
  for (int32_t code = 0; code <= 16; ++code) {
    SCOPED_TRACE(code);
    wire::Envelope w;
    auto* r = w.mutable_wait_reply()->add_results();
    r->set_code(code);
    r->set_message("m");
    w.set_major(kProtocolMajor);
    DecodeResult d = Decode(w.SerializeAsString());
    ASSERT_TRUE(d.envelope.ok()) << d.envelope.status();
    const auto& got = std::get<WaitReply>(d.envelope->body);
    ASSERT_EQ(got.results.size(), 1u);
    EXPECT_EQ(static_cast<int32_t>(got.results[0].status.code()), code);
  }
}

TEST(ProtocolTaskTest, RejectionsKeepTheRequestId) {
  wire::Envelope w;
  w.set_request_id(77);
  w.mutable_submit()->add_tasks();  // empty function name
  w.set_major(kProtocolMajor);
  DecodeResult r = Decode(w.SerializeAsString());
  EXPECT_EQ(r.envelope.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.request_id, 77u);
}

TEST(ProtocolTaskTest, RandomTaskFramesNeverCrash) {
  // Start from valid task frames and flip, drop and insert bytes: most
  // mutations still parse as protobuf and reach the task validation code.
  std::vector<std::string> seeds;
  TaskSpec spec = Named("py:mod:fn");
  spec.args = EveryKindOfValue();
  TaskResult result;
  result.task_id = 1;
  result.status = absl::AbortedError("x");
  result.outputs = EveryKindOfValue();
  for (const Message& m : {Message(OneTask(spec)), Message(WaitReply{{result}}),
                           Message(FetchObjectReply{Tensor(
                               TensorMeta::Contiguous(DType::kF32, {2, 2}))}),
                           Message(WorkerHello{1, 2, {"a", "b"}})}) {
    auto frame = Encode(1, m);
    ASSERT_TRUE(frame.ok());
    seeds.push_back(*frame);
  }
  std::mt19937_64 rng(7);
  int decoded = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string frame = seeds[rng() % seeds.size()];
    MutateBytes(rng, &frame);
    DecodeResult r = Decode(frame);
    if (!r.envelope.ok()) continue;
    ++decoded;
    // Whatever decodes re-encodes and decodes again to the same kind.
    auto again = Encode(*r.envelope);
    ASSERT_TRUE(again.ok()) << again.status();
    DecodeResult r2 = Decode(*again);
    if (r2.envelope.ok()) {
      EXPECT_EQ(r2.envelope->body.index(), r.envelope->body.index());
    }
  }
  EXPECT_GT(decoded, 0);
}

}  // namespace
}  // namespace shoal::ipc
