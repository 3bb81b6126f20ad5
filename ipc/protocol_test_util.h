// Test-only helpers shared by the ipc/protocol tests: value comparison, sample
// values of every kind, and encode/decode round trips.
#ifndef SHOAL_IPC_PROTOCOL_TEST_UTIL_H_
#define SHOAL_IPC_PROTOCOL_TEST_UTIL_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "gtest/gtest.h"
#include "ipc/messages.h"
#include "ipc/protocol.h"
#include "ipc/tensor_meta.h"
#include "ipc/value.h"
#include "proto/shoal.pb.h"

namespace shoal::ipc::protocol_test {

// Equality for Value (BytesValue, TensorValue and ObjectValue have no ==).
// Doubles compare bit for bit, so NaN and -0.0 must survive exactly.
bool SameValue(const Value& a, const Value& b);

// Expects `got` to hold the same values as `want`, one by one (SameValue).
void ExpectSameValues(const std::vector<Value>& want,
                      const std::vector<Value>& got);

// `nbytes` bytes of a recognisable pattern that starts at `seed`.
std::string Pattern(size_t nbytes, uint8_t seed = 1);

// An inline tensor of `meta` filled with Pattern bytes.
TensorValue Tensor(TensorMeta meta);

// `dtype` and `shape` with explicit `strides`.
TensorMeta Strided(DType dtype, Dims shape, Dims strides);

// One value of every kind, with edge cases of each.
std::vector<Value> EveryKindOfValue();

// Encodes `body`, decodes it back, checks the request id and name, and returns
// the decoded body as T.
template <class T>
T RoundTrip(const T& body, absl::string_view name,
            const DecodeLimits& limits = DecodeLimits()) {
  constexpr uint64_t kRequestId = 0xfeedface12345678ull;
  EXPECT_EQ(MessageName(Message(body)), name);
  auto frame = Encode(kRequestId, body);
  EXPECT_TRUE(frame.ok()) << frame.status();
  if (!frame.ok()) return T{};
  DecodeResult r = Decode(*frame, limits);
  EXPECT_TRUE(r.envelope.ok()) << r.envelope.status();
  if (!r.envelope.ok()) return T{};
  EXPECT_EQ(r.request_id, kRequestId);
  EXPECT_EQ(r.envelope->request_id, kRequestId);
  EXPECT_EQ(MessageName(r.envelope->body), name);
  const T* got = std::get_if<T>(&r.envelope->body);
  EXPECT_NE(got, nullptr) << "decoded as " << MessageName(r.envelope->body);
  return got ? *got : T{};
}

// Flips, drops or inserts bytes of `bytes` in 1 to 4 random places: mutated
// valid frames reach the validation code far more often than random bytes.
void MutateBytes(std::mt19937_64& rng, std::string* bytes);

// The status code of decoding the serialised wire envelope `w`.
absl::StatusCode DecodeCode(wire::Envelope w,
                            const DecodeLimits& limits = DecodeLimits());

// The status code of decoding a frame made by Encode from `body`.
absl::StatusCode EncodeDecodeCode(const Message& body,
                                  const DecodeLimits& limits = DecodeLimits());

}  // namespace shoal::ipc::protocol_test

#endif  // SHOAL_IPC_PROTOCOL_TEST_UTIL_H_
