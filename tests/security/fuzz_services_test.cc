// A frame fuzzer against the key-value service (in-process, real sockets) and
// the store service (a real `shoal store` process): random bytes, mutated
// valid Envelopes, and valid Envelopes of KV, store and task bodies (bodies
// meant for another service included) with duplicated ids, huge counts and
// extreme integers. Bounded by time and count; SHOAL_FUZZ_SECONDS (per
// service, default 2) gives a longer run. Afterwards each service must still
// serve a normal client.
#include <zmq.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "coordinator/discovery.h"
#include "gtest/gtest.h"
#include "ipc/messages.h"
#include "ipc/object_id.h"
#include "ipc/protocol.h"
#include "ipc/socket.h"
#include "launch/kv_client.h"
#include "launch/kv_service.h"
#include "tests/coordinator/node_fixture.h"
#include "tests/testing/store_fixture.h"

namespace shoal {
namespace {

absl::Duration FuzzTime() {
  double s = 2;
  if (const char* v = std::getenv("SHOAL_FUZZ_SECONDS"))
    (void)absl::SimpleAtod(v, &s);
  return absl::Seconds(s);
}

class Fuzzer {
 public:
  // `allow_stop`: whether StopRequest is among the bodies (not for the
  // owner's frontend, where stopping is allowed).
  Fuzzer(uint64_t seed, bool allow_stop)
      : rng_(seed), allow_stop_(allow_stop) {}

  std::string Bytes(size_t max) {
    std::string s(Pick(max), '\0');
    for (char& c : s) c = static_cast<char>(rng_());
    return s;
  }
  size_t Pick(size_t n) { return n == 0 ? 0 : rng_() % (n + 1); }
  int64_t Extreme() {
    const int64_t v[] = {0,
                         -1,
                         1,
                         INT64_MAX,
                         INT64_MIN,
                         int64_t{1} << 62,
                         static_cast<int64_t>(rng_())};
    return v[rng_() % 7];
  }
  std::string Key() {
    return rng_() % 2 ? "k" + std::to_string(rng_() % 8) : Bytes(64);
  }

  ipc::Message Body() {
    ObjectId id = rng_() % 4 ? ObjectId::Random() : ObjectId();
    std::vector<uint64_t> task_ids;  // duplicates and huge counts
    for (size_t i = Pick(rng_() % 8 ? 8 : 5000); i > 0; --i)
      task_ids.push_back(rng_() % 2 ? rng_() % 4 : rng_());
    switch (rng_() % 21) {
      case 14: {
        ipc::WaitRequest w;
        w.task_ids = task_ids;
        w.timeout_ms = rng_() % 2 ? 0 : Extreme();
        w.min_done = static_cast<uint32_t>(rng_());
        w.release = rng_() % 2 == 0;
        return w;
      }
      case 15:
        return ipc::CancelRequest{task_ids};
      case 16:
        return ipc::ReleaseTasksRequest{task_ids};
      case 17:
        return ipc::FetchObjectRequest{id};
      case 18:
        return ipc::StatusRequest{};
      case 19:
        return ipc::ClientHello{static_cast<int32_t>(rng_()),
                                std::string(Pick(64), 'n'),
                                std::string(Pick(40), 'b')};
      case 20:
        return ipc::DeleteRequest{id};
      case 0:
        return ipc::KvSetRequest{Key(), Bytes(256)};
      case 1:
        return ipc::KvGetRequest{Key(), Extreme()};
      case 2:
        return ipc::KvAddRequest{Key(), Extreme()};
      case 3:
        return ipc::KvCompareAndSetRequest{Key(), Bytes(8), Bytes(8),
                                           rng_() % 2 == 0};
      case 4:
        return ipc::KvDeleteRequest{Key(), rng_() % 2 == 0};
      case 5:
        return ipc::KvListRequest{Key()};
      case 6: {
        ipc::KvWaitRequest w;
        for (size_t i = Pick(64); i > 0; --i) w.keys.push_back(Key());
        w.timeout_ms = Extreme();
        return w;
      }
      case 7:
        return ipc::BarrierRequest{Key(), static_cast<uint32_t>(rng_()),
                                   Extreme()};
      case 8:
        return ipc::StoreConnectRequest{static_cast<int32_t>(rng_()),
                                        Bytes(300)};
      case 9: {
        ipc::GetRequest g;
        for (size_t i = Pick(200); i > 0; --i)
          g.ids.push_back(id);  // duplicates
        g.timeout_ms = Extreme();
        return g;
      }
      case 10:
        return ipc::ReleaseRequest{id};
      case 11: {
        ipc::CreateRequest c;
        c.id = id;
        c.nbytes = static_cast<uint64_t>(Extreme());
        return c;
      }
      case 12:
        return ipc::StoreStatsRequest{};
      default:
        if (allow_stop_) return ipc::StopRequest{};
        return ipc::StatusRequest{};
    }
  }

