#include "ipc/object_id.h"

#include <sys/random.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace shoal {
namespace {

// Random bytes from the kernel's CSPRNG, fetched 4 KiB at a time per thread:
// an id must not be predictable from others (it is a capability: whoever
// knows it may read the object, docs/security.md), and one getrandom() per
// id would cost a system call each. A forked child refills (its pid differs),
// so parent and child never hand out the same bytes.
struct RandomPool {
  unsigned char bytes[4096];
  size_t used = sizeof(bytes);
  pid_t pid = 0;
};

void RandomBytes(unsigned char* out, size_t n) {
  thread_local RandomPool pool;
  const pid_t pid = getpid();
  if (pool.pid != pid || pool.used + n > sizeof(pool.bytes)) {
    size_t got = 0;
    while (got < sizeof(pool.bytes)) {
      const ssize_t r =
          getrandom(pool.bytes + got, sizeof(pool.bytes) - got, 0);
      if (r > 0) {
        got += static_cast<size_t>(r);
      } else if (errno != EINTR) {
        abort();  // no kernel randomness: ids would be guessable
      }
    }
    pool.used = 0;
    pool.pid = pid;
  }
  std::memcpy(out, pool.bytes + pool.used, n);
  // Bytes handed out are erased, so a later memory disclosure shows none.
  std::memset(pool.bytes + pool.used, 0, n);
  pool.used += n;
}

}  // namespace

ObjectId ObjectId::Random() {
  ObjectId id;
  RandomBytes(id.bytes_.data(), kSize);
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
