#include "launch/kv_client.h"

#include <zmq.h>

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "launch/kv_service.h"

namespace shoal::launch {

int64_t WireTimeoutMs(absl::Duration d) {
  if (d == absl::InfiniteDuration()) return -1;
  if (d <= absl::ZeroDuration()) return 0;
  if (d > absl::Milliseconds(kMaxKvWaitMs)) return -1;
  return std::max<int64_t>(1, absl::ToInt64Milliseconds(d));
}

absl::StatusOr<ipc::CurveKeyPair> KvKeyPairFromSecret(
    absl::string_view secret) {
  char public_key[41] = {};
  const std::string secret_z85(secret);
  if (!ipc::IsValidZ85Key(secret_z85) ||
      zmq_curve_public(public_key, secret_z85.c_str()) != 0) {
    return absl::InvalidArgumentError(
        "the key-value store's secret is not a Z85 CURVE key (40 characters)");
  }
  return ipc::CurveKeyPair{public_key, secret_z85};
}

absl::StatusOr<std::unique_ptr<KvClient>> KvClient::Connect(
    const std::string& endpoint, KvClientOptions options) {
  if (options.secret.empty()) {
    const char* from_env = std::getenv(kKvSecretEnv);
    if (from_env != nullptr) options.secret = from_env;
  }
  if (!options.secret.empty() && options.channel.server_key.empty()) {
    SHOAL_ASSIGN_OR_RETURN(ipc::CurveKeyPair keys,
                           KvKeyPairFromSecret(options.secret));
    options.channel.server_key = keys.public_key;
    options.channel.client_keys = std::move(keys);
  }
  options.channel.limits.max_frame_bytes = std::max<size_t>(
      options.channel.limits.max_frame_bytes, size_t{64} << 20);
  if (options.channel.peer.empty())
    options.channel.peer = "the key-value store";
  SHOAL_ASSIGN_OR_RETURN(ipc::RpcChannel channel,
                         ipc::RpcChannel::Connect(endpoint, options.channel));
  return std::unique_ptr<KvClient>(
      new KvClient(std::move(channel), std::move(options)));
}

absl::Duration KvClient::RpcTimeoutFor(absl::Duration wait) const {
  if (wait == absl::InfiniteDuration()) return absl::InfiniteDuration();
  return wait + options_.rpc_timeout;
}

absl::Status KvClient::Set(absl::string_view key, absl::string_view value) {
  return channel_
      .Call<ipc::OkReply>(
          ipc::KvSetRequest{std::string(key), std::string(value)},
          options_.rpc_timeout)
      .status();
}

absl::StatusOr<std::string> KvClient::Get(absl::string_view key,
                                          absl::Duration wait) {
  SHOAL_ASSIGN_OR_RETURN(
      ipc::KvValue v,
      channel_.Call<ipc::KvValue>(
          ipc::KvGetRequest{std::string(key), WireTimeoutMs(wait)},
          RpcTimeoutFor(wait)));
  if (!v.found) return absl::NotFoundError(absl::StrCat("no key '", key, "'"));
  return std::move(v.value);
}

absl::StatusOr<int64_t> KvClient::Add(absl::string_view key, int64_t delta) {
  SHOAL_ASSIGN_OR_RETURN(
      ipc::KvValue v,
      channel_.Call<ipc::KvValue>(ipc::KvAddRequest{std::string(key), delta},
                                  options_.rpc_timeout));
  int64_t sum;
  if (!absl::SimpleAtoi(v.value, &sum))
    return absl::InternalError("non-integer add reply");
  return sum;
}

absl::StatusOr<bool> KvClient::CompareAndSet(absl::string_view key,
                                             absl::string_view expected,
                                             absl::string_view desired) {
  SHOAL_ASSIGN_OR_RETURN(
      ipc::KvValue v,
      channel_.Call<ipc::KvValue>(
          ipc::KvCompareAndSetRequest{std::string(key), std::string(expected),
                                      std::string(desired), false},
          options_.rpc_timeout));
  return v.found;
}

absl::StatusOr<bool> KvClient::SetIfAbsent(absl::string_view key,
                                           absl::string_view value,
                                           std::string* current) {
  SHOAL_ASSIGN_OR_RETURN(
      ipc::KvValue v, channel_.Call<ipc::KvValue>(
                          ipc::KvCompareAndSetRequest{std::string(key), "",
                                                      std::string(value), true},
                          options_.rpc_timeout));
  if (current != nullptr) *current = std::move(v.value);
  return v.found;
}

absl::StatusOr<bool> KvClient::Delete(absl::string_view key) {
  SHOAL_ASSIGN_OR_RETURN(
      ipc::KvValue v,
      channel_.Call<ipc::KvValue>(ipc::KvDeleteRequest{std::string(key), false},
                                  options_.rpc_timeout));
  return v.found;
}

absl::StatusOr<uint64_t> KvClient::DeletePrefix(absl::string_view prefix) {
  SHOAL_ASSIGN_OR_RETURN(ipc::KvValue v,
                         channel_.Call<ipc::KvValue>(
                             ipc::KvDeleteRequest{std::string(prefix), true},
                             options_.rpc_timeout));
  return v.count;
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> KvClient::List(
    absl::string_view prefix) {
  SHOAL_ASSIGN_OR_RETURN(
      ipc::KvListReply r,
      channel_.Call<ipc::KvListReply>(ipc::KvListRequest{std::string(prefix)},
                                      options_.rpc_timeout));
  return std::move(r.entries);
}

absl::Status KvClient::Wait(absl::Span<const std::string> keys,
                            absl::Duration timeout) {
  ipc::KvWaitRequest w;
  w.keys.assign(keys.begin(), keys.end());
  w.timeout_ms = WireTimeoutMs(timeout);
  return channel_.Call<ipc::OkReply>(std::move(w), RpcTimeoutFor(timeout))
      .status();
}

absl::Status KvClient::Barrier(absl::string_view name, uint32_t world,
                               absl::Duration timeout) {
  return channel_
      .Call<ipc::OkReply>(
          ipc::BarrierRequest{std::string(name), world, WireTimeoutMs(timeout)},
          RpcTimeoutFor(timeout))
      .status();
}

}  // namespace shoal::launch
