// ZeroMQ helpers: a per-process context and sockets with explicit options,
// returning absl::Status for every failure. Built on libzmq's C API so that no
// exception can escape (cppzmq throws).
//
// Facts that shape these helpers (see docs/architecture.md, "ZeroMQ and the
// wire"):
// - a ROUTER silently drops messages to unknown peers unless
//   ZMQ_ROUTER_MANDATORY is set (we set it: the send fails with Unavailable);
// - the send high-water mark drops (ROUTER) or blocks (DEALER) when reached, so
//   it is set explicitly and protocols above use credit-based flow control;
// - a context must not cross fork(): ProcessContext() makes a fresh one in a
//   child and never touches the parent's.
#ifndef SHOAL_IPC_SOCKET_H_
#define SHOAL_IPC_SOCKET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace shoal::ipc {

// Returns an error status built from zmq_errno() when `rc` is negative.
absl::Status ZmqStatus(absl::string_view what, const char* file, int line);
#define SHOAL_ZMQ_CHECK(call)                                                  \
  do {                                                                         \
    if ((call) < 0) return ::shoal::ipc::ZmqStatus(#call, __FILE__, __LINE__); \
  } while (0)

// The ZeroMQ context of this process, created on first use. After fork() the
// child gets its own (the parent's is abandoned, never closed, as ZeroMQ
// requires). Thread-safe.
void* ProcessContext();

// How many I/O threads the process's context runs (ZMQ_IO_THREADS; the
// context's default is 1). Each connection is served by one of them: they
// move its bytes and, for CURVE, encrypt and decrypt them and run its
// handshakes. Only before the context exists (the process's first socket);
// later it changes nothing. Thread-safe.
// Errors: InvalidArgument (n outside [1, 64]), FailedPrecondition (the
// context exists already).
absl::Status SetProcessIoThreads(int n);

struct SocketOptions {
  // Messages queued per peer before sends block or fail. Default 10000: large
  // enough for credit windows, small enough to bound memory.
  int send_hwm = 10000;
  int recv_hwm = 10000;
  // How long unsent messages are kept at close. Default 0: never block exit.
  int linger_ms = 0;
  // ROUTER only: fail sends to unknown peers instead of dropping them.
  // Default true.
  bool router_mandatory = true;
  // Largest inbound message ZeroMQ accepts before disconnecting the peer.
  // Default 64 MiB; the protocol layer applies tighter limits per message.
  int64_t max_msg_bytes = int64_t{64} << 20;
  // Identity for DEALER sockets (empty: ZeroMQ picks one).
  std::string routing_id;
  // TCP keepalive so dead remote peers are noticed. Default on.
  bool tcp_keepalive = true;
};

class Socket {
 public:
  // type: ZMQ_ROUTER, ZMQ_DEALER, ZMQ_PAIR, ...
  static absl::StatusOr<Socket> Create(int type,
                                       const SocketOptions& options = {});

  Socket() = default;
  Socket(Socket&& other) noexcept;
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket();

  absl::Status Bind(const std::string& endpoint);
  absl::Status Connect(const std::string& endpoint);
  // The endpoint actually bound (resolves "tcp://127.0.0.1:*" to a port).
  absl::StatusOr<std::string> LastEndpoint() const;

  // Sends a multipart message. With `dontwait`, a full queue is Unavailable
  // instead of blocking. A ROUTER send to an unknown peer is Unavailable
  // ("peer gone").
  absl::Status Send(absl::Span<const absl::string_view> frames,
                    bool dontwait = false);
  absl::Status Send(absl::string_view frame, bool dontwait = false) {
    return Send(absl::MakeConstSpan(&frame, 1), dontwait);
  }

  // Receives one multipart message into `frames` (cleared first). Waits up to
  // `timeout` (absl::InfiniteDuration() to block); DeadlineExceeded when none
  // arrived in time.
  absl::Status Recv(std::vector<std::string>* frames,
                    absl::Duration timeout = absl::InfiniteDuration());

  // Whether a message can be received now, or within `timeout`.
  absl::StatusOr<bool> Poll(absl::Duration timeout);

  void* raw() const { return socket_; }
  explicit operator bool() const { return socket_ != nullptr; }
  void Close();

 private:
  explicit Socket(void* s) : socket_(s) {}
  void* socket_ = nullptr;
};

// Milliseconds for zmq_poll: -1 for infinite, rounded up otherwise.
long PollTimeoutMs(absl::Duration timeout);

}  // namespace shoal::ipc

#endif  // SHOAL_IPC_SOCKET_H_
