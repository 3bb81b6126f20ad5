// The wire's limit for `shoal bench tasks`: a raw ZeroMQ DEALER/ROUTER echo on
// TCP loopback, the transport the remote client uses, with CURVE (as the
// frontend requires for TCP) or plain (to show CURVE's cost). No protobuf, no
// coordinator: one DEALER client, one ROUTER thread that echoes each message.
#ifndef SHOAL_TOOLS_BENCH_TASKS_BENCH_ZMQ_H_
#define SHOAL_TOOLS_BENCH_TASKS_BENCH_ZMQ_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "ipc/curve.h"
#include "ipc/socket.h"

namespace shoal::bench {

struct ZmqRoundTrip {
  double sync_per_s = 0;   // sequential round trips per second
  double sync_p50_us = 0;  // one message out, its echo back
  double sync_p99_us = 0;
  double async_per_s = 0;  // echoes per second with `window` in flight
};

// Measures `n_sync` sequential round trips (after n_sync/10 warm-up ones) and
// `n_async` messages with at most `window` in flight, each `payload_bytes`
// long, over tcp://127.0.0.1 in this process.
// REQUIRES: no ZAP handler is bound on ipc::ProcessContext() (with `curve`).
// Errors: AlreadyExists if one is; FailedPrecondition if libzmq lacks CURVE;
// DeadlineExceeded if an echo does not come back within 10 s; ZmqStatus codes.
absl::StatusOr<ZmqRoundTrip> MeasureZmqRoundTrip(bool curve, int n_async,
                                                 int n_sync, int window,
                                                 int payload_bytes);

// The same measurement against an echo in another process, as a remote
// client meets its server: its own ZeroMQ context and I/O thread on each
// side (MeasureZmqRoundTrip shares one context, so one I/O thread serves
// both ends). Connects a DEALER to `endpoint`, with CURVE when `server_key`
// is not empty (`client_keys` then the pair the server admits).
// Errors: DeadlineExceeded if an echo does not come back within 10 s (also
// when the server does not admit the keys); ZmqStatus codes.
absl::StatusOr<ZmqRoundTrip> MeasureZmqRoundTripTo(
    const std::string& endpoint, const std::string& server_key,
    const ipc::CurveKeyPair& client_keys, int n_async, int n_sync, int window,
    int payload_bytes);

// A connected echo for one round trip at a time (the interleaved rows of
// `shoal bench tasks`): the in-process echo of MeasureZmqRoundTrip or a
// DEALER to another process's echo, as MeasureZmqRoundTripTo. Stops its echo
// thread (if any) when destroyed. Thread-compatible.
class ZmqEcho {
 public:
  // The in-process echo (with CURVE or plain). REQUIRES and errors: as
  // MeasureZmqRoundTrip.
  static absl::StatusOr<std::unique_ptr<ZmqEcho>> InProcess(bool curve,
                                                            int payload_bytes);
  // To another process's echo; errors as MeasureZmqRoundTripTo.
  static absl::StatusOr<std::unique_ptr<ZmqEcho>> To(
      const std::string& endpoint, const std::string& server_key,
      const ipc::CurveKeyPair& client_keys, int payload_bytes);
  ~ZmqEcho();

  // One message out and its echo back. Errors: DeadlineExceeded (no echo
  // within 10 s), ZmqStatus codes.
  absl::Status RoundTrip();
  void* dealer() { return dealer_.raw(); }

 private:
  ZmqEcho() = default;

  std::unique_ptr<ipc::ZapAuthenticator> zap_;
  ipc::Socket router_;  // in-process only
  ipc::Socket dealer_;
  std::string payload_;
  std::atomic<bool> stop_{false};
  std::thread echo_;
};

// The other process's side (`shoal bench tasks --zmq-echo-server
// curve|plain`): binds a ROUTER on tcp://127.0.0.1 (CURVE with fresh keys
// and a ZAP handler admitting one fresh client key, as MeasureZmqRoundTrip),
// writes one line to stdout, "<endpoint> <server public key> <client public
// key> <client secret key>" ("-" for each key when plain), and echoes every
// message until the process is killed. Returns only on an error (non-zero).
int RunZmqEchoServer(bool curve);

}  // namespace shoal::bench

#endif  // SHOAL_TOOLS_BENCH_TASKS_BENCH_ZMQ_H_
