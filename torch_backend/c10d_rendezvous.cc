#include "torch_backend/c10d_rendezvous.h"

#include <chrono>
#include <exception>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace shoal::torch_backend {

namespace {

// c10d reports a wait that ran out as an exception whose message says so
// ("Socket Timeout", "Timeout waiting for key", "Wait timeout").
absl::Status FromStoreException(const std::exception& e, absl::string_view what,
                                absl::string_view key) {
  const std::string message = e.what();
  const std::string context =
      absl::StrCat(what, " '", key, "' in torch's store: ");
  if (absl::StrContains(absl::AsciiStrToLower(message), "timeout")) {
    return absl::DeadlineExceededError(absl::StrCat(context, message));
  }
  return absl::UnavailableError(absl::StrCat(context, message));
}

std::chrono::milliseconds ToStoreTimeout(absl::Duration timeout) {
  if (timeout == absl::InfiniteDuration()) return ::c10d::Store::kNoTimeout;
  // kNoTimeout is zero: a wait of "nothing" becomes one millisecond.
  return std::max(std::chrono::milliseconds(1),
                  absl::ToChronoMilliseconds(timeout));
}

}  // namespace

absl::Status C10dRendezvous::Set(absl::string_view key,
                                 absl::string_view value) {
  try {
    store_->set(std::string(key),
                std::vector<uint8_t>(value.begin(), value.end()));
    return absl::OkStatus();
  } catch (const std::exception& e) {
    return FromStoreException(e, "set", key);
  }
}

absl::StatusOr<std::string> C10dRendezvous::Get(absl::string_view key,
                                                absl::Duration timeout) {
  const std::string k(key);
  try {
    if (timeout <= absl::ZeroDuration()) {
      if (!store_->check({k})) {
        return absl::NotFoundError(absl::StrCat("'", key, "' is not set"));
      }
    } else {
      store_->wait({k}, ToStoreTimeout(timeout));
    }
    std::vector<uint8_t> value = store_->get(k);
    return std::string(value.begin(), value.end());
  } catch (const std::exception& e) {
    return FromStoreException(e, "get", key);
  }
}

absl::Status C10dRendezvous::Delete(absl::string_view key) {
  try {
    store_->deleteKey(std::string(key));
    return absl::OkStatus();
  } catch (const std::exception& e) {
    return FromStoreException(e, "delete", key);
  }
}

absl::Status C10dRendezvous::Barrier(absl::string_view name, int world,
                                     absl::Duration timeout) {
  if (world < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("barrier '", name, "' of ", world, " callers"));
  }
  try {
    const int64_t arrival = store_->add(absl::StrCat(name, "/arrivals"), 1);
    const int64_t round = (arrival - 1) / world;
    const std::string done = absl::StrCat(name, "/round/", round);
    if (arrival % world == 0) store_->set(done, std::vector<uint8_t>{1});
    store_->wait({done}, ToStoreTimeout(timeout));
    return absl::OkStatus();
  } catch (const std::exception& e) {
    return FromStoreException(e, "barrier", name);
  }
}

}  // namespace shoal::torch_backend
