// f16 / bf16 conversions: exhaustive round trips, ties to even at every midpoint, hand-picked
// values (subnormals, overflow, NaN), and the generic rounding cross-checked against the
// hardware's f64 -> f32 conversion.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "deepx/reference/half.hpp"

namespace deepx::ref {
namespace {

bool f16_is_nan(std::uint16_t b) { return (b & 0x7C00) == 0x7C00 && (b & 0x3FF) != 0; }
bool bf16_is_nan(std::uint16_t b) { return (b & 0x7F80) == 0x7F80 && (b & 0x7F) != 0; }

TEST(Half, EveryF16PatternRoundTripsThroughF32AndF64) {
  for (std::uint32_t i = 0; i < 65536; ++i) {
    const auto bits = static_cast<std::uint16_t>(i);
    ASSERT_EQ(f32_to_f16(f16_to_f32(bits)), bits) << std::hex << i;
    if (!f16_is_nan(bits)) {
      ASSERT_EQ(f64_to_f16(f16_to_f64(bits)), bits) << std::hex << i;
      // f32 and f64 widening agree on the value.
      ASSERT_EQ(static_cast<double>(f16_to_f32(bits)), f16_to_f64(bits)) << std::hex << i;
    } else {
      ASSERT_TRUE(std::isnan(f16_to_f32(bits)));
      ASSERT_TRUE(std::isnan(f16_to_f64(bits)));
      ASSERT_TRUE(f16_is_nan(f64_to_f16(f16_to_f64(bits))));
      ASSERT_EQ(std::signbit(f16_to_f64(bits)), (bits & 0x8000) != 0);
    }
  }
}

TEST(Half, EveryBf16PatternRoundTripsThroughF32AndF64) {
  for (std::uint32_t i = 0; i < 65536; ++i) {
    const auto bits = static_cast<std::uint16_t>(i);
    ASSERT_EQ(f32_to_bf16(bf16_to_f32(bits)), bits) << std::hex << i;
    // bf16 is the top half of an f32.
    ASSERT_EQ(std::bit_cast<std::uint32_t>(bf16_to_f32(bits)), i << 16);
    if (!bf16_is_nan(bits)) {
      ASSERT_EQ(f64_to_bf16(bf16_to_f64(bits)), bits) << std::hex << i;
      ASSERT_EQ(static_cast<double>(bf16_to_f32(bits)), bf16_to_f64(bits)) << std::hex << i;
    } else {
      ASSERT_TRUE(bf16_is_nan(f64_to_bf16(bf16_to_f64(bits))));
    }
  }
}

// For each pair of adjacent finite values of a format, the midpoint rounds to the one with an
// even last bit, and anything strictly between rounds to the nearer one.
template <typename Widen, typename Narrow>
void check_all_midpoints(Widen widen, Narrow narrow, std::uint16_t max_finite) {
  for (std::uint32_t lo = 0; lo < max_finite; ++lo) {
    const auto lo_bits = static_cast<std::uint16_t>(lo);
    const auto hi_bits = static_cast<std::uint16_t>(lo + 1);
    const double a = widen(lo_bits);
    const double b = widen(hi_bits);
    const double mid = (a + b) / 2;  // exact in f64
    const std::uint16_t even = (lo_bits & 1) == 0 ? lo_bits : hi_bits;
    ASSERT_EQ(narrow(mid), even) << std::hex << lo;
    ASSERT_EQ(narrow(-mid), static_cast<std::uint16_t>(even | 0x8000)) << std::hex << lo;
    ASSERT_EQ(narrow(std::nextafter(mid, 0.0)), lo_bits) << std::hex << lo;
    ASSERT_EQ(narrow(std::nextafter(mid, 1e300)), hi_bits) << std::hex << lo;
  }
}

TEST(Half, F16TiesToEvenAtEveryMidpoint) {
  check_all_midpoints(f16_to_f64, f64_to_f16, 0x7BFF);
}

TEST(Half, Bf16TiesToEvenAtEveryMidpoint) {
  check_all_midpoints(bf16_to_f64, f64_to_bf16, 0x7F7F);
}

TEST(Half, F16HandPickedValues) {
  EXPECT_EQ(f64_to_f16(1.0), 0x3C00);
  EXPECT_EQ(f64_to_f16(-2.0), 0xC000);
  EXPECT_EQ(f64_to_f16(0.5), 0x3800);
  EXPECT_EQ(f64_to_f16(65504.0), 0x7BFF);                 // largest finite
  EXPECT_EQ(f64_to_f16(65519.99), 0x7BFF);                // below the overflow midpoint
  EXPECT_EQ(f64_to_f16(65520.0), 0x7C00);                 // the midpoint rounds to even: Inf
  EXPECT_EQ(f64_to_f16(1e300), 0x7C00);
  EXPECT_EQ(f64_to_f16(-1e300), 0xFC00);
  EXPECT_EQ(f64_to_f16(std::ldexp(1.0, -14)), 0x0400);    // smallest normal
  EXPECT_EQ(f64_to_f16(std::ldexp(1.0, -24)), 0x0001);    // smallest subnormal
  EXPECT_EQ(f64_to_f16(std::ldexp(1.0, -25)), 0x0000);    // half of it: tie to even 0
  EXPECT_EQ(f64_to_f16(std::ldexp(1.0, -25) * 1.0000001), 0x0001);
  EXPECT_EQ(f64_to_f16(3 * std::ldexp(1.0, -25)), 0x0002);  // 1.5 quanta: tie to even 2
  EXPECT_EQ(f64_to_f16(std::ldexp(1023.5, -24)), 0x0400); // largest subnormal + half: carries into normal
  EXPECT_EQ(f64_to_f16(1e-300), 0x0000);
  EXPECT_EQ(f64_to_f16(-1e-300), 0x8000);
  EXPECT_EQ(f64_to_f16(std::numeric_limits<double>::denorm_min()), 0x0000);
  EXPECT_EQ(f64_to_f16(-0.0), 0x8000);
  EXPECT_EQ(f64_to_f16(1.0 + std::ldexp(1.0, -11)), 0x3C00);       // tie: to even (1.0)
  EXPECT_EQ(f64_to_f16(1.0 + 3 * std::ldexp(1.0, -11)), 0x3C02);   // tie: to even (up)
  EXPECT_EQ(f64_to_f16(std::numeric_limits<double>::infinity()), 0x7C00);
  EXPECT_TRUE(f16_is_nan(f64_to_f16(std::numeric_limits<double>::quiet_NaN())));
  EXPECT_EQ(f16_to_f64(0x3555), 0.333251953125);          // hand-decoded: 1365 * 2^-12
  EXPECT_EQ(f16_to_f64(0x0001), std::ldexp(1.0, -24));
  EXPECT_EQ(f16_to_f64(0x03FF), std::ldexp(1023.0, -24));
  EXPECT_EQ(f16_to_f64(0xFC00), -std::numeric_limits<double>::infinity());
}

TEST(Half, Bf16HandPickedValues) {
  EXPECT_EQ(f64_to_bf16(1.0), 0x3F80);
  EXPECT_EQ(f64_to_bf16(-1.0), 0xBF80);
  EXPECT_EQ(f64_to_bf16(1.0 + std::ldexp(1.0, -8)), 0x3F80);      // tie to even
  EXPECT_EQ(f64_to_bf16(1.0 + 3 * std::ldexp(1.0, -8)), 0x3F82);  // tie to even (up)
  EXPECT_EQ(f64_to_bf16(3.0e38), 0x7F62);  // 3.0e38 = 1.7634... * 2^127, hand-rounded
  EXPECT_EQ(f64_to_bf16(3.4e38), 0x7F80);  // beyond the largest finite (3.3895e38) + half ulp
  EXPECT_EQ(f64_to_bf16(std::ldexp(1.0, -133)), 0x0001);          // smallest subnormal
  EXPECT_EQ(f64_to_bf16(std::ldexp(1.0, -134)), 0x0000);          // tie to even 0
  EXPECT_EQ(bf16_to_f64(0x4049), 3.140625);
  EXPECT_EQ(f32_to_bf16(3.14159265f), 0x4049);
}

TEST(Half, NaNPayloadAndSignSurviveNarrowing) {
  // Signalling f32 NaN whose payload lies only in the low bits: stays a NaN (quiet), not Inf.
  const float low_payload = std::bit_cast<float>(0x7F800001u);
  EXPECT_TRUE(f16_is_nan(f32_to_f16(low_payload)));
  EXPECT_TRUE(bf16_is_nan(f32_to_bf16(low_payload)));
  const float negative_nan = std::bit_cast<float>(0xFFC00000u);
  EXPECT_EQ(f32_to_f16(negative_nan), 0xFE00);
  EXPECT_EQ(f32_to_bf16(negative_nan), 0xFFC0);
}

TEST(Half, GenericRoundingMatchesHardwareF32) {
  // round_double_to_format(x, 8, 23) must agree with the CPU's f64 -> f32 conversion (which is
  // IEEE round to nearest even) everywhere: normals, subnormals, overflow, ties.
  std::mt19937_64 rng(12345);
  for (int i = 0; i < 300000; ++i) {
    std::uint64_t bits = rng();
    // Bias exponents towards f32's range, its subnormals and overflow.
    const std::uint64_t exponent = 1023 - 160 + rng() % 300;
    bits = (bits & 0x800FFFFFFFFFFFFFull) | (exponent << 52);
    if (i % 3 == 0) bits &= ~((std::uint64_t{1} << 28) - 1);  // bit 28 decides: tie or exact
    const double x = std::bit_cast<double>(bits);
    ASSERT_EQ(round_double_to_format(x, 8, 23), std::bit_cast<std::uint32_t>(static_cast<float>(x)))
        << std::hexfloat << x;
  }
}

#if defined(__FLT16_MAX__) && !defined(__clang__)
TEST(Half, MatchesCompilerFloat16Conversion) {
  // GCC's _Float16 conversion from double is an independent implementation of the same rule.
  std::mt19937_64 rng(7);
  for (int i = 0; i < 300000; ++i) {
    std::uint64_t bits = rng();
    const std::uint64_t exponent = 1023 - 30 + rng() % 50;
    bits = (bits & 0x800FFFFFFFFFFFFFull) | (exponent << 52);
    if (i % 3 == 0) bits &= ~((std::uint64_t{1} << 41) - 1);  // bit 41 decides: tie or exact
    const double x = std::bit_cast<double>(bits);
    const _Float16 h = static_cast<_Float16>(x);
    ASSERT_EQ(f64_to_f16(x), std::bit_cast<std::uint16_t>(h)) << std::hexfloat << x;
  }
}
#endif

}  // namespace
}  // namespace deepx::ref
