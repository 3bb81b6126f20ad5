#include "collectives/reduce/reduce_kernels.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "collectives/reduce_op.h"
#include "gtest/gtest.h"
#include "ipc/tensor_meta.h"

namespace shoal::collectives {
namespace {

constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin,
                             ReduceOp::kMax, ReduceOp::kAvg};
constexpr int kNs[] = {1, 2, 3, 4, 7};
constexpr int64_t kCounts[] = {0, 1, 3, 15, 16, 17, 63, 64, 65, 1000, 4099};
constexpr int kMaxN = 7;
constexpr int64_t kMaxCount = 4099;
constexpr int kGuard = 8;  // elements after each buffer that must not change

// ---- One "kind" per dtype: storage type S, compute type C, the test data ----

struct F16Kind {
  using S = uint16_t;
  using C = float;
  static constexpr DType kDType = DType::kF16;
  static C Load(S s) { return HalfToFloat(s); }
  static S Store(C c) { return FloatToHalf(c); }
  static bool IsNaN(S s) { return (s & 0x7FFF) > 0x7C00; }
  static S Random(std::mt19937_64& rng) {
    return FloatToHalf(std::uniform_real_distribution<float>(-4, 4)(rng));
  }
  static std::vector<S> Specials() {
    return {0x7E00, 0x7D00, 0xFE00, 0x7C00, 0xFC00, 0x8000,
            0x0000, 0x0001, 0x83FF, 0x7BFF, 0xFBFF, 0x0400};
  }
};

struct BF16Kind {
  using S = uint16_t;
  using C = float;
  static constexpr DType kDType = DType::kBF16;
  static C Load(S s) { return BF16ToFloat(s); }
  static S Store(C c) { return FloatToBF16(c); }
  static bool IsNaN(S s) { return (s & 0x7FFF) > 0x7F80; }
  static S Random(std::mt19937_64& rng) {
    return FloatToBF16(std::uniform_real_distribution<float>(-4, 4)(rng));
  }
  static std::vector<S> Specials() {
    return {0x7FC0, 0x7F81, 0xFFC0, 0x7F80, 0xFF80, 0x8000,
            0x0000, 0x0001, 0x807F, 0x7F7F, 0xFF7F, 0x0080};
  }
};

template <typename T, DType D>
struct FloatKind {
  using S = T;
  using C = T;
  static constexpr DType kDType = D;
  static C Load(S s) { return s; }
  static S Store(C c) { return c; }
  static bool IsNaN(S s) { return std::isnan(s); }
  static S Random(std::mt19937_64& rng) {
    return std::uniform_real_distribution<T>(-100, 100)(rng);
  }
  static std::vector<S> Specials() {
    using L = std::numeric_limits<T>;
    return {L::quiet_NaN(), -L::quiet_NaN(), L::infinity(),   -L::infinity(),
            T(-0.0),        T(0.0),          L::denorm_min(), L::max(),
            L::lowest(),    L::min()};
  }
};
using F32Kind = FloatKind<float, DType::kF32>;
using F64Kind = FloatKind<double, DType::kF64>;

template <typename T, DType D>
struct IntKind {
  using S = T;
  using C = T;
  static constexpr DType kDType = D;
  static C Load(S s) { return s; }
  static S Store(C c) { return c; }
  static bool IsNaN(S) { return false; }
  static S Random(std::mt19937_64& rng) {
    // Half full-range (sums and products wrap), half small.
    const uint64_t r = rng();
    return (r & 1)
               ? static_cast<T>(r >> 1)
               : static_cast<T>(static_cast<int64_t>(r >> 40) % 2001 - 1000);
  }
  static std::vector<S> Specials() {
    using L = std::numeric_limits<T>;
    return {L::min(), L::max(), 0, -1, 1};
  }
};
using I32Kind = IntKind<int32_t, DType::kI32>;
using I64Kind = IntKind<int64_t, DType::kI64>;

// Bit-identical, or both NaN.
template <typename K>
bool Same(typename K::S a, typename K::S b) {
  if (K::IsNaN(a) && K::IsNaN(b)) return true;
  return std::memcmp(&a, &b, sizeof(a)) == 0;
}

template <typename K>
std::string Show(typename K::S s) {
  if constexpr (std::is_same_v<typename K::S, uint16_t>) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "0x%04x (%g)", s, K::Load(s));
    return buf;
  } else {
    return std::to_string(s);
  }
}

