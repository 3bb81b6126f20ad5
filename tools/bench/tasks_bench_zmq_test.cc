#include "tools/bench/tasks_bench_zmq.h"

#include <zmq.h>

#include <atomic>
#include <memory>
#include <thread>

#include "gtest/gtest.h"
#include "ipc/curve.h"

namespace shoal::bench {
namespace {

// Every echo came back (the loops end only then) and the figures are real
// measurements, not placeholders: positive and ordered.
void ExpectSane(const ZmqRoundTrip& z) {
  EXPECT_GT(z.sync_per_s, 0);
  EXPECT_GT(z.sync_p50_us, 0);
  EXPECT_GE(z.sync_p99_us, z.sync_p50_us);
  EXPECT_GT(z.async_per_s, 0);
}

TEST(ZmqRoundTripTest, PlainEchoesEveryMessage) {
  absl::StatusOr<ZmqRoundTrip> z = MeasureZmqRoundTrip(
      /*curve=*/false, /*n_async=*/2000, /*n_sync=*/200, /*window=*/64,
      /*payload_bytes=*/64);
  ASSERT_TRUE(z.ok()) << z.status();
  ExpectSane(*z);
}

TEST(ZmqRoundTripTest, CurveEchoesEveryMessage) {
  absl::StatusOr<ZmqRoundTrip> z = MeasureZmqRoundTrip(
      /*curve=*/true, /*n_async=*/2000, /*n_sync=*/200, /*window=*/64,
      /*payload_bytes=*/64);
  ASSERT_TRUE(z.ok()) << z.status();
  ExpectSane(*z);
}

TEST(ZmqRoundTripTest, CurveRefusesWhenAZapHandlerIsAlreadyBound) {
  absl::StatusOr<std::unique_ptr<ipc::ZapAuthenticator>> zap =
      ipc::ZapAuthenticator::Start({});
  ASSERT_TRUE(zap.ok()) << zap.status();
  absl::StatusOr<ZmqRoundTrip> z = MeasureZmqRoundTrip(true, 10, 10, 4, 64);
  EXPECT_EQ(z.status().code(), absl::StatusCode::kAlreadyExists) << z.status();
}

// MeasureZmqRoundTripTo against an echo with its own context (as the echo
// process's): every echo back over CURVE with the admitted key pair.
TEST(ZmqRoundTripTest, CurveEchoesOfAnotherContextComeBack) {
  absl::StatusOr<ipc::CurveKeyPair> server = ipc::GenerateCurveKeyPair();
  absl::StatusOr<ipc::CurveKeyPair> client = ipc::GenerateCurveKeyPair();
  ASSERT_TRUE(server.ok() && client.ok());
  void* context = zmq_ctx_new();
  void* router = zmq_socket(context, ZMQ_ROUTER);
  ASSERT_NE(router, nullptr);
  // No ZAP handler in this context: CURVE admits any client key here (the
  // echo process admits only its own; the measured client side is alike).
  const int server_on = 1;
  ASSERT_EQ(
      zmq_setsockopt(router, ZMQ_CURVE_SERVER, &server_on, sizeof(server_on)),
      0);
  ASSERT_EQ(
      zmq_setsockopt(router, ZMQ_CURVE_SECRETKEY, server->secret_key.c_str(),
                     server->secret_key.size() + 1),
      0);
  const int timeout_ms = 100;
  zmq_setsockopt(router, ZMQ_RCVTIMEO, &timeout_ms, sizeof(timeout_ms));
  ASSERT_EQ(zmq_bind(router, "tcp://127.0.0.1:*"), 0);
  char endpoint[256];
  size_t len = sizeof(endpoint);
  ASSERT_EQ(zmq_getsockopt(router, ZMQ_LAST_ENDPOINT, endpoint, &len), 0);
  std::atomic<bool> stop{false};
  std::thread echo([&] {
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    while (!stop.load()) {
      if (zmq_msg_recv(&msg, router, 0) < 0) continue;
      const bool more = zmq_msg_more(&msg);
      zmq_msg_send(&msg, router, more ? ZMQ_SNDMORE : 0);
    }
    zmq_msg_close(&msg);
  });
  absl::StatusOr<ZmqRoundTrip> z = MeasureZmqRoundTripTo(
      endpoint, server->public_key, *client, /*n_async=*/2000,
      /*n_sync=*/200, /*window=*/64, /*payload_bytes=*/64);
  stop.store(true);
  echo.join();
  zmq_close(router);
  zmq_ctx_term(context);
  ASSERT_TRUE(z.ok()) << z.status();
  ExpectSane(*z);
}

// The one-at-a-time echo of the interleaved rows: round trips come back, and
// a second in-process echo (CURVE) refuses while the first holds the ZAP
// handler; after it is gone, one can start again.
TEST(ZmqRoundTripTest, EchoRoundTripsOneAtATime) {
  absl::StatusOr<std::unique_ptr<ZmqEcho>> e =
      ZmqEcho::InProcess(/*curve=*/true, /*payload_bytes=*/64);
  ASSERT_TRUE(e.ok()) << e.status();
  for (int i = 0; i < 100; ++i) ASSERT_TRUE((*e)->RoundTrip().ok()) << i;
  EXPECT_EQ(ZmqEcho::InProcess(true, 64).status().code(),
            absl::StatusCode::kAlreadyExists);
  e->reset();
  absl::StatusOr<std::unique_ptr<ZmqEcho>> again = ZmqEcho::InProcess(true, 64);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE((*again)->RoundTrip().ok());
}

}  // namespace
}  // namespace shoal::bench
