// Thousands of malformed frames at a real store service: each gets an error
// reply (or, for a frame that happens to decode as a one-way notice, none), the
// service stays up, and afterwards it still serves correctly.
#include <zmq.h>

#include <random>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "ipc/protocol.h"
#include "ipc/socket.h"
#include "proto/shoal.pb.h"
#include "tests/testing/store_fixture.h"

namespace shoal {
namespace {

bool IsOneWay(const ipc::Message& m) {
  return std::holds_alternative<ipc::SealedNotice>(m) ||
         std::holds_alternative<ipc::ReclaimHint>(m);
}

class BadInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = shoal::testing::StoreProcess::Start(uint64_t{32} << 20);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    auto s = ipc::Socket::Create(ZMQ_DEALER);
    ASSERT_TRUE(s.ok());
    socket_ = *std::move(s);
    ASSERT_TRUE(socket_.Connect(store_->endpoint()).ok());
  }

  // Sends one frame (or several) and checks the reply policy.
  void SendAndCheck(const std::vector<std::string>& frames, bool expect_reply,
                    absl::StatusCode want = absl::StatusCode::kOk) {
    std::vector<absl::string_view> views(frames.begin(), frames.end());
    ASSERT_TRUE(socket_.Send(views).ok());
    std::vector<std::string> reply;
    absl::Status got = socket_.Recv(
        &reply, expect_reply ? absl::Seconds(10) : absl::Milliseconds(2));
    if (!expect_reply) {
      EXPECT_TRUE(absl::IsDeadlineExceeded(got)) << "a notice was answered";
      return;
    }
    ASSERT_TRUE(got.ok()) << "no reply: " << got;
    ASSERT_EQ(reply.size(), 1u);
    ipc::DecodeResult r = ipc::Decode(reply[0]);
    ASSERT_TRUE(r.envelope.ok()) << r.envelope.status();
    const auto* err = std::get_if<ipc::ErrorReply>(&r.envelope->body);
    if (want != absl::StatusCode::kOk) {
      ASSERT_NE(err, nullptr) << ipc::MessageName(r.envelope->body);
      EXPECT_EQ(err->status.code(), want) << err->status;
    }
    ++replies_;
  }

  std::unique_ptr<shoal::testing::StoreProcess> store_;
  ipc::Socket socket_;
  int replies_ = 0;
};

TEST_F(BadInputTest, ServiceSurvivesAndStaysCorrect) {
  std::mt19937_64 rng(2026);
  // Valid frames of every request kind, to truncate and corrupt.
  std::vector<std::string> valid;
  ipc::CreateRequest create{ObjectId::Random(),
                            TensorMeta::Contiguous(DType::kF32, {4, 4}), 64};
  for (const ipc::Message& m : std::vector<ipc::Message>{
           ipc::StoreConnectRequest{1, "x"}, create,
           ipc::SealedNotice{ObjectId::Random()},
           ipc::GetRequest{{ObjectId::Random(), ObjectId::Random()}, 0},
           ipc::DeleteRequest{ObjectId::Random()}, ipc::StoreStatsRequest{}}) {
    valid.push_back(*ipc::Encode(1, m));
  }
  int sent = 0;
  // 1. Truncated frames.
  for (int i = 0; i < 1500; ++i) {
    const std::string& v = valid[rng() % valid.size()];
    std::string frame = v.substr(0, rng() % v.size());
    ipc::DecodeResult d = ipc::Decode(frame);
    SendAndCheck({frame}, !(d.envelope.ok() && IsOneWay(d.envelope->body)));
    ++sent;
  }
  // 2. Random bytes.
  for (int i = 0; i < 1500; ++i) {
    std::string frame(rng() % 300, '\0');
    for (char& c : frame) c = static_cast<char>(rng());
    ipc::DecodeResult d = ipc::Decode(frame);
    SendAndCheck({frame}, !(d.envelope.ok() && IsOneWay(d.envelope->body)));
    ++sent;
  }
  // 3. Wrong protocol versions: a clear FailedPrecondition.
  for (int i = 0; i < 300; ++i) {
    wire::Envelope w;
    w.set_major(ipc::kProtocolMajor + 1 + static_cast<uint32_t>(rng() % 5));
    w.set_request_id(i);
    w.mutable_store_stats();
    SendAndCheck({w.SerializeAsString()}, true,
                 absl::StatusCode::kFailedPrecondition);
    ++sent;
  }
  // 4. Oversized frames: ResourceExhausted, not a dropped connection.
  for (int i = 0; i < 20; ++i) {
    std::string frame((1 << 20) + 1 + rng() % (1 << 20), 'x');
    SendAndCheck({frame}, true, absl::StatusCode::kResourceExhausted);
    ++sent;
  }
  // 5. Multi-part messages.
  for (int i = 0; i < 100; ++i) {
    SendAndCheck({valid[0], valid[1]}, true,
                 absl::StatusCode::kInvalidArgument);
    ++sent;
  }
  // 6. Valid requests before connecting: FailedPrecondition.
  SendAndCheck({*ipc::Encode(7, ipc::StoreStatsRequest{})}, true,
               absl::StatusCode::kFailedPrecondition);
  // 7. Valid connect, then requests with bad content: specific errors.
  SendAndCheck({*ipc::Encode(8, ipc::StoreConnectRequest{getpid(), "fuzzer"})},
               true);
  ipc::CreateRequest mismatch{ObjectId::Random(),
                              TensorMeta::Contiguous(DType::kF32, {4}), 99};
  SendAndCheck({*ipc::Encode(9, mismatch)}, true,
               absl::StatusCode::kInvalidArgument);
  ipc::CreateRequest nil{ObjectId(), TensorMeta::Bytes(8), 8};
  SendAndCheck({*ipc::Encode(10, nil)}, true,
               absl::StatusCode::kInvalidArgument);
  SendAndCheck({*ipc::Encode(11, ipc::StoreConnectRequest{getpid(), "again"})},
               true, absl::StatusCode::kAlreadyExists);
  EXPECT_GT(replies_, sent * 9 / 10);

  // Still alive and correct: a normal client works and sees a clean table.
  auto client = store_->Connect("after-fuzz");
  ASSERT_TRUE(client.ok()) << client.status();
  ObjectId id = ObjectId::Random();
  std::vector<uint8_t> data(1 << 16, 42);
  ASSERT_TRUE(
      (*client)->Put(id, TensorMeta::Bytes(data.size()), data.data()).ok());
  auto view = (*client)->Get(id);
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->data[100], 42);
  auto stats = (*client)->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->objects(), 1u);
  EXPECT_TRUE(store_->process().running());
}

}  // namespace
}  // namespace shoal
