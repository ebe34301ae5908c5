// Vectorisable elementary functions. Straight-line code (no calls, no data-dependent branches)
// so that `#pragma omp simd` loops over them compile to SIMD instructions.
#ifndef DEEPX_PLUGINS_CPU_FAST_MATH_H_
#define DEEPX_PLUGINS_CPU_FAST_MATH_H_

#include <bit>
#include <cstdint>

namespace deepx::cpu {

/// exp for f32, within 2 ulp of the correctly rounded result over the whole range (the unit
/// tests sweep it). Cody-Waite reduction x = n ln2 + r with |r| <= ln2/2, a degree-7 polynomial
/// for e^r, and a two-step scale by 2^n so results in the subnormal range round only once.
/// Overflow gives +Inf, underflow 0 (or a subnormal), NaN stays NaN.
inline float exp_f32(float x) {
  // Clamp to where the result is finite-or-just-overflowing / just-underflowing, and keep NaN
  // out of the integer path (its result is selected below). Every comparison and every FP op
  // is evaluated unconditionally and only values are selected: GCC will not if-convert (and so
  // not vectorise) a loop that evaluates an FP operation under a condition.
  float clamped = x > 89.0f ? 89.0f : x;
  clamped = clamped < -104.0f ? -104.0f : clamped;
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
  // 2^n as two normal powers of two (n in [-150, 129]).
  const int32_t n_low = n >> 1;
  const int32_t n_high = n - n_low;
  const float scale_low = std::bit_cast<float>(static_cast<uint32_t>(n_low + 127) << 23);
  const float scale_high = std::bit_cast<float>(static_cast<uint32_t>(n_high + 127) << 23);
  const float result = (y * scale_low) * scale_high;
  const float quiet_nan = x + x;
  return (x != x) ? quiet_nan : result;
}

}  // namespace deepx::cpu

#endif  // DEEPX_PLUGINS_CPU_FAST_MATH_H_