  // One frame: random bytes, a valid Envelope, or a mutated one. Without
  // `allow_stop`, never one that decodes as a StopRequest: a mutated tag can
  // make one of a StatusRequest, and the owner's frontend obeys it (the node
  // stopped mid-test, about 1 run in 10 under load).
  std::string Frame() {
    std::string f = AnyFrame();
    while (!allow_stop_ && IsStop(f)) {
      ++stops_skipped_;
      f = Bytes(512);
    }
    return f;
  }
  int stops_skipped() const { return stops_skipped_; }

 private:
  static bool IsStop(const std::string& f) {
    ipc::DecodeResult d = ipc::Decode(f);
    return d.envelope.ok() &&
           std::holds_alternative<ipc::StopRequest>(d.envelope->body);
  }
  std::string AnyFrame() {
    const uint64_t request_id = rng_() % 3 ? rng_() : 0;
    absl::StatusOr<std::string> valid = ipc::Encode(request_id, Body());
    const int kind = rng_() % 4;
    if (kind == 0 || !valid.ok()) return Bytes(512);
    std::string f = *valid;
    if (kind == 1) return f;
    for (size_t i = Pick(4) + 1; i > 0 && !f.empty(); --i)
      f[rng_() % f.size()] = static_cast<char>(rng_());
    if (kind == 3) f.resize(Pick(f.size()));
    return f;
  }

  std::mt19937_64 rng_;
  bool allow_stop_;
  int stops_skipped_ = 0;
};

// Sends frames from a few DEALERs (never blocking) until the time or count
// runs out, reading whatever comes back. Returns how many were sent.
int Fuzz(const std::string& endpoint, uint64_t seed, bool allow_stop = true) {
  Fuzzer f(seed, allow_stop);
  std::vector<ipc::Socket> sockets;
  for (int i = 0; i < 4; ++i) {
    auto s = ipc::Socket::Create(ZMQ_DEALER);
    EXPECT_TRUE(s.ok());
    EXPECT_TRUE(s->Connect(endpoint).ok());
    sockets.push_back(*std::move(s));
  }
  const absl::Time end = absl::Now() + FuzzTime();
  int sent = 0;
  std::vector<std::string> frames;
  for (; sent < 200000 && absl::Now() < end; ++sent) {
    ipc::Socket& s = sockets[sent % sockets.size()];
    if (sent % 64 == 0) {  // sometimes several frames in one message
      const std::string a = f.Frame(), b = f.Frame();
      const absl::string_view parts[] = {a, b};
      (void)s.Send(parts, /*dontwait=*/true);
    } else {
      (void)s.Send(f.Frame(), /*dontwait=*/true);
    }
    for (ipc::Socket& r : sockets) {
      while (r.Poll(absl::ZeroDuration()).value_or(false) &&
             r.Recv(&frames).ok()) {
      }
    }
  }
  if (f.stops_skipped() > 0) {
    std::printf("fuzz: %d frames that decode as StopRequest left out\n",
                f.stops_skipped());
  }
  return sent;
}

TEST(FuzzServices, KvServiceSurvivesAndServes) {
  launch::KvServiceOptions o;
  o.max_total_bytes = 8 << 20;
  auto service = launch::KvService::Create(o);
  ASSERT_TRUE(service.ok()) << service.status();
  absl::Status ran;
  std::thread t([&] { ran = (*service)->Run(); });
  const int sent = Fuzz((*service)->endpoint(), 14);
  EXPECT_GT(sent, 0);
  auto kv = launch::KvClient::Connect((*service)->endpoint(), {});
  ASSERT_TRUE(kv.ok());
  ASSERT_TRUE((*kv)->Set("after", "fuzz").ok());
  EXPECT_EQ(*(*kv)->Get("after"), "fuzz");
  (*service)->Stop();
  t.join();
  EXPECT_TRUE(ran.ok()) << ran;
}

TEST(FuzzServices, StoreServiceSurvivesAndServes) {
  auto store = testing::StoreProcess::Start(uint64_t{32} << 20);
  ASSERT_TRUE(store.ok()) << store.status();
  const int sent = Fuzz((*store)->endpoint(), 15);
  EXPECT_GT(sent, 0);
  auto client = (*store)->Connect("after-fuzz");
  ASSERT_TRUE(client.ok()) << client.status();
  absl::StatusOr<int> code = (*store)->Stop();
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 0) << "the store did not exit cleanly after fuzzing";
}

// The coordinator's frontend, through the owner's ipc:// socket (the widest
// surface: everything but Stop is allowed there). Part A owns the frontend;
// a crash found here goes to them.
TEST(FuzzServices, FrontendSurvivesAndServes) {
  auto node = testing::NodeProcess::Start();
  ASSERT_TRUE(node.ok()) << node.status();
  auto d = coordinator::ReadDiscovery((*node)->job_id());
  ASSERT_TRUE(d.ok()) << d.status();
  const int sent = Fuzz(d->frontend, 16, /*allow_stop=*/false);
  EXPECT_GT(sent, 0);
  ASSERT_TRUE((*node)->process().running()) << "the coordinator died";
  auto client = (*node)->Connect();
  ASSERT_TRUE(client.ok()) << client.status();
  auto status = (*client)->Status();
  EXPECT_TRUE(status.ok()) << status.status();
}

}  // namespace
}  // namespace shoal
