#include "ipc/object_id.h"

#include <sys/random.h>
#include <unistd.h>

#include <atomic>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace shoal {
namespace {

// SplitMix64: turns a counter into well-spread bits.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

ObjectId ObjectId::Random() {
  // One getrandom() per process seeds the stream; fork() children re-seed
  // because the pid they record differs.
  static std::atomic<uint64_t> counter{0};
  static std::atomic<uint64_t> seed{0};
  static std::atomic<pid_t> seed_pid{0};
  const pid_t pid = getpid();
  if (seed_pid.load(std::memory_order_acquire) != pid) {
    uint64_t s = 0;
    if (getrandom(&s, sizeof(s), 0) != sizeof(s)) {
      s = Mix(static_cast<uint64_t>(pid) << 32 ^
              static_cast<uint64_t>(reinterpret_cast<uintptr_t>(&s)));
    }
    seed.store(s, std::memory_order_relaxed);
    seed_pid.store(pid, std::memory_order_release);
  }
  const uint64_t n = counter.fetch_add(1, std::memory_order_relaxed);
  const uint64_t s = seed.load(std::memory_order_relaxed);
  uint64_t words[2] = {Mix(s ^ Mix(n)),
                       Mix(s + n) ^ static_cast<uint64_t>(pid)};
  ObjectId id;
  std::memcpy(id.bytes_.data(), words, kSize);
  if (id.IsNil()) id.bytes_[0] = 1;
  return id;
}

absl::StatusOr<ObjectId> ObjectId::FromBinary(absl::string_view bytes) {
  if (bytes.size() != kSize) {
    return absl::InvalidArgumentError(absl::StrCat(
        "object id must be ", kSize, " bytes, got ", bytes.size()));
  }
  ObjectId id;
  std::memcpy(id.bytes_.data(), bytes.data(), kSize);
  return id;
}

absl::StatusOr<ObjectId> ObjectId::FromHex(absl::string_view hex) {
  if (hex.size() != 2 * kSize) {
    return absl::InvalidArgumentError(absl::StrCat(
        "object id must be ", 2 * kSize, " hex digits, got '", hex, "'"));
  }
  for (char c : hex) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) {
      return absl::InvalidArgumentError(
          absl::StrCat("object id has a non-hex digit: '", hex, "'"));
    }
  }
  return FromBinary(absl::HexStringToBytes(hex));
}

std::string ObjectId::ToHex() const { return absl::BytesToHexString(Binary()); }

}  // namespace shoal
