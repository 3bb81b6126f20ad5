#include "ipc/tensor_meta.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace shoal {
namespace {

struct DTypeInfo {
  DType type;
  size_t size;
  absl::string_view name;
};

constexpr DTypeInfo kDTypes[kNumDTypes] = {
    {DType::kRaw, 1, "raw"},   {DType::kF16, 2, "f16"},
    {DType::kBF16, 2, "bf16"}, {DType::kF32, 4, "f32"},
    {DType::kF64, 8, "f64"},   {DType::kI8, 1, "i8"},
    {DType::kI16, 2, "i16"},   {DType::kI32, 4, "i32"},
    {DType::kI64, 8, "i64"},   {DType::kU8, 1, "u8"},
    {DType::kBool, 1, "bool"},
};

}  // namespace

bool IsValidDType(uint32_t v) { return v < kNumDTypes; }

size_t DTypeSize(DType t) {
  return IsValidDType(static_cast<uint32_t>(t))
             ? kDTypes[static_cast<int>(t)].size
             : 0;
}

absl::string_view DTypeName(DType t) {
  return IsValidDType(static_cast<uint32_t>(t))
             ? kDTypes[static_cast<int>(t)].name
             : "invalid";
}

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  const std::string n = absl::AsciiStrToLower(name);
  for (const DTypeInfo& info : kDTypes) {
    if (n == info.name) return info.type;
  }
  static constexpr std::pair<absl::string_view, DType> kAliases[] = {
      {"float16", DType::kF16},   {"half", DType::kF16},
      {"bfloat16", DType::kBF16}, {"float32", DType::kF32},
      {"float", DType::kF32},     {"float64", DType::kF64},
      {"double", DType::kF64},    {"int8", DType::kI8},
      {"int16", DType::kI16},     {"int32", DType::kI32},
      {"int64", DType::kI64},     {"uint8", DType::kU8},
      {"bytes", DType::kRaw},
  };
  for (const auto& [alias, type] : kAliases) {
    if (n == alias) return type;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown dtype '", name,
      "' (expected raw, f16, bf16, f32, f64, i8, i16, i32, i64, u8 or bool)"));
}

std::string Device::ToString() const {
  return type == Type::kCpu ? "cpu" : absl::StrCat("cuda:", index);
}

absl::StatusOr<Device> ParseDevice(absl::string_view s) {
  if (s == "cpu") return Device::Cpu();
  if (s == "cuda") return Device::Cuda(0);
  if (absl::StartsWith(s, "cuda:")) {
    int32_t i;
    if (absl::SimpleAtoi(s.substr(5), &i) && i >= 0) return Device::Cuda(i);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown device '", s, "' (expected cpu, cuda or cuda:K)"));
}

TensorMeta TensorMeta::Bytes(int64_t n) {
  TensorMeta m;
  m.dtype = DType::kRaw;
  m.shape = {n};
  return m;
}

TensorMeta TensorMeta::Contiguous(DType dtype, Dims shape, Device device) {
  TensorMeta m;
  m.dtype = dtype;
  m.shape = std::move(shape);
  m.device = device;
  return m;
}

int64_t TensorMeta::NumElements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Dims TensorMeta::EffectiveStrides() const {
  if (!strides.empty()) return strides;
  Dims s(shape.size());
  int64_t step = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    s[i] = step;
    step *= shape[i];
  }
  return s;
}

bool TensorMeta::IsContiguous() const {
  if (strides.empty()) return true;
  const Dims c = TensorMeta::Contiguous(dtype, shape).EffectiveStrides();
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] != 1 && strides[i] != c[i]) return false;
  }
  return true;
}

int64_t TensorMeta::NumBytes() const {
  const int64_t elem = static_cast<int64_t>(DTypeSize(dtype));
  if (NumElements() == 0) return 0;
  const Dims s = EffectiveStrides();
  int64_t last = 0;  // index of the last element
  for (size_t i = 0; i < shape.size(); ++i) last += (shape[i] - 1) * s[i];
  return (last + 1) * elem;
}

std::string TensorMeta::ToString() const {
  std::string out =
      absl::StrCat(DTypeName(dtype), "[", absl::StrJoin(shape, ","), "]");
  if (!IsContiguous()) {
    absl::StrAppend(&out, " strides(", absl::StrJoin(strides, ","), ")");
  }
  absl::StrAppend(&out, " ", device.ToString());
  return out;
}

absl::Status TensorMeta::Validate() const {
  if (!IsValidDType(static_cast<uint32_t>(dtype))) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown dtype value ", static_cast<int>(dtype)));
  }
  if (shape.size() > static_cast<size_t>(kMaxRank)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor rank ", shape.size(), " exceeds the maximum of ", kMaxRank));
  }
  if (!strides.empty() && strides.size() != shape.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("strides have rank ", strides.size(),
                     " but shape has rank ", shape.size()));
  }
  // Every intermediate product must stay below 2^62 so sizes cannot overflow.
  constexpr int64_t kLimit = int64_t{1} << 62;
  int64_t elems = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("dimension ", i, " is negative (", shape[i], ")"));
    }
    if (shape[i] != 0 && elems > kLimit / shape[i]) {
      return absl::InvalidArgumentError("tensor size overflows 64 bits");
    }
    elems *= shape[i];
  }
  int64_t span = 1;
  for (size_t i = 0; i < strides.size(); ++i) {
    if (strides[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("stride ", i, " is negative (", strides[i], ")"));
    }
    if (shape[i] > 1 && (strides[i] > kLimit / shape[i] ||
                         span > kLimit - strides[i] * shape[i])) {
      return absl::InvalidArgumentError("tensor strides overflow 64 bits");
    }
    if (shape[i] > 1) span += strides[i] * (shape[i] - 1);
  }
  const int64_t elem = static_cast<int64_t>(DTypeSize(dtype));
  if (std::max(elems, span) > kLimit / elem) {
    return absl::InvalidArgumentError("tensor byte size overflows 64 bits");
  }
  if (device.type != Device::Type::kCpu && device.type != Device::Type::kCuda) {
    return absl::InvalidArgumentError("unknown device type");
  }
  if (device.index < 0) {
    return absl::InvalidArgumentError("negative device index");
  }
  return absl::OkStatus();
}

}  // namespace shoal
