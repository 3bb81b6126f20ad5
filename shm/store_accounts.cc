#include "shm/store_accounts.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace shoal::shm {
namespace {

// CheckCharge's limit error reads "store account <n> holds <m> bytes in <k>
// objects; <b> more would exceed its limit of <l> bytes". IsLimitError looks
// for its start and these words (the status crosses the store's wire as a
// code and a message only).
constexpr char kLimitPrefix[] = "store account ";
constexpr char kLimitWords[] = " more would exceed its limit of ";

}  // namespace

absl::Status StoreAccounts::SetLimit(uint32_t account, uint64_t limit_bytes) {
  if (account == 0) {
    return absl::InvalidArgumentError(
        "store account 0 means none: it has no limit to set");
  }
  auto it = accounts_.find(account);
  if (limit_bytes == 0) {
    if (it != accounts_.end()) {
      if (it->second.objects == 0) {
        accounts_.erase(it);
      } else {
        it->second.limit_bytes = 0;
      }
    }
    return absl::OkStatus();
  }
  accounts_[account].limit_bytes = limit_bytes;
  return absl::OkStatus();
}

absl::StatusOr<StoreAccounts::Usage> StoreAccounts::Get(
    uint32_t account) const {
  if (account == 0) {
    return absl::InvalidArgumentError(
        "store account 0 means none: nothing is charged to it");
  }
  auto it = accounts_.find(account);
  if (it == accounts_.end()) {
    return absl::NotFoundError(
        absl::StrCat("store account ", account, " does not exist"));
  }
  return Usage{it->second.limit_bytes, it->second.used_bytes,
               it->second.objects};
}

absl::Status StoreAccounts::CheckCharge(uint32_t account,
                                        uint64_t bytes) const {
  if (account == 0) return absl::OkStatus();
  auto it = accounts_.find(account);
  if (it == accounts_.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("store account ", account,
                     " does not exist (setting its limit creates it)"));
  }
  const Account& a = it->second;
  if (a.limit_bytes != 0 && bytes <= a.limit_bytes &&
      a.used_bytes <= a.limit_bytes - bytes) {
    return absl::OkStatus();
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      kLimitPrefix, account, " holds ", a.used_bytes, " bytes in ", a.objects,
      a.objects == 1 ? " object; " : " objects; ", bytes, kLimitWords,
      a.limit_bytes, " bytes",
      a.limit_bytes == 0 ? " (it is being removed once it holds nothing)"
                         : ""));
}

void StoreAccounts::Charge(uint32_t account, uint32_t entry, uint64_t bytes) {
  if (account == 0) return;
  Account& a = accounts_[account];
  a.used_bytes += bytes;
  ++a.objects;
  charges_[entry] = EntryCharge{account, bytes};
}

void StoreAccounts::UnchargeSlow(uint32_t entry) {
  auto c = charges_.find(entry);
  if (c == charges_.end()) return;
  auto it = accounts_.find(c->second.account);
  if (it != accounts_.end()) {
    Account& a = it->second;
    a.used_bytes -= std::min(a.used_bytes, c->second.bytes);
    if (a.objects > 0) --a.objects;
    if (a.limit_bytes == 0 && a.objects == 0) accounts_.erase(it);
  }
  charges_.erase(c);
}

uint32_t StoreAccounts::AccountOf(uint32_t entry) const {
  auto c = charges_.find(entry);
  return c == charges_.end() ? 0 : c->second.account;
}

bool StoreAccounts::IsLimitError(const absl::Status& s) {
  return absl::IsResourceExhausted(s) &&
         absl::StartsWith(s.message(), kLimitPrefix) &&
         absl::StrContains(s.message(), kLimitWords);
}

}  // namespace shoal::shm
