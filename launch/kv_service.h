// KvService: a job's key-value store, served by the node-0 launcher on a
// ZeroMQ ROUTER over TCP: set, get (waiting for a key), add, compare-and-set,
// delete (a key or a prefix), list by prefix, wait for keys, and barriers.
// Processes of the job use it through launch::KvClient; launchers use it for
// rendezvous and to agree on stopping and restarting the group.
//
// Who gets in (docs/security.md, "The key-value service"): with a job secret
// (a CURVE secret key) the socket is a CURVE server whose public key is
// derived from the secret and never sent; a client completes the handshake
// only if it knows that public key, i.e. the secret, which the launcher hands
// to its ranks (SHOAL_KV_SECRET). Without a secret the service binds only to
// loopback. Waits and barrier arrivals of a connection that closes are
// dropped; the keys and values held, and the keys waited for, share one byte
// budget.
#ifndef SHOAL_LAUNCH_KV_SERVICE_H_
#define SHOAL_LAUNCH_KV_SERVICE_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace shoal::launch {

struct KvServiceOptions {
  // Where to listen: "tcp://HOST:PORT" (PORT 0 or *: any free port).
  // Default: "tcp://127.0.0.1:*".
  std::string endpoint = "tcp://127.0.0.1:*";
  // Largest value accepted. Default 64 MiB.
  size_t max_value_bytes = size_t{64} << 20;
  // Most keys held. Default 1,000,000.
  size_t max_keys = 1000000;
  // Most bytes held in all: keys and values stored, plus the keys that
  // pending waits name. Default 1 GiB.
  size_t max_total_bytes = size_t{1} << 30;
  // The job secret: a Z85 CURVE secret key (40 characters). Required unless
  // the endpoint is loopback (ipc::IsLoopbackEndpoint).
  std::string curve_secret_key;
};

// The longest wait a request may ask for (about a year): anything longer is
// InvalidArgument, so that no deadline computation can overflow. KvClient
// sends longer waits as "no limit".
inline constexpr int64_t kMaxKvWaitMs = int64_t{365} * 24 * 3600 * 1000;

class KvService {
 public:
  // Binds the endpoint. Errors: FailedPrecondition (a non-loopback endpoint
  // without a secret), InvalidArgument (a secret that is not a Z85 key),
  // socket errors (AlreadyExists for a port in use).
  static absl::StatusOr<std::unique_ptr<KvService>> Create(
      const KvServiceOptions& options);
  ~KvService();

  // Serves until Stop(). Run it on a thread of its own.
  absl::Status Run();
  // Thread-safe and async-signal-safe.
  void Stop();
  // The bound endpoint ("tcp://127.0.0.1:40123").
  const std::string& endpoint() const;

  class Impl;

 private:
  explicit KvService(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace shoal::launch

#endif  // SHOAL_LAUNCH_KV_SERVICE_H_
