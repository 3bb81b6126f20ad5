#include "ipc/protocol.h"

#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "proto/shoal.pb.h"

namespace shoal::ipc {
namespace {

TEST(ProtocolTest, CreateRoundTrip) {
  CreateRequest req;
  req.id = ObjectId::Random();
  req.meta = TensorMeta::Contiguous(DType::kBF16, {4, 5});
  req.nbytes = 40;
  auto frame = Encode(7, req);
  ASSERT_TRUE(frame.ok()) << frame.status();
  DecodeResult r = Decode(*frame);
  ASSERT_TRUE(r.envelope.ok()) << r.envelope.status();
  EXPECT_EQ(r.envelope->request_id, 7u);
  const auto* got = std::get_if<CreateRequest>(&r.envelope->body);
  ASSERT_NE(got, nullptr);
  EXPECT_EQ(got->id, req.id);
  EXPECT_EQ(got->meta, req.meta);
  EXPECT_EQ(got->nbytes, 40u);
  EXPECT_EQ(MessageName(r.envelope->body), "create");
}

TEST(ProtocolTest, GetReplyCarriesPerObjectStatus) {
  GetReply reply;
  ObjectInfo found;
  found.id = ObjectId::Random();
  found.offset = 4096;
  found.nbytes = 16;
  found.meta = TensorMeta::Contiguous(DType::kF32, {4});
  ObjectInfo missing;
  missing.id = ObjectId::Random();
  missing.status = absl::DeadlineExceededError("not sealed in time");
  reply.objects = {found, missing};
  auto frame = Encode(1, reply);
  ASSERT_TRUE(frame.ok());
  DecodeResult r = Decode(*frame);
  ASSERT_TRUE(r.envelope.ok());
  const auto& got = std::get<GetReply>(r.envelope->body);
  ASSERT_EQ(got.objects.size(), 2u);
  EXPECT_TRUE(got.objects[0].status.ok());
  EXPECT_EQ(got.objects[0].offset, 4096u);
  EXPECT_EQ(got.objects[0].meta, found.meta);
  EXPECT_EQ(got.objects[1].status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(got.objects[1].status.message(), "not sealed in time");
}

TEST(ProtocolTest, ErrorReplyRoundTrip) {
  std::string frame = EncodeError(9, absl::ResourceExhaustedError("full"));
  DecodeResult r = Decode(frame);
  ASSERT_TRUE(r.envelope.ok());
  const auto& e = std::get<ErrorReply>(r.envelope->body);
  EXPECT_EQ(e.status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(e.status.message(), "full");
  // An OK status cannot travel as an error.
  EXPECT_FALSE(Encode(1, ErrorReply{absl::OkStatus()}).ok());
}

TEST(ProtocolTest, WrongMajorVersionIsFailedPrecondition) {
  wire::Envelope w;
  w.set_major(kProtocolMajor + 1);
  w.set_request_id(42);
  w.mutable_store_stats();
  DecodeResult r = Decode(w.SerializeAsString());
  EXPECT_EQ(r.envelope.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(r.request_id, 42u);
  EXPECT_NE(r.envelope.status().message().find("version"), std::string::npos);
}

TEST(ProtocolTest, RejectsOversizedFrames) {
  DecodeLimits limits;
  limits.max_frame_bytes = 100;
  DecodeResult r = Decode(std::string(101, 'x'), limits);
  EXPECT_EQ(r.envelope.status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(ProtocolTest, RejectsBadContent) {
  // No body.
  wire::Envelope w;
  w.set_major(kProtocolMajor);
  EXPECT_EQ(Decode(w.SerializeAsString()).envelope.status().code(),
            absl::StatusCode::kInvalidArgument);
  // Short id.
  w.mutable_sealed()->set_id("short");
  EXPECT_EQ(Decode(w.SerializeAsString()).envelope.status().code(),
            absl::StatusCode::kInvalidArgument);
  // Rank above the limit.
  w.mutable_create()->set_id(std::string(16, 'a'));
  for (int i = 0; i < kMaxRank + 1; ++i)
    w.mutable_create()->mutable_meta()->add_shape(1);
  EXPECT_EQ(Decode(w.SerializeAsString()).envelope.status().code(),
            absl::StatusCode::kInvalidArgument);
  // Too many ids.
  DecodeLimits limits;
  limits.max_ids = 2;
  w.mutable_get();
  for (int i = 0; i < 3; ++i) w.mutable_get()->add_ids(std::string(16, 'b'));
  EXPECT_EQ(Decode(w.SerializeAsString(), limits).envelope.status().code(),
            absl::StatusCode::kResourceExhausted);
  // Garbage.
  EXPECT_EQ(Decode("\xff\xff\xff\xff garbage").envelope.status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ProtocolTest, RandomBytesNeverCrash) {
  std::mt19937_64 rng(1);
  for (int i = 0; i < 20000; ++i) {
    std::string frame(rng() % 200, '\0');
    for (char& c : frame) c = static_cast<char>(rng());
    DecodeResult r = Decode(frame);
    if (r.envelope.ok()) {
      // Whatever decodes must re-encode.
      EXPECT_TRUE(Encode(*r.envelope).ok() ||
                  std::holds_alternative<CreateRequest>(r.envelope->body));
    }
  }
}

// ---- tasks
// -------------------------------------------------------------------

// Equality for Value (BytesValue, TensorValue and ObjectValue have no ==).
// Doubles compare bit for bit, so NaN and -0.0 must survive exactly.
bool SameValue(const Value& a, const Value& b) {
  if (a.index() != b.index()) return false;
  if (const auto* x = std::get_if<double>(&a)) {
    const double y = std::get<double>(b);
    return std::memcmp(x, &y, sizeof(double)) == 0;
  }
  if (const auto* x = std::get_if<BytesValue>(&a)) {
    return x->data == std::get<BytesValue>(b).data;
  }
  if (const auto* x = std::get_if<TensorValue>(&a)) {
    const auto& y = std::get<TensorValue>(b);
    return x->meta == y.meta && x->meta.strides == y.meta.strides &&
           x->data == y.data;
  }
  if (const auto* x = std::get_if<ObjectValue>(&a)) {
    const auto& y = std::get<ObjectValue>(b);
    return x->id == y.id && x->meta == y.meta && x->nbytes == y.nbytes;
  }
  if (std::holds_alternative<std::monostate>(a)) return true;
  if (const auto* x = std::get_if<bool>(&a)) return *x == std::get<bool>(b);
  if (const auto* x = std::get_if<int64_t>(&a)) {
    return *x == std::get<int64_t>(b);
  }
  return std::get<std::string>(a) == std::get<std::string>(b);
}

void ExpectSameValues(const std::vector<Value>& want,
                      const std::vector<Value>& got) {
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_TRUE(SameValue(want[i], got[i]))
        << "value " << i << ": want " << ValueKindName(want[i]) << " "
        << ValueToString(want[i]) << ", got " << ValueKindName(got[i]) << " "
        << ValueToString(got[i]);
  }
}

// Bytes of `n` elements of `elem` bytes each, a recognisable pattern.
std::string Pattern(size_t nbytes, uint8_t seed = 1) {
  std::string s(nbytes, '\0');
  for (size_t i = 0; i < nbytes; ++i) s[i] = static_cast<char>(seed + i * 7);
  return s;
}

TensorValue Tensor(TensorMeta meta) {
  TensorValue t;
  t.data = Pattern(static_cast<size_t>(meta.NumBytes()),
                   static_cast<uint8_t>(meta.dtype));
  t.meta = std::move(meta);
  return t;
}

TensorMeta Strided(DType dtype, Dims shape, Dims strides) {
  TensorMeta m = TensorMeta::Contiguous(dtype, std::move(shape));
  m.strides = std::move(strides);
  return m;
}

// One value of every kind, with edge cases of each.
std::vector<Value> EveryKindOfValue() {
  std::vector<Value> v;
  v.push_back(std::monostate{});
  v.push_back(true);
  v.push_back(false);
  v.push_back(int64_t{0});
  v.push_back(int64_t{-42});
  v.push_back(std::numeric_limits<int64_t>::min());
  v.push_back(std::numeric_limits<int64_t>::max());
  v.push_back(2.5);
  v.push_back(-0.0);
  v.push_back(std::numeric_limits<double>::infinity());
  v.push_back(std::numeric_limits<double>::quiet_NaN());
  v.push_back(std::numeric_limits<double>::denorm_min());
  v.push_back(std::string());
  v.push_back(std::string("hello, world"));
  v.push_back(std::string("caf\xc3\xa9 \xe2\x9c\x93"));  // UTF-8
  v.push_back(BytesValue{});
  v.push_back(BytesValue{std::string("\0\xff\x80raw\0", 7)});
  // Inline tensors: several dtypes and ranks, empty ones, strided ones.
  v.push_back(Tensor(TensorMeta::Contiguous(DType::kF32, {2, 3})));
  v.push_back(Tensor(TensorMeta::Contiguous(DType::kF64, {4})));
  v.push_back(Tensor(TensorMeta::Contiguous(DType::kBF16, {1, 2, 3, 4})));
  v.push_back(Tensor(TensorMeta::Contiguous(DType::kF16, {5, 1})));
  v.push_back(Tensor(TensorMeta::Contiguous(DType::kI8, {3})));
  v.push_back(Tensor(TensorMeta::Contiguous(DType::kI16, {2, 2})));
  v.push_back(Tensor(TensorMeta::Contiguous(DType::kI32, {7})));
  v.push_back(Tensor(TensorMeta::Contiguous(DType::kI64, {2, 1, 2})));
  v.push_back(Tensor(TensorMeta::Contiguous(DType::kU8, {16})));
  v.push_back(Tensor(TensorMeta::Contiguous(DType::kBool, {3, 3})));
  v.push_back(Tensor(TensorMeta::Bytes(11)));
  v.push_back(Tensor(TensorMeta::Contiguous(DType::kF32, {})));      // scalar
  v.push_back(Tensor(TensorMeta::Contiguous(DType::kF32, {0, 5})));  // empty
  v.push_back(Tensor(TensorMeta::Contiguous(
      DType::kF32, {1, 1, 1, 1, 1, 1, 1, 2})));  // rank kMaxRank
  // A transposed 3x4 (strides 1,3) and a row-skipping view (every other row).
  v.push_back(Tensor(Strided(DType::kF32, {4, 3}, {1, 4})));
  v.push_back(Tensor(Strided(DType::kI64, {2, 3}, {6, 1})));
  v.push_back(Tensor(Strided(DType::kF64, {3, 2}, {0, 1})));  // broadcast
  // Store references.
  ObjectValue o;
  o.id = ObjectId::Random();
  o.meta = TensorMeta::Contiguous(DType::kF32, {1024, 1024});
  o.nbytes = 4u << 20;
  v.push_back(o);
  ObjectValue strided_obj;
  strided_obj.id = ObjectId::Random();
  strided_obj.meta = Strided(DType::kBF16, {8, 8}, {1, 8});
  strided_obj.meta.device = Device::Cuda(3);
  strided_obj.nbytes = 128;
  v.push_back(strided_obj);
  v.push_back(ObjectValue{});  // the nil id, raw meta
  return v;
}

// Encodes `body`, decodes it back, checks the request id and name, and returns
// the decoded body as T.
template <class T>
T RoundTrip(const T& body, absl::string_view name,
            const DecodeLimits& limits = DecodeLimits()) {
  constexpr uint64_t kRequestId = 0xfeedface12345678ull;
  EXPECT_EQ(MessageName(Message(body)), name);
  auto frame = Encode(kRequestId, body);
  EXPECT_TRUE(frame.ok()) << frame.status();
  if (!frame.ok()) return T{};
  DecodeResult r = Decode(*frame, limits);
  EXPECT_TRUE(r.envelope.ok()) << r.envelope.status();
  if (!r.envelope.ok()) return T{};
  EXPECT_EQ(r.request_id, kRequestId);
  EXPECT_EQ(r.envelope->request_id, kRequestId);
  EXPECT_EQ(MessageName(r.envelope->body), name);
  const T* got = std::get_if<T>(&r.envelope->body);
  EXPECT_NE(got, nullptr) << "decoded as " << MessageName(r.envelope->body);
  return got ? *got : T{};
}

// The status code of decoding the serialised wire envelope `w`.
absl::StatusCode DecodeCode(wire::Envelope w,
                            const DecodeLimits& limits = DecodeLimits()) {
  w.set_major(kProtocolMajor);
  return Decode(w.SerializeAsString(), limits).envelope.status().code();
}

// The status code of decoding a frame made by Encode from `body`.
absl::StatusCode EncodeDecodeCode(const Message& body,
                                  const DecodeLimits& limits = DecodeLimits()) {
  auto frame = Encode(3, body);
  EXPECT_TRUE(frame.ok()) << frame.status();
  if (!frame.ok()) return absl::StatusCode::kUnknown;
  DecodeResult r = Decode(*frame, limits);
  EXPECT_EQ(r.request_id, 3u);
  return r.envelope.status().code();
}

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
  c.timeout_ms = std::numeric_limits<int64_t>::max();
  c.resources = {4096, 4096};
  m.tasks.push_back(c);

  SubmitRequest got = RoundTrip(m, "submit");
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
  m.results = {ok, failed, timed_out, not_found};

  WaitReply got = RoundTrip(m, "wait_reply");
  ASSERT_EQ(got.results.size(), m.results.size());
  for (size_t i = 0; i < m.results.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(got.results[i].task_id, m.results[i].task_id);
    EXPECT_EQ(got.results[i].status, m.results[i].status);
    EXPECT_EQ(got.results[i].attempts, m.results[i].attempts);
    ExpectSameValues(m.results[i].outputs, got.results[i].outputs);
  }
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
}

TEST(ProtocolTaskTest, EmptyRequestsRoundTrip) {
  RoundTrip(StatusRequest{}, "status");
  RoundTrip(StopRequest{}, "stop");
}

TEST(ProtocolTaskTest, NodeStatusRoundTrip) {
  NodeStatus m;
  m.job_id = "job-99";
  m.coordinator_pid = 1234;
  m.uptime_ms = 987654321;
  m.workers.push_back(
      WorkerStatus{0, 2001, "0,1", "busy", 100, 3, 1, 512ull << 20, ""});
  m.workers.push_back(WorkerStatus{1, 2002, "", "restarting", 7, 0, 5,
                                   64ull << 20, "killed by signal 9"});
  m.queued = 17;
  m.running = 2;
  m.submitted = 1000;
  m.completed = 981;
  m.store = StoreStats{1ull << 34, 1ull << 30, 12,         11,    4, 3,
                       1 << 20,    5,          1ull << 33, 65536, 2};
  m.frontend = "tcp://0.0.0.0:5555";
  m.results_held = 9;

  NodeStatus got = RoundTrip(m, "node_status");
  EXPECT_EQ(got.job_id, m.job_id);
  EXPECT_EQ(got.coordinator_pid, 1234);
  EXPECT_EQ(got.uptime_ms, 987654321);
  ASSERT_EQ(got.workers.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    SCOPED_TRACE(i);
    const WorkerStatus& a = m.workers[i];
    const WorkerStatus& b = got.workers[i];
    EXPECT_EQ(b.id, a.id);
    EXPECT_EQ(b.pid, a.pid);
    EXPECT_EQ(b.gpus, a.gpus);
    EXPECT_EQ(b.state, a.state);
    EXPECT_EQ(b.tasks_done, a.tasks_done);
    EXPECT_EQ(b.tasks_failed, a.tasks_failed);
    EXPECT_EQ(b.restarts, a.restarts);
    EXPECT_EQ(b.rss_bytes, a.rss_bytes);
    EXPECT_EQ(b.last_exit, a.last_exit);
  }
  EXPECT_EQ(got.queued, 17u);
  EXPECT_EQ(got.running, 2u);
  EXPECT_EQ(got.submitted, 1000u);
  EXPECT_EQ(got.completed, 981u);
  EXPECT_EQ(got.store.capacity_bytes, m.store.capacity_bytes);
  EXPECT_EQ(got.store.used_bytes, m.store.used_bytes);
  EXPECT_EQ(got.store.objects, m.store.objects);
  EXPECT_EQ(got.store.sealed_objects, m.store.sealed_objects);
  EXPECT_EQ(got.store.referenced_objects, m.store.referenced_objects);
  EXPECT_EQ(got.store.evictions, m.store.evictions);
  EXPECT_EQ(got.store.evicted_bytes, m.store.evicted_bytes);
  EXPECT_EQ(got.store.clients, m.store.clients);
  EXPECT_EQ(got.store.prefaulted_bytes, m.store.prefaulted_bytes);
  EXPECT_EQ(got.store.max_objects, m.store.max_objects);
  EXPECT_EQ(got.store.lock_repairs, m.store.lock_repairs);
  EXPECT_EQ(got.frontend, m.frontend);
  EXPECT_EQ(got.results_held, 9u);
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

// ---- task rejections
// ---------------------------------------------------------

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
    const int edits = 1 + rng() % 4;
    for (int e = 0; e < edits && !frame.empty(); ++e) {
      const size_t at = rng() % frame.size();
      switch (rng() % 3) {
        case 0:
          frame[at] = static_cast<char>(rng());
          break;
        case 1:
          frame.erase(at, 1 + rng() % 4);
          break;
        default:
          frame.insert(at, 1, static_cast<char>(rng()));
      }
    }
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
