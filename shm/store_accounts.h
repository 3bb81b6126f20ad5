// StoreAccounts: the store service's book of accounts — per account, a byte
// limit and the bytes of live objects charged to it.
//
// An object created with an account (CreateOptions::account) is charged its
// reserved bytes from Create until the service frees it (deleted and
// unreferenced, evicted, aborted, or aborted because its creator died),
// whoever holds it meanwhile. The book lives in the service's private memory
// and is used from its thread only, like the allocator: only the service
// allocates and frees, so no client can corrupt it or leave it half-updated.
// Account 0 means none: nothing is charged, and an object without an
// account costs the book one lookup in an empty map when it is freed.
#ifndef SHOAL_SHM_STORE_ACCOUNTS_H_
#define SHOAL_SHM_STORE_ACCOUNTS_H_

#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace shoal::shm {

class StoreAccounts {
 public:
  struct Usage {
    uint64_t limit_bytes = 0;
    uint64_t used_bytes = 0;
    uint64_t objects = 0;
  };

  // Sets `account`'s limit, creating it. Limit 0 removes the account once
  // it holds no object (at once if it holds none; nothing for an account
  // that does not exist). Errors: InvalidArgument (account 0).
  absl::Status SetLimit(uint32_t account, uint64_t limit_bytes);

  // The account's limit and what it holds. Errors: InvalidArgument (account
  // 0), NotFound (no such account).
  absl::StatusOr<Usage> Get(uint32_t account) const;

  // Whether `bytes` more may be charged to `account` (0: always).
  // Errors: FailedPrecondition (no such account), ResourceExhausted (the
  // account's limit would be exceeded, or it is being removed: the message
  // names the account, its limit, what it holds and `bytes`; IsLimitError).
  absl::Status CheckCharge(uint32_t account, uint64_t bytes) const;

  // Charges `bytes` for table entry `entry` to `account` (0: does nothing).
  // REQUIRES: CheckCharge(account, bytes) is OK; `entry` is not charged.
  void Charge(uint32_t account, uint32_t entry, uint64_t bytes);

  // Takes entry `entry`'s charge back off its account, if it has one (its
  // object is being freed); removes an account that was set to limit 0 once
  // it holds nothing.
  void Uncharge(uint32_t entry) {
    if (charges_.empty()) return;
    UnchargeSlow(entry);
  }

  // The account `entry` is charged to (0: none).
  uint32_t AccountOf(uint32_t entry) const;

  size_t size() const { return accounts_.size(); }

  // Whether `s` is CheckCharge's limit error.
  static bool IsLimitError(const absl::Status& s);

 private:
  struct Account {
    uint64_t limit_bytes = 0;  // 0: removed once it holds nothing
    uint64_t used_bytes = 0;
    uint64_t objects = 0;
  };
  struct EntryCharge {
    uint32_t account = 0;
    uint64_t bytes = 0;
  };

  void UnchargeSlow(uint32_t entry);

  absl::flat_hash_map<uint32_t, Account> accounts_;
  absl::flat_hash_map<uint32_t, EntryCharge> charges_;  // by table entry
};

}  // namespace shoal::shm

#endif  // SHOAL_SHM_STORE_ACCOUNTS_H_
