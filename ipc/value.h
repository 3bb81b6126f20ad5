// Value: a task's argument or output — a scalar, text, bytes, an inline tensor,
// or a tensor in the node's store passed by reference.
#ifndef SHOAL_IPC_VALUE_H_
#define SHOAL_IPC_VALUE_H_

#include <cstdint>
#include <string>
#include <variant>

#include "ipc/object_id.h"
#include "ipc/tensor_meta.h"

namespace shoal {

// Values up to this size travel inside messages; larger tensors and bytes go
// through the store and only their id travels.
inline constexpr uint64_t kInlineValueLimit = 64 << 10;

// A tensor whose bytes travel with it (owned).
struct TensorValue {
  TensorMeta meta;
  std::string data;
};

// A tensor in the node's store, passed by id; readers map it zero-copy.
struct ObjectValue {
  ObjectId id;
  TensorMeta meta;
  uint64_t nbytes = 0;
};

// Raw bytes (distinct from text).
struct BytesValue {
  std::string data;
};

using Value = std::variant<std::monostate, bool, int64_t, double, std::string,
                           BytesValue, TensorValue, ObjectValue>;

// A short human rendering: 3, 2.5, "text", bytes[12], f32[2,3]{1, 2, ...},
// obj:ab12….
std::string ValueToString(const Value& v);

// "none", "bool", "int", "float", "str", "bytes", "tensor", "object".
const char* ValueKindName(const Value& v);

}  // namespace shoal

#endif  // SHOAL_IPC_VALUE_H_
