// C10dRendezvous: collectives::Rendezvous over the c10d::Store torch hands a
// process group (a TCPStore under env:// and torchrun, a FileStore, a
// HashStore, each behind the group's PrefixStore), so that shoal's
// communicators bootstrap wherever torch.distributed does.
//
// The store's exceptions stop here: every verb returns a Status.
// Thread safety: as the store (c10d's stores are thread-safe).
#ifndef SHOAL_TORCH_BACKEND_C10D_RENDEZVOUS_H_
#define SHOAL_TORCH_BACKEND_C10D_RENDEZVOUS_H_

#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "collectives/rendezvous.h"

namespace shoal::torch_backend {

class C10dRendezvous : public collectives::Rendezvous {
 public:
  // REQUIRES: `store` is not null.
  explicit C10dRendezvous(c10::intrusive_ptr<::c10d::Store> store)
      : store_(std::move(store)) {}

  // Errors: Unavailable (the store failed: its message).
  absl::Status Set(absl::string_view key, absl::string_view value) override;
  // Errors: NotFound (absent, no wait), DeadlineExceeded (not set within
  // `timeout`), Unavailable (the store failed).
  absl::StatusOr<std::string> Get(absl::string_view key,
                                  absl::Duration timeout) override;
  // Errors: Unavailable.
  absl::Status Delete(absl::string_view key) override;
  // A counter under `name` (store.add) counts arrivals; the caller that
  // completes a round sets that round's key, which everyone waits for. Keys
  // stay in the store (a few bytes per round). A different `world` among
  // the callers is not detected: the round then never completes, and every
  // caller gets DeadlineExceeded.
  // Errors: DeadlineExceeded, Unavailable.
  absl::Status Barrier(absl::string_view name, int world,
                       absl::Duration timeout) override;

 private:
  c10::intrusive_ptr<::c10d::Store> store_;
};

}  // namespace shoal::torch_backend

#endif  // SHOAL_TORCH_BACKEND_C10D_RENDEZVOUS_H_
