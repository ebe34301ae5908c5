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

/// e^d for f32 d <= 0, -Inf or NaN: the max-shifted arguments of softmax-like rows (x - max,
/// x - log-sum-exp). Same reduction and polynomial as exp_f32 (within 2 ulp of the correctly
/// rounded result for d >= -87) with one scale by 2^n, no upper clamp and no subnormal path:
/// d < -87 (results below 2^-125.5) gives 0, -Inf gives 0 and NaN stays NaN. Such rows divide by
/// a sum >= 1, so a flushed term changes nothing above 1e-37 absolute.
inline float exp_nonpositive_f32(float d) {
  const float c = d < -87.0f ? -87.0f : d;
  constexpr float kShifter = 12582912.0f;  // 1.5 * 2^23
  const float shifted = c * 1.44269504088896341f + kShifter;
  const float n_float = shifted - kShifter;
  const int32_t n = static_cast<int32_t>(std::bit_cast<uint32_t>(shifted)) -
                    static_cast<int32_t>(std::bit_cast<uint32_t>(kShifter));
  float r = c - n_float * 0.693359375f;
  r = r - n_float * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * (r * r) + r + 1.0f;
  // n >= -126 for c >= -87, so n + 127 is a normal exponent (NaN: r and y are NaN anyway).
  const float scale = std::bit_cast<float>(static_cast<uint32_t>(n + 127) << 23);
  return d < -87.0f ? 0.0f : y * scale;
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

// ---- f16/bf16 conversions as selects ----------------------------------------------------------
// Bit-for-bit the conversions of half.h (f32 -> f16 checked on all 2^32 inputs when written;
// fast_math_test checks a strided sweep, dense range edges and all 2^16 halves),
// with every path computed and the result selected, so loops over them vectorise (half.h's
// branches with a float operation inside do not).

/// float_to_half as selects: round to nearest even, overflow to Inf, NaN to 0x7e00.
inline uint16_t float_to_half_select(float value) {
  uint32_t f = std::bit_cast<uint32_t>(value);
  const uint32_t sign = f & 0x80000000u;
  f ^= sign;
  const uint32_t special = f > 0x7f800000u ? 0x7e00u : 0x7c00u;
  // Below the smallest normal half: adding 0.5 lets the FPU round the subnormal.
  const float sum = std::bit_cast<float>(f) + std::bit_cast<float>(126u << 23);
  const uint32_t subnormal = std::bit_cast<uint32_t>(sum) - (126u << 23);
  const uint32_t odd = (f >> 13) & 1u;
  const uint32_t normal = (f + (static_cast<uint32_t>(15 - 127) << 23) + 0xfffu + odd) >> 13;
  const uint32_t out = f >= (143u << 23) ? special : (f < (113u << 23) ? subnormal : normal);
  return static_cast<uint16_t>(out | (sign >> 16));
}

/// float_to_bfloat16 as selects: round to nearest even, NaN stays a quiet NaN.
inline uint16_t float_to_bfloat16_select(float value) {
  const uint32_t f = std::bit_cast<uint32_t>(value);
  const uint32_t nan = (f >> 16) | 0x0040u;
  const uint32_t rounded = (f + 0x7fffu + ((f >> 16) & 1u)) >> 16;
  return static_cast<uint16_t>((f & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

/// half_to_float as selects (exact).
inline float half_to_float_select(uint16_t h) {
  const uint32_t shifted = static_cast<uint32_t>(h & 0x7fffu) << 13;
  const uint32_t exponent = shifted & 0x0f800000u;
  const uint32_t bits = shifted + ((127u - 15u) << 23);
  const uint32_t inf_nan = bits + ((128u - 16u) << 23);
  const float subnormal = std::bit_cast<float>(bits + (1u << 23)) - std::bit_cast<float>(113u << 23);
  const uint32_t magnitude = exponent == 0x0f800000u ? inf_nan
                             : (exponent == 0 ? std::bit_cast<uint32_t>(subnormal) : bits);
  return std::bit_cast<float>(magnitude | (static_cast<uint32_t>(h & 0x8000u) << 16));
}

// ---- f64-lane functions for f32/f16/bf16 kernels -------------------------------------------------
// The functions below take an f32 (or f16/bf16 widened to f32) argument and return an f64 result
// within about 1e-11 relative of the true value, so that rounding it once to the output dtype
// gives the reference's f64-then-round result to within 1 ulp (ties aside, exactly). They are
// straight-line f64 code (selects, no calls, no branches) and vectorise in `#pragma omp simd`
// loops: 8 lanes under AVX-512, 2 under baseline SSE2.

/// e^a for f64, relative error below 1e-14 over the whole range (9e-15 measured):
/// overflow gives +Inf, results below the normal range are subnormal (rounded once) or 0, NaN
/// stays NaN. Cody-Waite reduction with the fdlibm ln2 split (n * kLn2High exact for
/// |n| < 2^21), degree-11 Taylor polynomial on |r| <= ln2 / 2, then the scale by 2^n as two
/// normal powers of two (n in [-1077, 1025]) applied one after the other, as exp_f32.
inline double exp_f64(double a) {
  double c = a > 710.0 ? 710.0 : a;
  c = c < -746.0 ? -746.0 : c;
  c = (a != a) ? 0.0 : c;
  constexpr double kShifter = 6755399441055744.0;  // 1.5 * 2^52: adding it rounds to an integer
  const double shifted = c * 1.4426950408889634 + kShifter;
  const double n_float = shifted - kShifter;
  const int64_t n = static_cast<int64_t>(std::bit_cast<uint64_t>(shifted) -
                                         std::bit_cast<uint64_t>(kShifter));
  constexpr double kLn2High = 6.93147180369123816490e-01;
  constexpr double kLn2Low = 1.90821492927058770002e-10;
  double r = c - n_float * kLn2High;
  r = r - n_float * kLn2Low;
  double p = 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  const int64_t n_low = n >> 1;
  const int64_t n_high = n - n_low;
  const double scale_low = std::bit_cast<double>(static_cast<uint64_t>(n_low + 1023) << 52);
  const double scale_high = std::bit_cast<double>(static_cast<uint64_t>(n_high + 1023) << 52);
  return (a != a) ? a + a : (p * scale_low) * scale_high;
}

namespace detail {

/// erfc(z) for z >= 0 (not NaN), relative error about 1e-11 for z <= 6; z above 6 gives
/// erfc(6) (2e-17, which no caller can tell from 0 after 1 - erfc). Form of Numerical Recipes'
/// erfcc, erfc(z) = t e^(-z^2 + P(t)) with t = 2 / (2 + z), but with our own degree-13
/// least-squares fit of P in t - 0.625 over t in [0.25, 1] (max |error| 1.4e-11 against
/// mpmath), so the relative error is that of P plus exp_f64's. Vectorisable (f64 lanes).
inline double erfc_nonnegative_f64(double z) {
  const double zc = z < 6.0 ? z : 6.0;
  const double t = 2.0 / (2.0 + zc);
  const double u = t - 0.625;
  double p = -0.12688547588509116;
  p = p * u + 0.15872102157230181;
  p = p * u + 0.080489976604315755;
  p = p * u + -0.24174975247774191;
  p = p * u + 0.063830258181191021;
  p = p * u + 0.20775097543664461;
  p = p * u + -0.18706619299360194;
  p = p * u + -0.1187155556899378;
  p = p * u + 0.27357800874969224;
  p = p * u + 0.024956153825557881;
  p = p * u + -0.4081520834556302;
  p = p * u + 0.039614313710757854;
  p = p * u + 1.3741671655715169;
  p = p * u + -0.50143672593038291;
  return t * exp_f64(p - zc * zc);
}

}  // namespace detail

/// log(x) of an f32 x as an f64 (about 1e-15 relative): x = 2^e m with m in [sqrt(1/2),
/// sqrt(2)) read from the bits (subnormals scaled by 2^23 first), log m = 2 atanh(s) with
/// s = (m - 1) / (m + 1), |s| <= 0.172, as the odd series to s^17. x < 0 gives NaN, +-0 -Inf,
/// +Inf +Inf, NaN NaN.
inline double log_wide(float x) {
  const bool subnormal = (std::bit_cast<uint32_t>(x) & 0x7f800000u) == 0;
  const float scaled = subnormal ? x * 8388608.0f : x;  // 2^23, exact
  const uint32_t bits = std::bit_cast<uint32_t>(scaled);
  int32_t e = static_cast<int32_t>((bits >> 23) & 0xffu) - 127 - (subnormal ? 23 : 0);
  double m = static_cast<double>(std::bit_cast<float>((bits & 0x007fffffu) | 0x3f800000u));
  const bool high = m > 1.4142135623730951;
  m = high ? m * 0.5 : m;
  e += high ? 1 : 0;
  const double f = m - 1.0;
  const double s = f / (2.0 + f);
  const double w = s * s;
  double p = 2.0 / 17.0;
  p = p * w + 2.0 / 15.0;
  p = p * w + 2.0 / 13.0;
  p = p * w + 2.0 / 11.0;
  p = p * w + 2.0 / 9.0;
  p = p * w + 2.0 / 7.0;
  p = p * w + 2.0 / 5.0;
  p = p * w + 2.0 / 3.0;
  p = p * w + 2.0;
  double r = static_cast<double>(e) * 0.69314718055994531 + s * p;
  const double inf = std::numeric_limits<double>::infinity();
  r = (x == std::numeric_limits<float>::infinity()) ? inf : r;
  r = (x == 0.0f) ? -inf : r;
  r = (x < 0.0f) ? std::numeric_limits<double>::quiet_NaN() : r;
  return (x != x) ? static_cast<double>(x) : r;
}

/// log for f32: log_wide rounded once (at most 1 ulp from the correctly rounded result; the
/// contract is 4).
inline float log_f32(float x) { return static_cast<float>(log_wide(x)); }

/// erf(x) of an f32 x as an f64 (about 1e-11 relative): x Q(x^2) below |x| = 1 (degree-8
/// least-squares fit, 1e-12 relative), +-(1 - erfc|x|) above. erf(+-0) = +-0, erf(+-Inf) = +-1.
inline double erf_wide(float xf) {
  const double x = xf;
  const double ax = x < 0 ? -x : x;
  const double w = x * x;
  double q = 1.0595291087406311e-06;
  q = q * w + -1.3911706911409749e-05;
  q = q * w + 0.00011956947707358889;
  q = q * w + -0.00085426706381726281;
  q = q * w + 0.0052237850102066913;
  q = q * w + -0.026866133626245764;
  q = q * w + 0.11283791313508493;
  q = q * w + -0.37612638889869732;
  q = q * w + 1.1283791670946945;
  const double small = x * q;
  const double tail = 1.0 - detail::erfc_nonnegative_f64(ax);
  const double large = x < 0 ? -tail : tail;
  const double r = ax < 1.0 ? small : large;
  return (x != x) ? x + x : r;
}

/// erf for f32: erf_wide rounded once (at most 1 ulp; the contract is 8).
inline float erf_f32(float x) { return static_cast<float>(erf_wide(x)); }

/// Below this input the gelu_*_wide functions are not used: there the reference's own
/// 1 + erf(x / sqrt 2) and 1 + tanh(u) cancel in f64 (its result carries f64 rounding noise
/// relative to a value below 1e-7), and only the same libm expression reproduces it. Kernels
/// compute those (rare) elements with the reference formula.
constexpr double kGeluWideBelow = -5.0;

/// gelu (erf form) x Phi(x) of an f32 x as an f64 (about 1e-11 relative) for x >= -5 (and
/// +Inf, NaN): Phi = erfc(|x| / sqrt 2) / 2 for x < 0 (no cancellation), 1 - erfc(x / sqrt 2)
/// / 2 for x >= 0. -0 gives -0. Below kGeluWideBelow use the reference formula.
inline double gelu_erf_wide(float xf) {
  const double x = xf;
  const double z = (x < 0 ? -x : x) * 0.70710678118654752;
  const double half_erfc = 0.5 * detail::erfc_nonnegative_f64(z);
  const double phi = x < 0 ? half_erfc : 1.0 - half_erfc;
  return x * phi;  // NaN stays NaN (z = NaN makes erfc finite, x * phi NaN)
}

/// gelu (tanh form) 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), of an f32 x as
/// an f64, computed as x / (1 + e^(-2u)) (the same value without the cancellation), for
/// x >= -5 (and +Inf, NaN). Below kGeluWideBelow use the reference formula.
inline double gelu_tanh_wide(float xf) {
  const double x = xf;
  const double u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
  return x / (1.0 + exp_f64(-2.0 * u));
}

}  // namespace deepx::cpu

#endif  // DEEPX_PLUGINS_CPU_FAST_MATH_H_
