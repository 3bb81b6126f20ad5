// RawClient: a DEALER that speaks raw protocol frames to a frontend endpoint
// (optionally with CURVE), for the security tests: it sends what a hostile or
// careless client would, and reads replies one by one.
#ifndef SHOAL_TESTS_SECURITY_RAW_CLIENT_H_
#define SHOAL_TESTS_SECURITY_RAW_CLIENT_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "ipc/curve.h"
#include "ipc/messages.h"
#include "ipc/socket.h"

namespace shoal::testing {

struct RawClientOptions {
  // ZeroMQ's receive queue; below 10 the kernel's receive buffer is made
  // small too, so that the client reads (almost) nothing it is not asked to.
  int rcvhwm = 1000;
  // ZeroMQ's send queue (0: unlimited).
  int sndhwm = 10000;
  // CURVE keys (both or neither).
  const ipc::CurveKeyPair* keys = nullptr;
  std::string server_key;
};

class RawClient {
 public:
  explicit RawClient(const std::string& endpoint,
                     const RawClientOptions& options = {});
  // The historical form: (endpoint, rcvhwm, keys, server key).
  RawClient(const std::string& endpoint, int rcvhwm,
            const ipc::CurveKeyPair* keys = nullptr,
            const std::string& server_key = "");

  // Without blocking: a DEALER with no admitted connection has nowhere to
  // queue (Unavailable).
  absl::Status Send(uint64_t id, ipc::Message m);
  // Sends a frame as it is (not necessarily an Envelope).
  absl::Status SendFrame(const std::string& frame);
  // The next reply's body, or the status of why there is none (its
  // ErrorReply's status for an error).
  absl::StatusOr<ipc::Message> Next(absl::Duration timeout);
  // The next reply's request id and body (errors as in Next).
  absl::StatusOr<std::pair<uint64_t, ipc::Message>> NextWithId(
      absl::Duration timeout);
  absl::StatusOr<ipc::Message> Call(ipc::Message m,
                                    absl::Duration timeout = absl::Seconds(20));

  ipc::Socket& socket() { return socket_; }
  // Closes the socket now (linger 0: unsent frames are dropped).
  void Close() { socket_.Close(); }

 private:
  ipc::Socket socket_;
  uint64_t next_id_ = 0;
};

}  // namespace shoal::testing

#endif  // SHOAL_TESTS_SECURITY_RAW_CLIENT_H_
