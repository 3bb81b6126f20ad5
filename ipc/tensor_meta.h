// What a store object holds: raw bytes, or a tensor with dtype, shape and
// strides, on the CPU or on a CUDA device.
#ifndef SHOAL_IPC_TENSOR_META_H_
#define SHOAL_IPC_TENSOR_META_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace shoal {

// Element types. Values are part of the wire format and the shared-memory
// layout: append only.
enum class DType : uint8_t {
  kRaw = 0,  // an untyped byte buffer
  kF16 = 1,
  kBF16 = 2,
  kF32 = 3,
  kF64 = 4,
  kI8 = 5,
  kI16 = 6,
  kI32 = 7,
  kI64 = 8,
  kU8 = 9,
  kBool = 10,
};
inline constexpr int kNumDTypes = 11;

// Bytes per element (1 for kRaw).
size_t DTypeSize(DType t);
// "f32", "bf16", "raw", ...
absl::string_view DTypeName(DType t);
// Parses DTypeName's spelling (and "float32", "float16", "int64", ... aliases).
absl::StatusOr<DType> ParseDType(absl::string_view name);
// True if `v` names a DType.
bool IsValidDType(uint32_t v);

struct Device {
  enum class Type : uint8_t { kCpu = 0, kCuda = 1 };
  Type type = Type::kCpu;
  int32_t index = 0;  // the CUDA device ordinal as the owning process sees it

  static Device Cpu() { return {}; }
  static Device Cuda(int32_t i) { return {Type::kCuda, i}; }
  bool is_cpu() const { return type == Type::kCpu; }
  std::string ToString() const;  // "cpu" or "cuda:K"
  friend bool operator==(const Device& a, const Device& b) {
    return a.type == b.type && (a.type == Type::kCpu || a.index == b.index);
  }
};
// Parses "cpu", "cuda", "cuda:K".
absl::StatusOr<Device> ParseDevice(absl::string_view s);

// The most dimensions a tensor may have (PyTorch allows more; 8 covers every
// layout the examples and typical models use and keeps table entries
// fixed-size).
inline constexpr int kMaxRank = 8;

// Shape or strides, stored inline: describing a tensor never allocates (a
// store Get builds one on its fast path).
using Dims = absl::InlinedVector<int64_t, kMaxRank>;

struct TensorMeta {
  DType dtype = DType::kRaw;
  Dims shape;    // empty: a scalar
  Dims strides;  // in elements; empty means C-contiguous
  Device device;

  // A raw byte buffer of n bytes: dtype kRaw, shape {n}.
  static TensorMeta Bytes(int64_t n);
  // A C-contiguous tensor.
  static TensorMeta Contiguous(DType dtype, Dims shape,
                               Device device = Device::Cpu());

  int64_t NumElements() const;
  // The bytes the buffer must hold: for strided tensors, the span from the
  // first to one past the last element.
  int64_t NumBytes() const;
  // Strides if given, else the C-contiguous strides of shape.
  Dims EffectiveStrides() const;
  bool IsContiguous() const;
  std::string ToString() const;  // "f32[2,3] cpu"

  // OK, or InvalidArgument naming the problem: an unknown dtype, rank above
  // kMaxRank, a negative dimension or stride, strides of a different rank than
  // shape, or a byte size that overflows int64.
  absl::Status Validate() const;

  friend bool operator==(const TensorMeta& a, const TensorMeta& b) {
    return a.dtype == b.dtype && a.shape == b.shape &&
           a.EffectiveStrides() == b.EffectiveStrides() && a.device == b.device;
  }
};

}  // namespace shoal

#endif  // SHOAL_IPC_TENSOR_META_H_