// ---- The straightforward scalar reference ----

template <typename C>
C RefApply(ReduceOp op, C acc, C x) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      if constexpr (std::is_integral_v<C>) {
        using U = std::make_unsigned_t<C>;
        return static_cast<C>(static_cast<U>(acc) + static_cast<U>(x));
      } else {
        return acc + x;
      }
    case ReduceOp::kProd:
      if constexpr (std::is_integral_v<C>) {
        using U = std::make_unsigned_t<C>;
        return static_cast<C>(static_cast<U>(acc) * static_cast<U>(x));
      } else {
        return acc * x;
      }
    case ReduceOp::kMin:
    case ReduceOp::kMax:
      if constexpr (std::is_floating_point_v<C>) {
        if (std::isnan(acc)) return acc;  // the first NaN stays
        if (std::isnan(x)) return x;
      }
      // On ties the earlier input stays.
      if (op == ReduceOp::kMin) return x < acc ? x : acc;
      return x > acc ? x : acc;
  }
  return acc;
}

// f16/bf16: accumulated in f32 in input order, rounded once.
template <typename K>
typename K::S RefReduce(ReduceOp op, const typename K::S* const* in, int n,
                        int64_t i, int divisor) {
  typename K::C acc = K::Load(in[0][i]);
  for (int k = 1; k < n; ++k) acc = RefApply(op, acc, K::Load(in[k][i]));
  if (op == ReduceOp::kAvg) {
    if constexpr (std::is_integral_v<typename K::C>) {
      acc = acc / divisor;  // C++ integer division truncates toward zero
    } else {
      acc = acc / static_cast<typename K::C>(divisor);
    }
  }
  return K::Store(acc);
}

template <typename K>
void CheckAllReductions() {
  using S = typename K::S;
  std::mt19937_64 rng(static_cast<uint64_t>(K::kDType) * 7919 + 1);
  const std::vector<S> specials = K::Specials();
  const int64_t size = 2 + kMaxCount + kGuard;
  std::vector<std::vector<S>> base(kMaxN, std::vector<S>(size));
  for (int k = 0; k < kMaxN; ++k) {
    for (int64_t i = 0; i < size; ++i) {
      base[k][i] = (i * 7 + k * 13) % 29 == 0
                       ? specials[(i + k) % specials.size()]
                       : K::Random(rng);
    }
  }
  S sentinel;
  std::memset(&sentinel, 0x5A, sizeof(sentinel));
  int failures = 0;
  for (ReduceOp op : kOps) {
    for (int n : kNs) {
      const std::vector<int> divisors = op == ReduceOp::kAvg
                                            ? std::vector<int>{n, n + 3}
                                            : std::vector<int>{1};
      for (int divisor : divisors) {
        for (int64_t count : kCounts) {
          for (bool in_place : {false, true}) {
            const int64_t offset = count % 3;  // vary the alignment
            std::vector<std::vector<S>> bufs(base.begin(), base.begin() + n);
            std::vector<const S*> in(n);
            for (int k = 0; k < n; ++k) in[k] = bufs[k].data() + offset;
            std::vector<S> out_buf(size, sentinel);
            S* out =
                in_place ? bufs[0].data() + offset : out_buf.data() + offset;
            std::vector<S> want(count);
            for (int64_t i = 0; i < count; ++i) {
              want[i] = RefReduce<K>(op, in.data(), n, i, divisor);
            }
            const std::string what = std::string(DTypeName(K::kDType)) + " " +
                                     std::string(ReduceOpName(op)) +
                                     " n=" + std::to_string(n) +
                                     " count=" + std::to_string(count) +
                                     " divisor=" + std::to_string(divisor) +
                                     (in_place ? " in place" : "");
            const absl::Status status = ReduceN(
                K::kDType, op, reinterpret_cast<const void* const*>(in.data()),
                n, out, count, divisor);
            ASSERT_TRUE(status.ok()) << what << ": " << status;
            for (int64_t i = 0; i < count; ++i) {
              if (!Same<K>(out[i], want[i])) {
                ADD_FAILURE()
                    << what << ": element " << i << " is " << Show<K>(out[i])
                    << ", want " << Show<K>(want[i]);
                if (++failures > 20) return;
                break;
              }
            }
            // Nothing else written: the guards, and the inputs not reduced
            // into.
            const std::vector<S>& o = in_place ? bufs[0] : out_buf;
            const std::vector<S>& o_before =
                in_place ? base[0] : std::vector<S>(size, sentinel);
            for (int64_t i = 0; i < size; ++i) {
              if (i >= offset && i < offset + count) continue;
              if (std::memcmp(&o[i], &o_before[i], sizeof(S)) != 0) {
                ADD_FAILURE() << what << ": wrote outside the output at " << i;
                if (++failures > 20) return;
                break;
              }
            }
            for (int k = in_place ? 1 : 0; k < n; ++k) {
              if (std::memcmp(bufs[k].data(), base[k].data(),
                              size * sizeof(S)) != 0) {
                ADD_FAILURE() << what << ": input " << k << " changed";
                if (++failures > 20) return;
              }
            }
          }
        }
      }
    }
  }
}

