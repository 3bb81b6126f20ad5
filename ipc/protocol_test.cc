// The envelope on the wire (versions, frame limits, error replies, garbage)
// and the store's messages (ipc/protocol_store.cc).
#include "ipc/protocol.h"

#include <random>
#include <string>

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

}  // namespace
}  // namespace shoal::ipc
