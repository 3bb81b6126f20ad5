#include "collectives/rendezvous/kv_rendezvous.h"

#include <cstdint>

namespace shoal::collectives {

absl::Status KvRendezvous::Set(absl::string_view key, absl::string_view value) {
  return kv_.Set(key, value);
}

absl::StatusOr<std::string> KvRendezvous::Get(absl::string_view key,
                                              absl::Duration timeout) {
  return kv_.Get(key, timeout);
}

absl::Status KvRendezvous::Delete(absl::string_view key) {
  // Whether the key was there does not matter to a rendezvous.
  return kv_.Delete(key).status();
}

absl::Status KvRendezvous::Barrier(absl::string_view name, int world,
                                   absl::Duration timeout) {
  if (world < 1) {
    return absl::InvalidArgumentError("a barrier needs at least one caller");
  }
  return kv_.Barrier(name, static_cast<uint32_t>(world), timeout);
}

}  // namespace shoal::collectives