TEST(ReduceNTest, F16MatchesReference) { CheckAllReductions<F16Kind>(); }
TEST(ReduceNTest, BF16MatchesReference) { CheckAllReductions<BF16Kind>(); }
TEST(ReduceNTest, F32MatchesReference) { CheckAllReductions<F32Kind>(); }
TEST(ReduceNTest, F64MatchesReference) { CheckAllReductions<F64Kind>(); }
TEST(ReduceNTest, I32MatchesReference) { CheckAllReductions<I32Kind>(); }
TEST(ReduceNTest, I64MatchesReference) { CheckAllReductions<I64Kind>(); }

template <typename T>
std::vector<T> Reduce(DType dtype, ReduceOp op, std::vector<std::vector<T>> in,
                      int divisor = 1) {
  std::vector<const void*> ptrs;
  for (const auto& v : in) ptrs.push_back(v.data());
  std::vector<T> out(in[0].size());
  const absl::Status status =
      ReduceN(dtype, op, ptrs.data(), static_cast<int>(ptrs.size()), out.data(),
              static_cast<int64_t>(out.size()), divisor);
  EXPECT_TRUE(status.ok()) << status;
  return out;
}

TEST(ReduceNTest, ManyInputs) {
  // 64 inputs (the most), in place: 1 + 2 + ... + 64 with 1000 elements.
  std::vector<std::vector<float>> bufs(kMaxReduceInputs);
  std::vector<const void*> ptrs;
  for (int k = 0; k < kMaxReduceInputs; ++k) {
    bufs[k].assign(1000, static_cast<float>(k + 1));
    ptrs.push_back(bufs[k].data());
  }
  ASSERT_TRUE(ReduceN(DType::kF32, ReduceOp::kAvg, ptrs.data(),
                      kMaxReduceInputs, bufs[0].data(), 1000, kMaxReduceInputs)
                  .ok());
  for (float x : bufs[0]) ASSERT_EQ(x, 32.5f);
}

TEST(ReduceNTest, IntegersWrap) {
  constexpr int32_t kMax32 = std::numeric_limits<int32_t>::max();
  constexpr int32_t kMin32 = std::numeric_limits<int32_t>::min();
  constexpr int64_t kMax64 = std::numeric_limits<int64_t>::max();
  constexpr int64_t kMin64 = std::numeric_limits<int64_t>::min();
  EXPECT_EQ(
      Reduce<int32_t>(DType::kI32, ReduceOp::kSum, {{kMax32, kMin32}, {1, -1}}),
      (std::vector<int32_t>{kMin32, kMax32}));
  EXPECT_EQ(Reduce<int32_t>(DType::kI32, ReduceOp::kProd,
                            {{65536, kMin32, 3}, {65536, -1, kMax32}}),
            (std::vector<int32_t>{0, kMin32, 2147483645}));
  EXPECT_EQ(
      Reduce<int64_t>(DType::kI64, ReduceOp::kSum, {{kMax64, kMin64}, {1, -1}}),
      (std::vector<int64_t>{kMin64, kMax64}));
  EXPECT_EQ(
      Reduce<int64_t>(DType::kI64, ReduceOp::kProd,
                      {{int64_t{1} << 32, kMin64}, {int64_t{1} << 32, -1}}),
      (std::vector<int64_t>{0, kMin64}));
  // avg divides the wrapped sum.
  EXPECT_EQ(Reduce<int32_t>(DType::kI32, ReduceOp::kAvg, {{kMax32}, {1}}, 2),
            (std::vector<int32_t>{kMin32 / 2}));
}

