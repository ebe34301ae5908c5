#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "dtype.hpp"

using namespace deepx::conformance;

TEST(CertifyDType, NamesAndPacking) {
  EXPECT_EQ(dtype_from_name("bf16"), DType::BF16);
  EXPECT_EQ(dtype_from_packed(DX_DTYPE_BOOL), DType::Bool);
  EXPECT_FALSE(dtype_from_name("f8").has_value());
  EXPECT_EQ(packed_name(DX_DTYPE_I8), "i8");
  EXPECT_EQ(packed_name(DX_DTYPE(kDLFloat, 8, 1)), "dtype(code=2,bits=8,lanes=1)");
}

TEST(CertifyDType, F16KnownBitPatterns) {
  EXPECT_EQ(double_to_f16_bits(1.0), 0x3c00);
  EXPECT_EQ(double_to_f16_bits(-2.0), 0xc000);
  EXPECT_EQ(double_to_f16_bits(65504.0), 0x7bff);
  EXPECT_EQ(double_to_f16_bits(65520.0), 0x7c00);  // the tie at max + half ulp overflows
  EXPECT_EQ(double_to_f16_bits(65519.99), 0x7bff);
  EXPECT_EQ(double_to_f16_bits(std::ldexp(1.0, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(double_to_f16_bits(std::ldexp(1.0, -25)), 0x0000);  // tie to even: 0
  EXPECT_EQ(double_to_f16_bits(std::ldexp(1.5, -25)), 0x0001);
  EXPECT_EQ(double_to_f16_bits(-0.0), 0x8000);
  EXPECT_EQ(double_to_f16_bits(INFINITY), 0x7c00);
  EXPECT_TRUE(std::isnan(f16_bits_to_double(double_to_f16_bits(NAN))));
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even (1.0).
  EXPECT_EQ(double_to_f16_bits(1.0 + std::ldexp(1.0, -11)), 0x3c00);
  EXPECT_EQ(double_to_f16_bits(1.0 + 3 * std::ldexp(1.0, -11)), 0x3c02);
  // Rounding once from double: a value just above the tie must round up (double rounding via
  // f32 would lose the sticky bit only for values closer than f32 can hold).
  EXPECT_EQ(double_to_f16_bits(1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40)), 0x3c01);
}

TEST(CertifyDType, HalfRoundTripsEveryPattern) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const auto bits = static_cast<uint16_t>(b);
    const double f = f16_bits_to_double(bits), g = bf16_bits_to_double(bits);
    if (!std::isnan(f)) {
      EXPECT_EQ(double_to_f16_bits(f), bits) << b;
    }
    if (!std::isnan(g)) {
      EXPECT_EQ(double_to_bf16_bits(g), bits) << b;
    }
  }
}

TEST(CertifyDType, Bf16MatchesF32Truncation) {
  // bf16 is the top half of an f32: exact f32 values with zero low bits round-trip.
  float f = 3.140625f;
  uint32_t u;
  std::memcpy(&u, &f, 4);
  EXPECT_EQ(double_to_bf16_bits(f), u >> 16);
  EXPECT_EQ(max_finite(DType::BF16), 3.3895313892515355e38);
}

TEST(CertifyDType, IntegersWrapAndExtend) {
  unsigned char buf[8];
  store_int(DType::I8, 200, buf);
  EXPECT_EQ(load_int(DType::I8, buf), -56);
  store_int(DType::U8, -1, buf);
  EXPECT_EQ(load_int(DType::U8, buf), 255);
  store_int(DType::Bool, 7, buf);
  EXPECT_EQ(load_int(DType::Bool, buf), 1);
  store_int(DType::I64, std::numeric_limits<int64_t>::min(), buf);
  EXPECT_EQ(load_int(DType::I64, buf), std::numeric_limits<int64_t>::min());
}

TEST(CertifyUlp, DistanceOnEachGrid) {
  EXPECT_EQ(ulp_distance(DType::F32, 1.0, 1.0), 0u);
  EXPECT_EQ(ulp_distance(DType::F32, 1.0, std::nextafter(1.0f, 2.0f)), 1u);
  EXPECT_EQ(ulp_distance(DType::F32, 0.0, -0.0), 0u);
  EXPECT_EQ(ulp_distance(DType::F32, std::numeric_limits<float>::denorm_min(), -std::numeric_limits<float>::denorm_min()), 2u);
  EXPECT_EQ(ulp_distance(DType::F16, 1.0, 1.0 + std::ldexp(1.0, -10)), 1u);
  EXPECT_EQ(ulp_distance(DType::BF16, 1.0, 1.0 + std::ldexp(1.0, -7) * 3), 3u);
  EXPECT_EQ(ulp_distance(DType::F64, 1.0, std::nextafter(1.0, 0.0)), 1u);
  EXPECT_EQ(ulp_distance(DType::F32, std::numeric_limits<float>::max(), INFINITY), 1u);
  EXPECT_EQ(ulp_distance(DType::F32, NAN, 1.0), UINT64_MAX);
  // Opposite extremes of f64 do not overflow the distance.
  EXPECT_EQ(ulp_distance(DType::F64, -INFINITY, INFINITY), 2 * 0x7ff0000000000000ull);
}

TEST(CertifyUlp, SpacingOfTheGrid) {
  EXPECT_EQ(ulp_of(DType::F32, 1.0), std::ldexp(1.0, -23));
  EXPECT_EQ(ulp_of(DType::F32, 1.5), std::ldexp(1.0, -23));
  EXPECT_EQ(ulp_of(DType::F16, 0.0), std::ldexp(1.0, -24));
  EXPECT_EQ(ulp_of(DType::F16, 1000.0), 0.5);
  EXPECT_EQ(ulp_of(DType::BF16, 1.0), std::ldexp(1.0, -7));
  EXPECT_EQ(ulp_of(DType::F64, 1e-310), std::ldexp(1.0, -1074));
}
