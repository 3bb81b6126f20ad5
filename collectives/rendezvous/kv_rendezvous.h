// KvRendezvous: Rendezvous over the key-value store of a launched job
// (launch::KvClient), what Communicator uses in production. Each verb is one
// request to the store; waits happen server-side.
//
// Thread safety: as the KvClient it wraps (one thread at a time).
#ifndef SHOAL_COLLECTIVES_RENDEZVOUS_KV_RENDEZVOUS_H_
#define SHOAL_COLLECTIVES_RENDEZVOUS_KV_RENDEZVOUS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "collectives/rendezvous.h"
#include "launch/kv_client.h"

namespace shoal::collectives {

class KvRendezvous : public Rendezvous {
 public:
  // `kv` must outlive this object.
  explicit KvRendezvous(launch::KvClient& kv) : kv_(kv) {}

  // Errors: as KvClient's verbs of the same names (connection errors are
  // the RPC channel's: Unavailable, DeadlineExceeded).
  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key,
                                  absl::Duration timeout) override;
  absl::Status Delete(absl::string_view key) override;
  absl::Status Barrier(absl::string_view name, int world,
                       absl::Duration timeout) override;

 private:
  launch::KvClient& kv_;
};

}  // namespace shoal::collectives

#endif  // SHOAL_COLLECTIVES_RENDEZVOUS_KV_RENDEZVOUS_H_