TEST(ReduceNTest, IntegerAvgTruncatesTowardZero) {
  // Sums -7, 7, -1, 1, 8, -9, and extremes; divisor 2 (n == 2), then 4 (a
  // staged reduction: n != divisor).
  const std::vector<std::vector<int32_t>> in32 = {
      {-3, 3, 0, 1, 4, -5, 2147483600, -2147483600},
      {-4, 4, -1, 0, 4, -4, 47, -48}};
  EXPECT_EQ(
      Reduce<int32_t>(DType::kI32, ReduceOp::kAvg, in32, 2),
      (std::vector<int32_t>{-3, 3, 0, 0, 4, -4, 1073741823, -1073741824}));
  EXPECT_EQ(Reduce<int32_t>(DType::kI32, ReduceOp::kAvg, in32, 4),
            (std::vector<int32_t>{-1, 1, 0, 0, 2, -2, 536870911, -536870912}));
  EXPECT_EQ(Reduce<int64_t>(DType::kI64, ReduceOp::kAvg,
                            {{-3, 3, 0, int64_t{1} << 62}, {-4, 4, -1, 3}}, 4),
            (std::vector<int64_t>{-1, 1, 0, (int64_t{1} << 60)}));
}

TEST(ReduceNTest, FloatAvgWithOtherDivisor) {
  EXPECT_EQ(Reduce<float>(DType::kF32, ReduceOp::kAvg, {{1, -6}, {3, 2}}, 4),
            (std::vector<float>{1, -1}));
  EXPECT_EQ(Reduce<double>(DType::kF64, ReduceOp::kAvg, {{1}, {3}, {5}}, 2),
            (std::vector<double>{4.5}));
  EXPECT_EQ(Reduce<uint16_t>(DType::kF16, ReduceOp::kAvg,
                             {{FloatToHalf(1)}, {FloatToHalf(2)}}, 4),
            (std::vector<uint16_t>{FloatToHalf(0.75f)}));
}

TEST(ReduceNTest, HalfAccumulatesInF32) {
  // 2048 + 1 + 1 in f16 pairwise would be 2048 twice over (2049 is a tie
  // rounded to even); in f32 it is 2050, exact in f16.
  const uint16_t big = FloatToHalf(2048), one = FloatToHalf(1);
  EXPECT_EQ(
      Reduce<uint16_t>(DType::kF16, ReduceOp::kSum, {{big}, {one}, {one}}),
      std::vector<uint16_t>{FloatToHalf(2050)});
  // bf16: 256 + 1 + 1 likewise.
  const uint16_t b256 = FloatToBF16(256), b1 = FloatToBF16(1);
  EXPECT_EQ(
      Reduce<uint16_t>(DType::kBF16, ReduceOp::kSum, {{b256}, {b1}, {b1}}),
      std::vector<uint16_t>{FloatToBF16(258)});
}

TEST(ReduceNTest, HalfRoundsOnceTiesToEven) {
  // 2048 + odd k is a tie between two f16 neighbours (spacing 2): it must go
  // to the even mantissa, in the vector body and in the tail alike.
  constexpr int kCount = 67;
  std::vector<uint16_t> a(kCount, FloatToHalf(2048)), b(kCount);
  std::vector<uint16_t> want(kCount);
  for (int i = 0; i < kCount; ++i) {
    const int k = 2 * (i % 8) + 1;  // 1, 3, ..., 15
    b[i] = FloatToHalf(static_cast<float>(k));
    // 2048 + k lies between 2048 + k - 1 and 2048 + k + 1; the even one is
    // the multiple of 4.
    want[i] = FloatToHalf(static_cast<float>(((2048 + k + 1) / 4) * 4));
  }
  EXPECT_EQ(Reduce<uint16_t>(DType::kF16, ReduceOp::kSum, {a, b}), want);
}

