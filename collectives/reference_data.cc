#include "collectives/reference_data.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "collectives/reduce/reduce_kernels.h"

namespace shoal::collectives::testing {

double Value(int rank, int64_t i, ReduceOp op) {
  if (op == ReduceOp::kProd) {
    const int64_t v = ((rank + i) % 3) - 1;
    return static_cast<double>(v == 0 ? 2 : v);
  }
  return static_cast<double>(((rank * 7 + i * 3) % 13) - 6);
}

void StoreElement(DType t, void* base, int64_t i, double v) {
  auto* p = static_cast<uint8_t*>(base) + i * DTypeSize(t);
  auto put = [p](auto x) { std::memcpy(p, &x, sizeof(x)); };
  switch (t) {
    case DType::kF32:
      put(static_cast<float>(v));
      break;
    case DType::kF64:
      put(v);
      break;
    case DType::kI32:
      put(static_cast<int32_t>(v));
      break;
    case DType::kI64:
      put(static_cast<int64_t>(v));
      break;
    case DType::kF16:
      put(FloatToHalf(static_cast<float>(v)));
      break;
    case DType::kBF16:
      put(FloatToBF16(static_cast<float>(v)));
      break;
    default:
      break;
  }
}

double LoadElement(DType t, const void* base, int64_t i) {
  const auto* p = static_cast<const uint8_t*>(base) + i * DTypeSize(t);
  auto get = [p](auto x) {
    std::memcpy(&x, p, sizeof(x));
    return x;
  };
  switch (t) {
    case DType::kF32:
      return get(float{});
    case DType::kF64:
      return get(double{});
    case DType::kI32:
      return get(int32_t{});
    case DType::kI64:
      return static_cast<double>(get(int64_t{}));
    case DType::kF16:
      return HalfToFloat(get(uint16_t{}));
    case DType::kBF16:
      return BF16ToFloat(get(uint16_t{}));
    default:
      return 0;
  }
}

double Expected(DType t, ReduceOp op, int world, int64_t i) {
  double acc = Value(0, i, op);
  for (int r = 1; r < world; ++r) {
    const double v = Value(r, i, op);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        acc += v;
        break;
      case ReduceOp::kProd:
        acc *= v;
        break;
      case ReduceOp::kMin:
        acc = std::min(acc, v);
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, v);
        break;
    }
  }
  if (op != ReduceOp::kAvg) return acc;
  // The kernels' avg: ints truncate; f16/bf16 divide in f32 and round once.
  if (t == DType::kI32 || t == DType::kI64) return std::trunc(acc / world);
  const double quotient = t == DType::kF64
                              ? acc / world
                              : static_cast<double>(static_cast<float>(acc) /
                                                    static_cast<float>(world));
  uint8_t tmp[8];
  StoreElement(t, tmp, 0, quotient);
  return LoadElement(t, tmp, 0);
}

std::vector<uint8_t> Fill(DType t, int rank, int64_t count, ReduceOp op,
                          int64_t shift, int64_t spare) {
  std::vector<uint8_t> b(count * DTypeSize(t) + spare, 0xee);
  for (int64_t i = 0; i < count; ++i) {
    StoreElement(t, b.data(), i, Value(rank, i + shift, op));
  }
  return b;
}

std::vector<uint8_t> Pattern(int rank, int block, int64_t bytes) {
  std::vector<uint8_t> b(bytes);
  for (int64_t j = 0; j < bytes; ++j) {
    b[j] = static_cast<uint8_t>(rank * 61 + block * 17 + j * 7 + j / 256);
  }
  return b;
}

}  // namespace shoal::collectives::testing
