#include "tools/bench/tasks_bench_zmq.h"

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

}  // namespace
}  // namespace shoal::bench