TEST(ReduceNTest, HalfNaNKeepsPayloadEverywhere) {
  // A signalling f16 NaN comes out quieted with its payload, the same in the
  // vector body (F16C / AVX-512 instructions) and in the scalar tail.
  constexpr int kCount = 37;
  std::vector<uint16_t> nan(kCount, 0x7D00), one(kCount, FloatToHalf(1));
  const auto out = Reduce<uint16_t>(DType::kF16, ReduceOp::kMax, {nan, one});
  EXPECT_EQ(out, std::vector<uint16_t>(kCount, 0x7F00));
  const auto sum = Reduce<uint16_t>(DType::kF16, ReduceOp::kSum, {one, nan});
  EXPECT_EQ(sum, std::vector<uint16_t>(kCount, 0x7F00));
}

TEST(ReduceNTest, MinMaxPropagateNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (ReduceOp op : {ReduceOp::kMin, ReduceOp::kMax}) {
    const auto out = Reduce<float>(
        DType::kF32, op, {{nan, 1, 1, nan}, {1, nan, 2, 2}, {0, 0, nan, 3}});
    for (float x : out) EXPECT_TRUE(std::isnan(x)) << ReduceOpName(op);
    const auto half =
        Reduce<uint16_t>(DType::kF16, op, {{0x7E00, 0x3C00}, {0x3C00, 0x7E00}});
    for (uint16_t x : half) EXPECT_TRUE(std::isnan(HalfToFloat(x)));
  }
  // Equal values: the earlier input wins.
  const auto min = Reduce<float>(DType::kF32, ReduceOp::kMin,
                                 {{0.0f, -0.0f}, {-0.0f, 0.0f}});
  EXPECT_FALSE(std::signbit(min[0]));
  EXPECT_TRUE(std::signbit(min[1]));
  EXPECT_EQ(
      Reduce<float>(DType::kF32, ReduceOp::kMax,
                    {{-1, std::numeric_limits<float>::infinity()}, {3, 2}}),
      (std::vector<float>{3, std::numeric_limits<float>::infinity()}));
}

TEST(DivideInPlaceTest, MatchesReference) {
  std::mt19937_64 rng(7);
  for (int64_t count : kCounts) {
    for (int divisor : {1, 3, 8}) {
      std::vector<float> f(count), f_want(count);
      std::vector<uint16_t> h(count), h_want(count), b(count), b_want(count);
      std::vector<int32_t> i32(count), i32_want(count);
      std::vector<int64_t> i64(count), i64_want(count);
      std::vector<double> d(count), d_want(count);
      for (int64_t i = 0; i < count; ++i) {
        f[i] = F32Kind::Random(rng);
        f_want[i] = f[i] / divisor;
        d[i] = F64Kind::Random(rng);
        d_want[i] = d[i] / divisor;
        h[i] = F16Kind::Random(rng);
        h_want[i] = FloatToHalf(HalfToFloat(h[i]) / divisor);
        b[i] = BF16Kind::Random(rng);
        b_want[i] = FloatToBF16(BF16ToFloat(b[i]) / divisor);
        i32[i] = I32Kind::Random(rng);
        i32_want[i] = i32[i] / divisor;
        i64[i] = I64Kind::Random(rng);
        i64_want[i] = i64[i] / divisor;
      }
      ASSERT_TRUE(DivideInPlace(DType::kF32, f.data(), count, divisor).ok());
      ASSERT_TRUE(DivideInPlace(DType::kF64, d.data(), count, divisor).ok());
      ASSERT_TRUE(DivideInPlace(DType::kF16, h.data(), count, divisor).ok());
      ASSERT_TRUE(DivideInPlace(DType::kBF16, b.data(), count, divisor).ok());
      ASSERT_TRUE(DivideInPlace(DType::kI32, i32.data(), count, divisor).ok());
      ASSERT_TRUE(DivideInPlace(DType::kI64, i64.data(), count, divisor).ok());
      EXPECT_EQ(f, f_want);
      EXPECT_EQ(d, d_want);
      EXPECT_EQ(h, h_want);
      EXPECT_EQ(b, b_want);
      EXPECT_EQ(i32, i32_want);
      EXPECT_EQ(i64, i64_want);
    }
  }
  std::vector<int32_t> edge = {std::numeric_limits<int32_t>::min(),
                               std::numeric_limits<int32_t>::max(), -7, 7, -1};
  ASSERT_TRUE(DivideInPlace(DType::kI32, edge.data(), 5, 2).ok());
  EXPECT_EQ(edge, (std::vector<int32_t>{-1073741824, 1073741823, -3, 3, 0}));
}

