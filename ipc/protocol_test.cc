// The envelope on the wire (versions, frame limits, error replies, garbage)
// and the store's messages (ipc/protocol_store.cc).
#include "ipc/protocol.h"

#include <optional>
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

TEST(ProtocolTest, SessionFieldsAndResetRoundTrip) {
  Envelope e{7, SessionAck{}};
  e.session = 0x1234567890abcdefu;
  e.ack = 99;
  e.seq = 100;
  absl::StatusOr<std::string> frame = Encode(e);
  ASSERT_TRUE(frame.ok());
  DecodeResult r = Decode(*frame);
  ASSERT_TRUE(r.envelope.ok()) << r.envelope.status();
  EXPECT_EQ(r.envelope->session, e.session);
  EXPECT_EQ(r.envelope->ack, 99u);
  EXPECT_EQ(r.envelope->seq, 100u);
  EXPECT_EQ(r.envelope->minor, kProtocolMinor);
  EXPECT_TRUE(std::holds_alternative<SessionAck>(r.envelope->body));
  // A session reset travels as ErrorReply.session_reset.
  DecodeResult reset = Decode(EncodeError(
      3, MarkSessionReset(absl::AbortedError("session 5 is not known"))));
  ASSERT_TRUE(reset.envelope.ok());
  const absl::Status& st = std::get<ErrorReply>(reset.envelope->body).status;
  EXPECT_EQ(st.code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(IsSessionReset(st));
  EXPECT_FALSE(IsSessionReset(absl::AbortedError("a task crashed")));
  // PutObject.
  PutObjectRequest put;
  put.tensor.meta = TensorMeta::Bytes(3);
  put.tensor.data = "abc";
  absl::StatusOr<std::string> pf = Encode(1, put);
  ASSERT_TRUE(pf.ok());
  DecodeResult pr = Decode(*pf);
  ASSERT_TRUE(pr.envelope.ok()) << pr.envelope.status();
  EXPECT_EQ(std::get<PutObjectRequest>(pr.envelope->body).tensor.data, "abc");
  put.tensor.data = "abcd";  // does not match its meta
  EXPECT_EQ(Decode(*Encode(1, put)).envelope.status().code(),
            absl::StatusCode::kInvalidArgument);
}

// An error reply to a frame that does not decode names its request id when
// the frame's leading fields carry one; an empty frame is not a message.
TEST(ProtocolTest, UndecodableFramesKeepTheirRequestId) {
  wire::Envelope w;
  w.set_major(kProtocolMajor);
  w.set_minor(kProtocolMinor);
  w.set_request_id(4242);
  w.mutable_status();
  std::string frame = w.SerializeAsString();
  frame += "\xff\xff\xff";  // a broken field after the id
  DecodeResult r = Decode(frame);
  EXPECT_EQ(r.envelope.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.request_id, 4242u);
  DecodeResult empty = Decode("");
  EXPECT_EQ(empty.envelope.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(empty.request_id, 0u);
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
  // The reply to an oversized frame carries its request id.
  SubmitRequest big;
  big.tasks.emplace_back();
  big.tasks.back().function = std::string(200, 'f');
  auto frame = Encode(Envelope{77, big});
  ASSERT_TRUE(frame.ok());
  r = Decode(*frame, limits);
  EXPECT_EQ(r.envelope.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(r.request_id, 77u);
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

// PeekEnvelope reads what Decode would: the header fields, the body's
// field, and how many tasks or ids it lists (packed or not).
TEST(ProtocolTest, PeekReadsTheHeadWithoutTheBody) {
  SubmitRequest submit;
  submit.tasks.resize(3);
  for (TaskSpec& t : submit.tasks) t.function = "noop";
  Envelope e{41, submit};
  e.session = 7;
  e.ack = 5;
  e.seq = 6;
  absl::StatusOr<std::string> frame = Encode(e);
  ASSERT_TRUE(frame.ok());
  std::optional<EnvelopeHead> head = PeekEnvelope(*frame);
  ASSERT_TRUE(head.has_value());
  EXPECT_EQ(head->major, kProtocolMajor);
  EXPECT_EQ(head->minor, kProtocolMinor);
  EXPECT_EQ(head->request_id, 41u);
  EXPECT_EQ(head->session, 7u);
  EXPECT_EQ(head->ack, 5u);
  EXPECT_EQ(head->seq, 6u);
  EXPECT_EQ(head->body_field, wire::Envelope::kSubmitFieldNumber);
  EXPECT_EQ(head->items, 3u);

  WaitRequest wait;
  wait.task_ids = {1, 300, uint64_t{1} << 40, 4};
  head = PeekEnvelope(*Encode(2, wait));
  ASSERT_TRUE(head.has_value());
  EXPECT_EQ(head->body_field, wire::Envelope::kWaitFieldNumber);
  EXPECT_EQ(head->items, 4u);
  // Unpacked ids count the same.
  wire::Envelope w;
  w.set_major(kProtocolMajor);
  w.set_request_id(3);
  std::string unpacked = w.SerializeAsString();
  std::string body;
  for (uint64_t id : {9, 10}) {
    body += '\x08';  // field 1, varint
    body += static_cast<char>(id);
  }
  unpacked +=
      static_cast<char>((wire::Envelope::kCancelFieldNumber << 3 | 2) | 0x80);
  unpacked += static_cast<char>(wire::Envelope::kCancelFieldNumber >> 4);
  unpacked += static_cast<char>(body.size());
  unpacked += body;
  head = PeekEnvelope(unpacked);
  ASSERT_TRUE(head.has_value());
  EXPECT_EQ(head->body_field, wire::Envelope::kCancelFieldNumber);
  EXPECT_EQ(head->items, 2u);
  CancelRequest cancel =
      std::get<CancelRequest>(Decode(unpacked).envelope->body);
  EXPECT_EQ(cancel.task_ids, (std::vector<uint64_t>{9, 10}));

  head = PeekEnvelope(*Encode(Envelope{8, SessionAck{}}));
  ASSERT_TRUE(head.has_value());
  EXPECT_EQ(head->body_field, kSessionAckField);
  EXPECT_EQ(head->items, 0u);
  // What does not scan.
  EXPECT_FALSE(PeekEnvelope("\xff\xff\xff\xff garbage").has_value());
  std::string cut = *Encode(e);
  cut.resize(cut.size() - 1);
  EXPECT_FALSE(PeekEnvelope(cut).has_value());
}

// Whatever decodes, PeekEnvelope reads alike; nothing makes it crash.
TEST(ProtocolTest, PeekAgreesWithDecodeOnRandomFrames) {
  std::mt19937_64 rng(2);
  std::vector<std::string> frames;
  for (int n : {0, 1, 7, 200}) {
    SubmitRequest s;
    s.tasks.resize(n);
    frames.push_back(*Encode(uint64_t(n) + 1, s));
  }
  for (int i = 0; i < 20000; ++i) {
    std::string frame = frames[rng() % frames.size()];
    // Flip a few bytes, or cut it short.
    for (int k = rng() % 3; k > 0 && !frame.empty(); --k)
      frame[rng() % frame.size()] = static_cast<char>(rng());
    if (rng() % 4 == 0 && !frame.empty()) frame.resize(rng() % frame.size());
    std::optional<EnvelopeHead> head = PeekEnvelope(frame);
    DecodeResult r = Decode(frame);
    if (!r.envelope.ok() || !head.has_value()) continue;
    EXPECT_EQ(head->request_id, r.envelope->request_id);
    EXPECT_EQ(head->session, r.envelope->session);
    EXPECT_EQ(head->ack, r.envelope->ack);
    EXPECT_EQ(head->minor, r.envelope->minor);
    if (const auto* s = std::get_if<SubmitRequest>(&r.envelope->body)) {
      EXPECT_EQ(head->items, s->tasks.size());
    }
  }
}

}  // namespace
}  // namespace shoal::ipc
