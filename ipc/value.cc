#include "ipc/value.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/overloaded.h"

namespace shoal {
namespace {

// The first few elements of a numeric tensor, for display.
std::string Preview(const TensorValue& t) {
  std::string out = t.meta.ToString();
  const size_t elem = DTypeSize(t.meta.dtype);
  if (elem == 0 || !t.meta.IsContiguous()) return out;
  const int64_t n = std::min<int64_t>(t.meta.NumElements(), 6);
  out += "{";
  for (int64_t i = 0; i < n && (i + 1) * static_cast<int64_t>(elem) <=
                                   static_cast<int64_t>(t.data.size());
       ++i) {
    const char* p = t.data.data() + i * elem;
    if (i) out += ", ";
    switch (t.meta.dtype) {
      case DType::kF32: {
        float f;
        std::memcpy(&f, p, 4);
        absl::StrAppend(&out, absl::StrFormat("%g", f));
        break;
      }
      case DType::kF64: {
        double d;
        std::memcpy(&d, p, 8);
        absl::StrAppend(&out, absl::StrFormat("%g", d));
        break;
      }
      case DType::kI32: {
        int32_t v;
        std::memcpy(&v, p, 4);
        absl::StrAppend(&out, v);
        break;
      }
      case DType::kI64: {
        int64_t v;
        std::memcpy(&v, p, 8);
        absl::StrAppend(&out, v);
        break;
      }
      default:
        absl::StrAppend(&out, static_cast<int>(static_cast<uint8_t>(*p)));
    }
  }
  if (t.meta.NumElements() > n) out += ", ...";
  return out + "}";
}

}  // namespace

std::string ValueToString(const Value& v) {
  return std::visit(
      Overloaded{
          [](std::monostate) -> std::string { return "none"; },
          [](bool b) -> std::string { return b ? "true" : "false"; },
          [](int64_t i) -> std::string { return absl::StrCat(i); },
          [](double d) -> std::string { return absl::StrFormat("%.17g", d); },
          [](const std::string& s) -> std::string {
            return absl::StrCat(
                "\"", s.size() > 80 ? s.substr(0, 77) + "..." : s, "\"");
          },
          [](const BytesValue& b) -> std::string {
            return absl::StrCat("bytes[", b.data.size(), "]");
          },
          [](const TensorValue& t) -> std::string { return Preview(t); },
          [](const ObjectValue& o) -> std::string {
            return absl::StrCat("object ", o.id.ToHex(), " ",
                                o.meta.ToString());
          },
      },
      v);
}

const char* ValueKindName(const Value& v) {
  static constexpr const char* kNames[] = {"none", "bool",  "int",    "float",
                                           "str",  "bytes", "tensor", "object"};
  return kNames[v.index()];
}

}  // namespace shoal