TEST(ReduceNTest, Errors) {
  std::vector<float> a(4), b(4), out(4);
  const void* two[] = {a.data(), b.data()};
  const auto code = [](const absl::Status& s) { return s.code(); };
  constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;
  for (DType t :
       {DType::kRaw, DType::kI8, DType::kI16, DType::kU8, DType::kBool}) {
    EXPECT_FALSE(IsReducible(t));
    EXPECT_EQ(ReducibleSize(t), 0u);
    EXPECT_EQ(code(ReduceN(t, ReduceOp::kSum, two, 2, out.data(), 4, 1)),
              kInvalid);
    EXPECT_EQ(code(DivideInPlace(t, out.data(), 4, 2)), kInvalid);
  }
  EXPECT_EQ(code(ReduceN(static_cast<DType>(200), ReduceOp::kSum, two, 2,
                         out.data(), 4, 1)),
            kInvalid);
  EXPECT_EQ(code(ReduceN(DType::kF32, static_cast<ReduceOp>(9), two, 2,
                         out.data(), 4, 1)),
            kInvalid);
  EXPECT_EQ(
      code(ReduceN(DType::kF32, ReduceOp::kSum, two, 0, out.data(), 4, 1)),
      kInvalid);
  std::vector<const void*> many(kMaxReduceInputs + 1, a.data());
  EXPECT_EQ(code(ReduceN(DType::kF32, ReduceOp::kSum, many.data(),
                         kMaxReduceInputs + 1, out.data(), 4, 1)),
            kInvalid);
  EXPECT_TRUE(ReduceN(DType::kF32, ReduceOp::kSum, many.data(),
                      kMaxReduceInputs, out.data(), 4, 1)
                  .ok());
  EXPECT_EQ(
      code(ReduceN(DType::kF32, ReduceOp::kAvg, two, 2, out.data(), 4, 0)),
      kInvalid);
  EXPECT_EQ(
      code(ReduceN(DType::kF32, ReduceOp::kAvg, two, 2, out.data(), 4, -2)),
      kInvalid);
  EXPECT_EQ(
      code(ReduceN(DType::kF32, ReduceOp::kSum, two, 2, out.data(), -1, 1)),
      kInvalid);
  // out may be in[0] but no other input.
  EXPECT_EQ(code(ReduceN(DType::kF32, ReduceOp::kSum, two, 2, b.data(), 4, 1)),
            kInvalid);
  EXPECT_TRUE(
      ReduceN(DType::kF32, ReduceOp::kSum, two, 2, a.data(), 4, 1).ok());
  const void* with_null[] = {a.data(), nullptr};
  EXPECT_EQ(code(ReduceN(DType::kF32, ReduceOp::kSum, with_null, 2, out.data(),
                         4, 1)),
            kInvalid);
  EXPECT_EQ(code(ReduceN(DType::kF32, ReduceOp::kSum, two, 2, nullptr, 4, 1)),
            kInvalid);
  // Nothing to do: no pointer is looked at.
  EXPECT_TRUE(
      ReduceN(DType::kF32, ReduceOp::kSum, nullptr, 2, nullptr, 0, 1).ok());
  // The divisor only matters for avg.
  EXPECT_TRUE(
      ReduceN(DType::kF32, ReduceOp::kSum, two, 2, out.data(), 4, 0).ok());
  EXPECT_EQ(code(DivideInPlace(DType::kF32, out.data(), 4, 0)), kInvalid);
  EXPECT_EQ(code(DivideInPlace(DType::kF32, out.data(), -1, 2)), kInvalid);
  EXPECT_EQ(code(DivideInPlace(DType::kF32, nullptr, 4, 2)), kInvalid);
}

