// f16 and bf16 storage types and their conversions to and from f32, written branch-light so
// loops that use them still vectorise. All float -> narrow conversions round to nearest even and
// handle NaN, infinity, overflow and subnormals.
#ifndef DEEPX_PLUGINS_CPU_HALF_H_
#define DEEPX_PLUGINS_CPU_HALF_H_

#include <bit>
#include <cstdint>

namespace deepx::cpu {

/// IEEE binary16 bits.
struct Half {
  uint16_t bits;
};
/// bfloat16 bits (the top half of an f32).
struct BFloat16 {
  uint16_t bits;
};

inline float half_to_float(uint16_t h) {
  // Shift exponent and mantissa into f32 position, then fix up the exponent bias. Inf/NaN get
  // the extra bias that maps exponent 31 to 255; subnormals are renormalised by one float
  // subtraction (exact).
  const uint32_t shifted = static_cast<uint32_t>(h & 0x7fffu) << 13;
  const uint32_t exponent = shifted & 0x0f800000u;
  uint32_t bits = shifted + ((127u - 15u) << 23);
  float result;
  if (exponent == 0x0f800000u) {  // Inf or NaN
    bits += (128u - 16u) << 23;
    result = std::bit_cast<float>(bits);
  } else if (exponent == 0) {  // zero or subnormal
    bits += 1u << 23;
    result = std::bit_cast<float>(bits) - std::bit_cast<float>(113u << 23);
  } else {
    result = std::bit_cast<float>(bits);
  }
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  return std::bit_cast<float>(std::bit_cast<uint32_t>(result) | sign);
}

inline uint16_t float_to_half(float value) {
  uint32_t f = std::bit_cast<uint32_t>(value);
  const uint32_t sign = f & 0x80000000u;
  f ^= sign;
  uint16_t out;
  if (f >= (143u << 23)) {  // |x| >= 65536, Inf or NaN: overflow to Inf, NaN stays quiet NaN
    out = f > 0x7f800000u ? 0x7e00u : 0x7c00u;
  } else if (f < (113u << 23)) {  // below the smallest normal half: subnormal or zero
    // Adding 0.5 (as a float with the right exponent) lets the FPU do the rounding.
    const float magic = std::bit_cast<float>(126u << 23);
    const float sum = std::bit_cast<float>(f) + magic;
    out = static_cast<uint16_t>(std::bit_cast<uint32_t>(sum) - (126u << 23));
  } else {
    const uint32_t mantissa_odd = (f >> 13) & 1u;
    f += (static_cast<uint32_t>(15 - 127) << 23) + 0xfffu;  // rebias, add half-ulp minus one
    f += mantissa_odd;                                         // ties to even
    out = static_cast<uint16_t>(f >> 13);                      // may carry into Inf: correct
  }
  return static_cast<uint16_t>(out | (sign >> 16));
}

inline float bfloat16_to_float(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

inline uint16_t float_to_bfloat16(float value) {
  const uint32_t f = std::bit_cast<uint32_t>(value);
  if ((f & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((f >> 16) | 0x0040u);  // NaN
  const uint32_t rounded = f + 0x7fffu + ((f >> 16) & 1u);  // ties to even; may carry into Inf
  return static_cast<uint16_t>(rounded >> 16);
}

/// double -> float rounded to odd (truncate, then set the last bit if inexact). Rounding that
/// result to f16/bf16 afterwards gives the correctly rounded double -> f16/bf16 conversion,
/// because f32 carries more than twice the narrow formats' precision plus two bits.
inline float double_to_float_round_odd(double d) {
  float f = static_cast<float>(d);
  if (static_cast<double>(f) == d || d != d) return f;
  uint32_t bits = std::bit_cast<uint32_t>(f);
  const double magnitude_f = static_cast<double>(f) < 0 ? -static_cast<double>(f) : f;
  const double magnitude_d = d < 0 ? -d : d;
  const bool rounded_away = magnitude_f > magnitude_d;
  if (rounded_away) bits -= 1;  // one ulp back toward zero (Inf becomes FLT_MAX)
  bits |= 1u;
  return std::bit_cast<float>(bits);
}

inline uint16_t double_to_half(double d) { return float_to_half(double_to_float_round_odd(d)); }
inline uint16_t double_to_bfloat16(double d) {
  return float_to_bfloat16(double_to_float_round_odd(d));
}

}  // namespace deepx::cpu

#endif  // DEEPX_PLUGINS_CPU_HALF_H_
