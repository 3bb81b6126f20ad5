#include "tools/bench/tasks_bench_zmq.h"

#include <zmq.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/status_macros.h"
#include "ipc/curve.h"
#include "ipc/socket.h"
#include "tools/bench/bench_util.h"

namespace shoal::bench {
namespace {

// Echoes every multipart message (routing id first) back to its sender until
// `stop` is set; the 100 ms receive timeout bounds how long that takes.
void Echo(void* router, const std::atomic<bool>* stop) {
  const int timeout_ms = 100;
  zmq_setsockopt(router, ZMQ_RCVTIMEO, &timeout_ms, sizeof(timeout_ms));
  zmq_msg_t msg;
  zmq_msg_init(&msg);
  while (!stop->load(std::memory_order_relaxed)) {
    if (zmq_msg_recv(&msg, router, 0) < 0) continue;  // timeout or EINTR
    const bool more = zmq_msg_more(&msg);
    zmq_msg_send(&msg, router, more ? ZMQ_SNDMORE : 0);
  }
  zmq_msg_close(&msg);
}

absl::Status SendOne(void* dealer, const std::string& payload) {
  if (zmq_send(dealer, payload.data(), payload.size(), 0) < 0) {
    return ipc::ZmqStatus("zmq_send", __FILE__, __LINE__);
  }
  return absl::OkStatus();
}

absl::Status RecvOne(void* dealer, zmq_msg_t* msg) {
  if (zmq_msg_recv(msg, dealer, 0) < 0) {
    if (zmq_errno() == EAGAIN) {
      return absl::DeadlineExceededError("no echo within 10 s");
    }
    return ipc::ZmqStatus("zmq_msg_recv", __FILE__, __LINE__);
  }
  return absl::OkStatus();
}

absl::Status Measure(void* dealer, int n_async, int n_sync, int window,
                     int payload_bytes, ZmqRoundTrip* out) {
  const std::string payload(payload_bytes, 'x');
  // Closes the received message on every return.
  struct Msg {
    Msg() { zmq_msg_init(&m); }
    ~Msg() { zmq_msg_close(&m); }
    zmq_msg_t m;
  } received_msg;
  zmq_msg_t& msg = received_msg.m;
  std::vector<double> lat;
  lat.reserve(n_sync);
  for (int i = 0; i < n_sync + n_sync / 10; ++i) {  // the first 10% warm up
    const double t0 = NowSeconds();
    SHOAL_RETURN_IF_ERROR(SendOne(dealer, payload));
    SHOAL_RETURN_IF_ERROR(RecvOne(dealer, &msg));
    if (i >= n_sync / 10) lat.push_back(NowSeconds() - t0);
  }
  double total = 0;
  for (double d : lat) total += d;
  out->sync_per_s = lat.size() / total;
  out->sync_p50_us = Median(lat) * 1e6;
  out->sync_p99_us = Quantile(lat, 0.99) * 1e6;
  int sent = 0, received = 0;
  const double t0 = NowSeconds();
  while (received < n_async) {
    while (sent < n_async && sent - received < window) {
      SHOAL_RETURN_IF_ERROR(SendOne(dealer, payload));
      ++sent;
    }
    SHOAL_RETURN_IF_ERROR(RecvOne(dealer, &msg));
    ++received;
  }
  out->async_per_s = n_async / (NowSeconds() - t0);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<ZmqEcho>> ZmqEcho::InProcess(bool curve,
                                                            int payload_bytes) {
  std::unique_ptr<ZmqEcho> e(new ZmqEcho);
  e->payload_.assign(payload_bytes, 'x');
  SHOAL_ASSIGN_OR_RETURN(e->router_, ipc::Socket::Create(ZMQ_ROUTER));
  SHOAL_ASSIGN_OR_RETURN(e->dealer_, ipc::Socket::Create(ZMQ_DEALER));
  if (curve) {
    SHOAL_ASSIGN_OR_RETURN(ipc::CurveKeyPair server_keys,
                           ipc::GenerateCurveKeyPair());
    SHOAL_ASSIGN_OR_RETURN(ipc::CurveKeyPair client_keys,
                           ipc::GenerateCurveKeyPair());
    SHOAL_ASSIGN_OR_RETURN(
        e->zap_, ipc::ZapAuthenticator::Start({client_keys.public_key}));
    SHOAL_RETURN_IF_ERROR(ipc::ConfigureCurveServer(e->router_, server_keys));
    SHOAL_RETURN_IF_ERROR(ipc::ConfigureCurveClient(
        e->dealer_, server_keys.public_key, client_keys));
  }
  SHOAL_RETURN_IF_ERROR(e->router_.Bind("tcp://127.0.0.1:*"));
  SHOAL_ASSIGN_OR_RETURN(std::string endpoint, e->router_.LastEndpoint());
  const int timeout_ms = 10000;
  zmq_setsockopt(e->dealer_.raw(), ZMQ_RCVTIMEO, &timeout_ms,
                 sizeof(timeout_ms));
  SHOAL_RETURN_IF_ERROR(e->dealer_.Connect(endpoint));
  e->echo_ = std::thread(Echo, e->router_.raw(), &e->stop_);
  return e;
}

absl::StatusOr<std::unique_ptr<ZmqEcho>> ZmqEcho::To(
    const std::string& endpoint, const std::string& server_key,
    const ipc::CurveKeyPair& client_keys, int payload_bytes) {
  std::unique_ptr<ZmqEcho> e(new ZmqEcho);
  e->payload_.assign(payload_bytes, 'x');
  SHOAL_ASSIGN_OR_RETURN(e->dealer_, ipc::Socket::Create(ZMQ_DEALER));
  if (!server_key.empty()) {
    SHOAL_RETURN_IF_ERROR(
        ipc::ConfigureCurveClient(e->dealer_, server_key, client_keys));
  }
  const int timeout_ms = 10000;
  zmq_setsockopt(e->dealer_.raw(), ZMQ_RCVTIMEO, &timeout_ms,
                 sizeof(timeout_ms));
  SHOAL_RETURN_IF_ERROR(e->dealer_.Connect(endpoint));
  return e;
}

ZmqEcho::~ZmqEcho() {
  stop_.store(true);
  if (echo_.joinable()) echo_.join();
}

absl::Status ZmqEcho::RoundTrip() {
  SHOAL_RETURN_IF_ERROR(SendOne(dealer_.raw(), payload_));
  zmq_msg_t msg;
  zmq_msg_init(&msg);
  absl::Status s = RecvOne(dealer_.raw(), &msg);
  zmq_msg_close(&msg);
  return s;
}

absl::StatusOr<ZmqRoundTrip> MeasureZmqRoundTrip(bool curve, int n_async,
                                                 int n_sync, int window,
                                                 int payload_bytes) {
  SHOAL_ASSIGN_OR_RETURN(std::unique_ptr<ZmqEcho> echo,
                         ZmqEcho::InProcess(curve, payload_bytes));
  ZmqRoundTrip out;
  SHOAL_RETURN_IF_ERROR(
      Measure(echo->dealer(), n_async, n_sync, window, payload_bytes, &out));
  return out;
}

absl::StatusOr<ZmqRoundTrip> MeasureZmqRoundTripTo(
    const std::string& endpoint, const std::string& server_key,
    const ipc::CurveKeyPair& client_keys, int n_async, int n_sync, int window,
    int payload_bytes) {
  SHOAL_ASSIGN_OR_RETURN(
      std::unique_ptr<ZmqEcho> echo,
      ZmqEcho::To(endpoint, server_key, client_keys, payload_bytes));
  ZmqRoundTrip out;
  SHOAL_RETURN_IF_ERROR(
      Measure(echo->dealer(), n_async, n_sync, window, payload_bytes, &out));
  return out;
}

int RunZmqEchoServer(bool curve) {
  absl::Status s = [&]() -> absl::Status {
    std::unique_ptr<ipc::ZapAuthenticator> zap;
    SHOAL_ASSIGN_OR_RETURN(ipc::Socket router, ipc::Socket::Create(ZMQ_ROUTER));
    ipc::CurveKeyPair server_keys{"-", "-"}, client_keys{"-", "-"};
    if (curve) {
      SHOAL_ASSIGN_OR_RETURN(server_keys, ipc::GenerateCurveKeyPair());
      SHOAL_ASSIGN_OR_RETURN(client_keys, ipc::GenerateCurveKeyPair());
      SHOAL_ASSIGN_OR_RETURN(
          zap, ipc::ZapAuthenticator::Start({client_keys.public_key}));
      SHOAL_RETURN_IF_ERROR(ipc::ConfigureCurveServer(router, server_keys));
    }
    SHOAL_RETURN_IF_ERROR(router.Bind("tcp://127.0.0.1:*"));
    SHOAL_ASSIGN_OR_RETURN(std::string endpoint, router.LastEndpoint());
    std::printf("%s %s %s %s\n", endpoint.c_str(),
                server_keys.public_key.c_str(), client_keys.public_key.c_str(),
                client_keys.secret_key.c_str());
    std::fflush(stdout);
    const std::atomic<bool> never{false};
    Echo(router.raw(), &never);  // until the process is killed
    return absl::OkStatus();
  }();
  std::fprintf(stderr, "zmq echo server: %s\n", s.ToString().c_str());
  return 1;
}

}  // namespace shoal::bench