TEST(ReduceNTest, Sizes) {
  EXPECT_EQ(ReducibleSize(DType::kF16), 2u);
  EXPECT_EQ(ReducibleSize(DType::kBF16), 2u);
  EXPECT_EQ(ReducibleSize(DType::kF32), 4u);
  EXPECT_EQ(ReducibleSize(DType::kI32), 4u);
  EXPECT_EQ(ReducibleSize(DType::kF64), 8u);
  EXPECT_EQ(ReducibleSize(DType::kI64), 8u);
  for (DType t : {DType::kF16, DType::kBF16, DType::kF32, DType::kF64,
                  DType::kI32, DType::kI64}) {
    EXPECT_TRUE(IsReducible(t));
  }
}

// ---- Throughput (printed, not asserted) ----

double BestSeconds(const std::function<void()>& fn) {
  fn();  // page in, warm up
  double best = 1e30;
  for (int rep = 0; rep < 20; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    const auto t1 = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double>(t1 - t0).count());
  }
  return best;
}

TEST(ReduceNBenchmark, Throughput) {
  constexpr int64_t kBytes = int64_t{16} << 20;
  std::vector<float> a(kBytes / 4, 1.5f), b(kBytes / 4, 2.5f), out(kBytes / 4);
  std::vector<uint16_t> ha(kBytes / 2, FloatToHalf(1.5f)),
      hb(kBytes / 2, FloatToHalf(2.5f)), hout(kBytes / 2);
  const void* f32_in[] = {a.data(), b.data()};
  const void* f16_in[] = {ha.data(), hb.data()};
  const void* bf16_in[] = {ha.data(), hb.data()};
  const auto sink = [](void* p) { asm volatile("" : : "r"(p) : "memory"); };
  const double t_memcpy = BestSeconds([&] {
    std::memcpy(out.data(), a.data(), kBytes);
    sink(out.data());
  });
  const double t_f32 = BestSeconds([&] {
    ASSERT_TRUE(ReduceN(DType::kF32, ReduceOp::kSum, f32_in, 2, out.data(),
                        kBytes / 4, 1)
                    .ok());
  });
  EXPECT_EQ(out[12345], 4.0f);
  const double t_f32_inplace = BestSeconds([&] {
    ASSERT_TRUE(
        ReduceN(DType::kF32, ReduceOp::kMax, f32_in, 2, a.data(), kBytes / 4, 1)
            .ok());
  });
  const double t_f16 = BestSeconds([&] {
    ASSERT_TRUE(ReduceN(DType::kF16, ReduceOp::kSum, f16_in, 2, hout.data(),
                        kBytes / 2, 1)
                    .ok());
  });
  EXPECT_EQ(HalfToFloat(hout[12345]), 4.0f);
  const double t_bf16 = BestSeconds([&] {
    ASSERT_TRUE(ReduceN(DType::kBF16, ReduceOp::kSum, bf16_in, 2, hout.data(),
                        kBytes / 2, 1)
                    .ok());
  });
  const auto line = [&](const char* what, double t, int streams) {
    std::printf(
        "  %-28s %7.3f ms  %6.1f GB/s per input  %6.1f GB/s memory traffic\n",
        what, t * 1e3, kBytes / t / 1e9, streams * kBytes / t / 1e9);
  };
  std::printf("16 MiB per buffer, best of 20 (CPU: avx512f=%d avx2=%d)\n",
              __builtin_cpu_supports("avx512f") ? 1 : 0,
              __builtin_cpu_supports("avx2") ? 1 : 0);
  line("memcpy", t_memcpy, 2);
  line("ReduceN f32 sum n=2", t_f32, 3);
  line("ReduceN f32 max n=2 in place", t_f32_inplace, 3);
  line("ReduceN f16 sum n=2", t_f16, 3);
  line("ReduceN bf16 sum n=2", t_bf16, 3);
}

}  // namespace
}  // namespace shoal::collectives
