// The 16-bit float conversions of reduce_kernels.h (HalfToFloat, FloatToHalf,
// BF16ToFloat, FloatToBF16) against references computed from the formats'
// definitions: every 16-bit value, every tie, and random f32 values.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <ios>
#include <limits>
#include <random>

#include "collectives/reduce/reduce_kernels.h"
#include "gtest/gtest.h"

namespace shoal::collectives {
namespace {

// binary16 decoded from its fields.
double RefHalfValue(uint16_t h) {
  const int e = (h >> 10) & 31, m = h & 1023;
  double v;
  if (e == 0) {
    v = std::ldexp(m, -24);
  } else if (e == 31) {
    v = m == 0 ? std::numeric_limits<double>::infinity()
               : std::numeric_limits<double>::quiet_NaN();
  } else {
    v = std::ldexp(1024 + m, e - 25);
  }
  return (h & 0x8000) ? -v : v;
}

// Finite f rounded to a format with `mantissa_bits` fraction bits, smallest
// normal exponent `min_exp` and largest finite value `max` (nearest, ties to
// even; +-inf past max).
double RefRound(float f, int mantissa_bits, int min_exp, double max) {
  const double a = std::fabs(static_cast<double>(f));
  int e = 0;
  std::frexp(a, &e);  // a in [2^(e-1), 2^e)
  const int exp = std::max(e - 1, min_exp);
  const double ulp = std::ldexp(1.0, exp - mantissa_bits);
  double r = std::nearbyint(a / ulp) * ulp;  // the default mode: ties to even
  if (r > max) r = std::numeric_limits<double>::infinity();
  return std::copysign(r, static_cast<double>(f));
}

TEST(ConversionTest, HalfToFloatAllValues) {
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    const double want = RefHalfValue(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(f)) << h;
      ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << h;
      ASSERT_TRUE(std::isnan(HalfToFloat(FloatToHalf(f)))) << h;
      ASSERT_EQ(FloatToHalf(f) & 0x8000, h & 0x8000) << h;
    } else {
      ASSERT_EQ(static_cast<double>(f), want) << h;
      ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << h;
      ASSERT_EQ(FloatToHalf(f), h) << h;  // round trip
    }
  }
}

TEST(ConversionTest, HalfEdgeCases) {
  EXPECT_EQ(FloatToHalf(0.0f), 0x0000);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(1.0f), 0x3C00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xC000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7BFF);   // max
  EXPECT_EQ(FloatToHalf(65519.99f), 0x7BFF);  // below the tie
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7C00);   // tie to even: inf
  EXPECT_EQ(FloatToHalf(1e6f), 0x7C00);
  EXPECT_EQ(FloatToHalf(-1e6f), 0xFC00);
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(FloatToHalf(-std::numeric_limits<float>::infinity()), 0xFC00);
  EXPECT_EQ(FloatToHalf(0x1p-14f), 0x0400);         // smallest normal
  EXPECT_EQ(FloatToHalf(0x1p-24f), 0x0001);         // smallest subnormal
  EXPECT_EQ(FloatToHalf(0x1p-25f), 0x0000);         // tie to even: 0
  EXPECT_EQ(FloatToHalf(0x1.8p-24f), 0x0002);       // tie to even: 2
  EXPECT_EQ(FloatToHalf(0x1.000002p-25f), 0x0001);  // just above the tie
  EXPECT_EQ(FloatToHalf(-0x1p-30f), 0x8000);
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(FloatToHalf(1.0f + 0x1p-11f), 0x3C00);    // tie to even: down
  EXPECT_EQ(FloatToHalf(1.0f + 0x1.8p-10f), 0x3C02);  // tie to even: up
  for (float nan :
       {std::numeric_limits<float>::quiet_NaN(),
        std::numeric_limits<float>::signaling_NaN(),
        std::bit_cast<float>(0x7F800001u), std::bit_cast<float>(0xFFC00000u)}) {
    const uint16_t h = FloatToHalf(nan);
    EXPECT_GT(h & 0x7FFF, 0x7C00) << std::hex << h;
    EXPECT_EQ(h & 0x8000, std::signbit(nan) ? 0x8000 : 0);
  }
  EXPECT_EQ(HalfToFloat(0x0001), 0x1p-24f);
  EXPECT_EQ(HalfToFloat(0x03FF), 0x1.ff8p-15f);
  EXPECT_EQ(HalfToFloat(0x7BFF), 65504.0f);
  EXPECT_TRUE(std::signbit(HalfToFloat(0x8000)));
  EXPECT_EQ(HalfToFloat(0xFC00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7C01)));  // signalling NaN stays NaN
  // NaNs are quieted and keep their top payload bits, both ways.
  EXPECT_EQ(std::bit_cast<uint32_t>(HalfToFloat(0x7D00)), 0x7FE00000u);
  EXPECT_EQ(std::bit_cast<uint32_t>(HalfToFloat(0xFE01)), 0xFFC02000u);
  EXPECT_EQ(FloatToHalf(std::bit_cast<float>(0x7FE00000u)), 0x7F00);
  EXPECT_EQ(FloatToHalf(std::bit_cast<float>(0xFFC02000u)), 0xFE01);
}

