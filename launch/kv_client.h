// KvClient: the key-value store of a launched job (hosted by the node-0
// launcher): rendezvous, barriers, NCCL unique ids, user keys. Values are
// bytes; Add treats them as decimal integers (like torch's TCPStore).
// Not thread-safe: one KvClient per thread.
#ifndef SHOAL_LAUNCH_KV_CLIENT_H_
#define SHOAL_LAUNCH_KV_CLIENT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "ipc/rpc_channel.h"

namespace shoal::launch {

// The environment variable that carries the job secret to launched processes.
inline constexpr char kKvSecretEnv[] = "SHOAL_KV_SECRET";

struct KvClientOptions {
  // Longest wait for a reply to a call that does not itself wait. Default 60 s.
  absl::Duration rpc_timeout = absl::Seconds(60);
  // The job secret (KvServiceOptions::curve_secret_key). Empty: taken from
  // $SHOAL_KV_SECRET; if that is unset too, the connection is not
  // authenticated (a service with a secret then never answers: Unavailable).
  std::string secret;
  ipc::RpcChannelOptions channel;
};

class KvClient {
 public:
  // Errors: InvalidArgument (a secret that is not a Z85 CURVE key); as
  // RpcChannel::Connect.
  static absl::StatusOr<std::unique_ptr<KvClient>> Connect(
      const std::string& endpoint, KvClientOptions options = {});

  absl::Status Set(absl::string_view key, absl::string_view value);
  // The key's value, waiting up to `wait` for it to be set.
  // Errors: NotFound (absent, no wait), DeadlineExceeded (not set in time).
  absl::StatusOr<std::string> Get(absl::string_view key,
                                  absl::Duration wait = absl::ZeroDuration());
  // Adds `delta` to the key's integer value (absent: 0); returns the sum.
  // Errors: InvalidArgument (the value is not an integer).
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta);
  // Sets `desired` if the key holds `expected`; returns whether it did.
  absl::StatusOr<bool> CompareAndSet(absl::string_view key,
                                     absl::string_view expected,
                                     absl::string_view desired);
  // Sets `value` only if the key is absent; returns whether it did, and in
  // `current` (if given) the value the key holds afterwards.
  absl::StatusOr<bool> SetIfAbsent(absl::string_view key,
                                   absl::string_view value,
                                   std::string* current = nullptr);
  // Returns whether the key existed.
  absl::StatusOr<bool> Delete(absl::string_view key);
  // Deletes every key with this prefix; returns how many.
  absl::StatusOr<uint64_t> DeletePrefix(absl::string_view prefix);
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> List(
      absl::string_view prefix);
  // Waits until every key exists. Errors: DeadlineExceeded naming the missing.
  absl::Status Wait(absl::Span<const std::string> keys, absl::Duration timeout);
  // Returns once `world` processes called Barrier(name, world).
  // Errors: DeadlineExceeded (someone did not come in time).
  absl::Status Barrier(absl::string_view name, uint32_t world,
                       absl::Duration timeout);

 private:
  KvClient(ipc::RpcChannel channel, KvClientOptions options)
      : channel_(std::move(channel)), options_(std::move(options)) {}
  // The RPC timeout for a call that waits server-side up to `wait`.
  absl::Duration RpcTimeoutFor(absl::Duration wait) const;

  ipc::RpcChannel channel_;
  KvClientOptions options_;
};

// Milliseconds for a wait on the wire: -1 for no limit (also for waits past
// kMaxKvWaitMs, which the service would refuse).
int64_t WireTimeoutMs(absl::Duration d);

// The CURVE public key of a job secret: the key pair both the service and its
// clients use. Errors: InvalidArgument (not a Z85 CURVE secret key).
absl::StatusOr<ipc::CurveKeyPair> KvKeyPairFromSecret(absl::string_view secret);

}  // namespace shoal::launch

#endif  // SHOAL_LAUNCH_KV_CLIENT_H_
