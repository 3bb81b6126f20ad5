// What shm/'s store tests and their helper process agree on: numbered test
// objects' ids and bytes, and starting the helper.
#ifndef SHOAL_SHM_STORE_TEST_UTIL_H_
#define SHOAL_SHM_STORE_TEST_UTIL_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "ipc/object_id.h"

namespace shoal::shm {

// Object number n's id: n in its first 8 bytes, a tag in the rest.
inline ObjectId TestObjectId(uint64_t n) {
  char bytes[ObjectId::kSize];
  std::memcpy(bytes, &n, sizeof(n));
  std::memcpy(bytes + sizeof(n), "storetst", 8);
  return *ObjectId::FromBinary(std::string(bytes, sizeof(bytes)));
}

// Object number n's bytes: n in every 8-byte word (a tail of n's low byte).
inline std::vector<uint8_t> TestPattern(uint64_t n, uint64_t bytes) {
  std::vector<uint8_t> v(bytes, static_cast<uint8_t>(n));
  for (uint64_t i = 0; i + 8 <= bytes; i += 8) std::memcpy(&v[i], &n, 8);
  return v;
}

inline bool HasTestPattern(const uint8_t* data, uint64_t nbytes, uint64_t n,
                           uint64_t bytes) {
  if (nbytes != bytes) return false;
  const std::vector<uint8_t> want = TestPattern(n, bytes);
  return std::memcmp(data, want.data(), bytes) == 0;
}

}  // namespace shoal::shm

#endif  // SHOAL_SHM_STORE_TEST_UTIL_H_
