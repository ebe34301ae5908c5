// Vectorisable elementary functions. Straight-line code (no calls, no data-dependent branches)
// so that `#pragma omp simd` loops over them compile to SIMD instructions.
#ifndef DEEPX_PLUGINS_CPU_FAST_MATH_H_
#define DEEPX_PLUGINS_CPU_FAST_MATH_H_

#include <bit>
#include <cstdint>
#include <limits>

namespace deepx::cpu {

namespace detail {
/// m * e^x with x clamped below at `lowest` (where the result has rounded to zero); the one
/// reduction and polynomial behind exp_f32 (m = 1, exact) and exp_mul_f32.
inline float exp_scaled_f32(float x, float m, float lowest) {
  // Clamp to where the result is finite-or-just-overflowing / just-underflowing, and keep NaN
  // out of the integer path (its result is selected below). Every comparison and every FP op
  // is evaluated unconditionally and only values are selected: GCC will not if-convert (and so
  // not vectorise) a loop that evaluates an FP operation under a condition.
  float clamped = x > 89.0f ? 89.0f : x;
  clamped = clamped < lowest ? lowest : clamped;
  clamped = (x != x) ? 0.0f : clamped;
  constexpr float kShifter = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float shifted = clamped * 1.44269504088896341f + kShifter;
  const float n_float = shifted - kShifter;
  const int32_t n = static_cast<int32_t>(std::bit_cast<uint32_t>(shifted)) -
                    static_cast<int32_t>(std::bit_cast<uint32_t>(kShifter));
  // ln2 split so that n * kLn2High is exact for |n| <= 2^8.
  constexpr float kLn2High = 0.693359375f;
  constexpr float kLn2Low = -2.12194440e-4f;
  float r = clamped - n_float * kLn2High;
  r = r - n_float * kLn2Low;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * (r * r) + r + 1.0f;
  // 2^n as two normal powers of two (n in [-162, 129]), applied after the multiplication by m
  // so that a subnormal result is rounded once.
  const int32_t n_low = n >> 1;
  const int32_t n_high = n - n_low;
  const float scale_low = std::bit_cast<float>(static_cast<uint32_t>(n_low + 127) << 23);
  const float scale_high = std::bit_cast<float>(static_cast<uint32_t>(n_high + 127) << 23);
  const float result = ((y * m) * scale_low) * scale_high;
  const float quiet_nan = x + x;
  return (x != x) ? quiet_nan : result;
}
}  // namespace detail

/// exp for f32, within 2 ulp of the correctly rounded result over the whole range (the unit
/// tests sweep it). Cody-Waite reduction x = n ln2 + r with |r| <= ln2/2, a degree-7 polynomial
/// for e^r, and a two-step scale by 2^n so results in the subnormal range round only once.
/// Overflow gives +Inf, underflow 0 (or a subnormal), NaN stays NaN.
inline float exp_f32(float x) { return detail::exp_scaled_f32(x, 1.0f, -104.0f); }

/// m * e^x for f32, rounded once at the end: the scale by 2^n is applied after the multiplication
/// by m, so a subnormal result is not the product of an already rounded subnormal (m finite,
/// |m| <= 128). Same reduction and polynomial as exp_f32 (which is m = 1).
inline float exp_mul_f32(float x, float m) {
  // Clamped below where m e^x (|m| <= 128) rounds to zero.
  return detail::exp_scaled_f32(x, m, -112.0f);
}

/// sigmoid for f32, 1 / (1 + e^-x), within 2 ulp of the correctly rounded result (measured;
/// the contract is 4): one exp of -|x|, then 1 / (1 + e) for x >= 0 and e / (1 + e) for x < 0,
/// so neither side cancels or overflows (sigmoid(-100) is the correct subnormal, not 0).
inline float sigmoid_f32(float x) {
  const float magnitude = x < 0 ? -x : x;
  const float e = exp_f32(-magnitude);
  const float r = (x < 0 ? e : 1.0f) / (1.0f + e);
  return (x != x) ? x + x : r;
}

/// silu for f32, x / (1 + e^-x), within 3 ulp (measured; the contract is 4). As sigmoid, with
/// x e^x rounded once for x < -80 where e^x is subnormal (x times a rounded subnormal would be
/// off by up to |x| / 2 ulp); silu(-Inf) is the limit -0.
inline float silu_f32(float x) {
  const bool tiny = x < -80.0f;
  const float magnitude = x < 0 ? -x : x;
  const float factor = tiny ? (x < -128.0f ? -128.0f : x) : 1.0f;
  const float e = exp_mul_f32(-magnitude, factor);  // tiny: x e^x
  const float d = 1.0f + e;
  float r = x < 0 ? (x * e) / d : x / d;
  r = tiny ? e : r;
  r = (x == -std::numeric_limits<float>::infinity()) ? -0.0f : r;
  return (x != x) ? x + x : r;
}

/// tanh for f32 within 1 ulp on a sampled sweep (the contract is 8): an odd degree-11
/// polynomial (Cephes tanhf) below |x| = 0.625, where 1 - 2 / (e^2|x| + 1) would cancel, and
/// that formula above (it saturates to +-1 and handles +-Inf through e = Inf).
inline float tanh_f32(float x) {
  const float magnitude = x < 0 ? -x : x;
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = p * z * x + x;
  const float e = exp_f32(2.0f * magnitude);
  float large = 1.0f - 2.0f / (e + 1.0f);
  large = x < 0 ? -large : large;
  float r = magnitude < 0.625f ? small : large;
  r = x == 0 ? x : r;  // the polynomial would turn -0 into +0
  return (x != x) ? x + x : r;
}

}  // namespace deepx::cpu

#endif  // DEEPX_PLUGINS_CPU_FAST_MATH_H_