TEST(ConversionTest, HalfRoundsTiesToEven) {
  for (uint16_t h = 0; h < 0x7C00; ++h) {
    const float lo = HalfToFloat(h);
    const float hi = h == 0x7BFF ? 65536.0f : HalfToFloat(h + 1);
    const float mid = (lo + hi) / 2;  // exact in f32
    const uint16_t even = (h & 1) ? h + 1 : h;
    ASSERT_EQ(FloatToHalf(mid), even) << h;
    ASSERT_EQ(FloatToHalf(-mid), even | 0x8000) << h;
    ASSERT_EQ(FloatToHalf(std::nextafter(mid, hi)), h + 1) << h;
    ASSERT_EQ(FloatToHalf(std::nextafter(mid, lo)), h) << h;
  }
}

TEST(ConversionTest, FloatToHalfMatchesReference) {
  std::mt19937_64 rng(3);
  for (int i = 0; i < 2000000; ++i) {
    uint32_t bits = static_cast<uint32_t>(rng());
    if (i % 2 == 0) {  // mostly exponents near f16's range
      bits = (bits & 0x807FFFFFu) | ((95u + (bits >> 8) % 55u) << 23);
    }
    const float f = std::bit_cast<float>(bits);
    if (std::isnan(f)) continue;
    const double want = RefRound(f, 10, -14, 65504.0);
    const float got = HalfToFloat(FloatToHalf(f));
    ASSERT_EQ(static_cast<double>(got), want) << std::hex << bits;
    ASSERT_EQ(std::signbit(got), std::signbit(f)) << std::hex << bits;
  }
}

TEST(ConversionTest, BF16) {
  for (uint32_t b = 0; b <= 0xFFFF; ++b) {
    const float f = BF16ToFloat(static_cast<uint16_t>(b));
    ASSERT_EQ(std::bit_cast<uint32_t>(f), b << 16);
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(BF16ToFloat(FloatToBF16(f)))) << b;
    } else {
      ASSERT_EQ(FloatToBF16(f), b) << b;
    }
  }
  // Ties to even, and just either side.
  for (uint32_t b = 0; b < 0x7F80; ++b) {
    const uint32_t mid = (b << 16) | 0x8000;
    const uint16_t even = (b & 1) ? b + 1 : b;
    ASSERT_EQ(FloatToBF16(std::bit_cast<float>(mid)), even) << b;
    ASSERT_EQ(FloatToBF16(std::bit_cast<float>(mid | 0x80000000u)),
              even | 0x8000)
        << b;
    ASSERT_EQ(FloatToBF16(std::bit_cast<float>(mid + 1)), b + 1) << b;
    ASSERT_EQ(FloatToBF16(std::bit_cast<float>(mid - 1)), b) << b;
  }
  EXPECT_EQ(FloatToBF16(0.0f), 0x0000);
  EXPECT_EQ(FloatToBF16(-0.0f), 0x8000);
  EXPECT_EQ(FloatToBF16(1.0f), 0x3F80);
  EXPECT_EQ(FloatToBF16(std::numeric_limits<float>::max()),
            0x7F80);  // rounds up
  EXPECT_EQ(FloatToBF16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(FloatToBF16(-std::numeric_limits<float>::infinity()), 0xFF80);
  EXPECT_EQ(FloatToBF16(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(FloatToBF16(std::bit_cast<float>(0x00018000u)),
            0x0002);  // subnormal tie
  // A NaN whose payload is all in the low 16 bits must not become inf.
  EXPECT_EQ(FloatToBF16(std::bit_cast<float>(0x7F800001u)), 0x7FC0);
  EXPECT_EQ(FloatToBF16(std::bit_cast<float>(0xFF800001u)), 0xFFC0);
  EXPECT_EQ(FloatToBF16(std::numeric_limits<float>::quiet_NaN()), 0x7FC0);
  std::mt19937_64 rng(5);
  for (int i = 0; i < 1000000; ++i) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    if (std::isnan(f)) continue;
    const double want =
        RefRound(f, 7, -126, static_cast<double>(BF16ToFloat(0x7F7F)));
    const float got = BF16ToFloat(FloatToBF16(f));
    ASSERT_EQ(static_cast<double>(got), want) << f;
    ASSERT_EQ(std::signbit(got), std::signbit(f));
  }
}

}  // namespace
}  // namespace shoal::collectives
