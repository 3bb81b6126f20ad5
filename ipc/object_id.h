// ObjectId: the 16-byte name of a store object, unique per node and job.
#ifndef SHOAL_IPC_OBJECT_ID_H_
#define SHOAL_IPC_OBJECT_ID_H_

#include <array>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shoal {

class ObjectId {
 public:
  static constexpr size_t kSize = 16;

  // The all-zero id, which no object ever has.
  constexpr ObjectId() : bytes_{} {}

  // A fresh id: 16 bytes from the kernel's CSPRNG (getrandom), so ids are
  // unpredictable (an id is a capability to read its object) and never
  // collide in practice.
  static ObjectId Random();

  // Exactly kSize raw bytes; anything else is InvalidArgument.
  static absl::StatusOr<ObjectId> FromBinary(absl::string_view bytes);
  // 32 hex digits (as ToHex prints); anything else is InvalidArgument.
  static absl::StatusOr<ObjectId> FromHex(absl::string_view hex);

  absl::string_view Binary() const {
    return {reinterpret_cast<const char*>(bytes_.data()), kSize};
  }
  std::string ToHex() const;
  bool IsNil() const { return *this == ObjectId(); }
  const uint8_t* data() const { return bytes_.data(); }

  // A well-mixed 64-bit hash (the id is random, so its first word is enough).
  uint64_t Hash() const {
    uint64_t h;
    std::memcpy(&h, bytes_.data(), sizeof(h));
    return h;
  }

  friend bool operator==(const ObjectId& a, const ObjectId& b) {
    return a.bytes_ == b.bytes_;
  }
  friend bool operator!=(const ObjectId& a, const ObjectId& b) {
    return !(a == b);
  }
  friend bool operator<(const ObjectId& a, const ObjectId& b) {
    return a.bytes_ < b.bytes_;
  }
  template <typename H>
  friend H AbslHashValue(H h, const ObjectId& id) {
    return H::combine(std::move(h), id.Hash());
  }

 private:
  std::array<uint8_t, kSize> bytes_;
};

}  // namespace shoal

#endif  // SHOAL_IPC_OBJECT_ID_H_
