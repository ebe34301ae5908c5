// Vectorisable elementary functions. Straight-line code (no calls, no data-dependent branches)
// so that `#pragma omp simd` loops over them compile to SIMD instructions.
#ifndef DEEPX_PLUGINS_CPU_FAST_MATH_H_
#define DEEPX_PLUGINS_CPU_FAST_MATH_H_

#include <bit>
#include <cstdint>
#include <limits>

#include "simd.h"

namespace deepx::cpu {

namespace detail {
/// The constants of the f32 exp reduction x = n ln2 + r shared by every exp in this file and the
/// AVX-512 twins in nn_util.h: adding kShifter (1.5 * 2^23) rounds x log2(e) to the integer n,
/// and ln2 = kLn2High + kLn2Low with n * kLn2High exact for |n| <= 2^8.
inline constexpr float kExpShifter = 12582912.0f;
inline constexpr float kLog2E = 1.44269504088896341f;
inline constexpr float kExpLn2High = 0.693359375f;
inline constexpr float kExpLn2Low = -2.12194440e-4f;
/// Coefficients of p(r), highest first: e^r = 1 + r + r^2 p(r) within 1 ulp for |r| <= ln2/2.
inline constexpr float kExpPoly[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                                      4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

/// p(r) of kExpPoly by Horner's rule (each step one FMA where the target has it).
inline float exp_poly_f32(float r) {
  float p = kExpPoly[0];
  for (int i = 1; i < 6; ++i) p = p * r + kExpPoly[i];
  return p;
}

#if defined(__AVX512F__)
/// exp_poly_f32 on 16 lanes.
inline __m512 exp_poly_f32x16(__m512 r) {
  __m512 p = _mm512_set1_ps(kExpPoly[0]);
  for (int i = 1; i < 6; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kExpPoly[i]));
  return p;
}
#endif

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
  const float shifted = clamped * kLog2E + kExpShifter;
  const float n_float = shifted - kExpShifter;
  const int32_t n = static_cast<int32_t>(std::bit_cast<uint32_t>(shifted)) -
                    static_cast<int32_t>(std::bit_cast<uint32_t>(kExpShifter));
  float r = clamped - n_float * kExpLn2High;
  r = r - n_float * kExpLn2Low;
  const float p = exp_poly_f32(r);
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
  const float shifted = c * detail::kLog2E + detail::kExpShifter;
  const float n_float = shifted - detail::kExpShifter;
  const int32_t n = static_cast<int32_t>(std::bit_cast<uint32_t>(shifted)) -
                    static_cast<int32_t>(std::bit_cast<uint32_t>(detail::kExpShifter));
  float r = c - n_float * detail::kExpLn2High;
  r = r - n_float * detail::kExpLn2Low;
  const float p = detail::exp_poly_f32(r);
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

/// out[i] = float_to_half(in[i]) for i < n, bit for bit. With F16C (x86-64-v3, v4) the hardware
/// conversion (vcvtps2ph, round to nearest even; the same results for every non-NaN input) after
/// NaN lanes are replaced by the quiet NaN of their sign (the hardware would keep payload bits;
/// half.h gives 0x7e00 / 0xfe00); without it, float_to_half_select vectorised by GCC.
inline void float_to_half_row(const float* in, uint16_t* out, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  const __m512i sign = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  const __m512i quiet_nan = _mm512_set1_epi32(0x7fc00000);
  auto convert = [&](__m512 v) {
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    const __m512i canonical = _mm512_or_si512(_mm512_and_si512(_mm512_castps_si512(v), sign), quiet_nan);
    v = _mm512_mask_mov_ps(v, nan, _mm512_castsi512_ps(canonical));
    return _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  };
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), convert(_mm512_loadu_ps(in + i)));
  }
#elif defined(__F16C__) && defined(__AVX__)
  const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(0x80000000u)));
  const __m256 quiet_nan = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000));
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(in + i);
    const __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    v = _mm256_blendv_ps(v, _mm256_or_ps(_mm256_and_ps(v, sign), quiet_nan), nan);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
#endif
#pragma omp simd
  for (int64_t j = i; j < n; ++j) out[j] = float_to_half_select(in[j]);
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

/// Below this input the gelu_*_wide functions and gelu_erf_f32 are not used (their polynomial
/// and range reductions are fitted to [-5, +Inf]): kernels compute those (rare) elements with
/// the reference's own f64 formula.
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


// ---- gelu (erf form) in f32 lanes ---------------------------------------------------------------
// gelu(x) = x Phi(x). With y = |x| and Phi(-y) = e^(-y^2/2) H(y), H(y) = erfcx(y / sqrt 2) / 2
// (smooth, 0.5 at 0, about 1 / (y sqrt(2 pi)) far out):
//   x < 0:  gelu(x) = -P,      x >= 0: gelu(x) = x - P,      P = y H(y) e^(-y^2/2),
// a product for x < 0 (no cancellation) and a correction of at most x / 2 for x >= 0. Each
// factor is computed in f32 to within about one f32 rounding:
//  - H on 11 intervals of width 1/2 (y in [0, 5.5), 2y = k + 1/2 + u, |u| <= 1/2): degree-6
//    polynomials in u with the constant term as a high + low pair (the rounding of an f32
//    constant alone is 0.5 ulp); fitted to the mpmath value with f32 coefficients, <= 5e-9
//    relative before evaluation.
//  - e^(-y^2/2) from y^2 = s + l split exactly (FMA, or Dekker's product without FMA), a
//    Cody-Waite reduction whose first step is exact (19-bit ln2 high part, |n| <= 22), and exp_f32's
//    polynomial on the reduced argument, applied as G + G (e^r - 1).
// y is clamped at 5.5 - 2^-20: above 5.5 the true P is below a quarter ulp of x (x - P rounds to
// x) and the clamped one too; below -5 the kernels use the reference's formula
// (kGeluWideBelow). Measured against the reference's f64 expression rounded to f32 over every
// f32 in [-5, +Inf] (by hand; fast_math_test sweeps a stride): see GeluF32WithinThreeUlp there.

namespace detail {

/// Coefficients of H on the 11 intervals (padded to 16 with the last one, so an AVX-512 permute
/// can select them from one register): [term][interval]. Generated by a weighted least-squares
/// fit, each coefficient rounded to f32 in turn and the higher ones refitted.
struct GeluErfTable {
  float c[8][16];
};
inline constexpr GeluErfTable kGeluErfTable = {{
    // c0, high part
    {0.414032102f, 0.30023247f, 0.230760321f, 0.185231671f, 0.153651938f, 0.130724728f,
     0.113452062f, 0.100039206f, 0.0893593207f, 0.0806754008f, 0.073488228f,
     0.073488228f, 0.073488228f, 0.073488228f, 0.073488228f, 0.073488228f},
    // c0, low part
    {1.31657085e-09f, -7.69560238e-09f, 2.84551743e-10f, -6.0590275e-09f, -4.18527435e-10f, 5.99329475e-09f,
     1.18533572e-10f, 3.19023608e-09f, -2.08049711e-09f, -1.621003e-09f, 2.82964074e-09f,
     2.82964074e-09f, 2.82964074e-09f, 2.82964074e-09f, 2.82964074e-09f, 2.82964074e-09f},
    // c1
    {-0.147717148f, -0.0868839771f, -0.0552459434f, -0.0373934358f, -0.0266127102f, -0.0197246317f,
     -0.0151115395f, -0.0118976226f, -0.00958258845f, -0.00786706712f, -0.00656453427f,
     -0.00656453427f, -0.00656453427f, -0.00656453427f, -0.00656453427f, -0.00656453427f},
    // c2
    {0.0425216816f, 0.021238314f, 0.0115806842f, 0.0067943316f, 0.00423684204f, 0.00277990825f,
     0.00190338225f, 0.0013508806f, 0.000988414977f, 0.000742282602f, 0.00057007774f,
     0.00057007774f, 0.00057007774f, 0.00057007774f, 0.00057007774f, 0.00057007774f},
    // c3
    {-0.0105372556f, -0.00458526704f, -0.00219108956f, -0.00113439537f, -0.000628909038f, -0.000369581161f,
     -0.000228291756f, -0.000147161685f, -9.84174985e-05f, -6.79489603e-05f, -4.82257346e-05f,
     -4.82257346e-05f, -4.82257346e-05f, -4.82257346e-05f, -4.82257346e-05f, -4.82257346e-05f},
    // c4
    {0.00232834672f, 0.000897478254f, 0.000381411694f, 0.000176476155f, 8.79262516e-05f, 4.66936181e-05f,
     2.62145459e-05f, 1.54430527e-05f, 9.48878642e-06f, 6.04864044e-06f, 3.98075372e-06f,
     3.98075372e-06f, 3.98075372e-06f, 3.98075372e-06f, 3.98075372e-06f, 3.98075372e-06f},
    // c5
    {-0.000475186214f, -0.00016397165f, -6.25430039e-05f, -2.60973229e-05f, -1.171638e-05f, -5.6975623e-06f,
     -2.91648803e-06f, -1.58939054e-06f, -9.02304805e-07f, -5.24266341e-07f, -3.24015787e-07f,
     -3.24015787e-07f, -3.24015787e-07f, -3.24015787e-07f, -3.24015787e-07f, -3.24015787e-07f},
    // c6
    {8.77998973e-05f, 2.75204111e-05f, 9.52430946e-06f, 3.63334084e-06f, 1.46995092e-06f, 6.62916023e-07f,
     3.13353354e-07f, 1.59617997e-07f, 8.27458635e-08f, 4.33793801e-08f, 2.66075784e-08f,
     2.66075784e-08f, 2.66075784e-08f, 2.66075784e-08f, 2.66075784e-08f, 2.66075784e-08f},
}};

/// Upper clamp of 2y (NaN gives the clamp too).
constexpr float kGeluErfMaxY2 = 10.9999981f;  // 11 - 2^-19: interval 10 at most

}  // namespace detail

/// gelu (erf form) for an f32 x >= kGeluWideBelow (and +-Inf, NaN), within 2 ulp of the
/// reference's f64 value rounded to f32 with FMA (every such f32 checked), 3 without
/// (fast_math_test). Straight-line code; the table lookups become gathers (or element loads)
/// in vectorised loops. Below kGeluWideBelow the result is meaningless: use the reference
/// formula there.
inline float gelu_erf_f32(float x) {
  const auto& t = detail::kGeluErfTable.c;
  const float ax = std::bit_cast<float>(std::bit_cast<uint32_t>(x) & 0x7fffffffu);
  float y2 = ax + ax;
  y2 = y2 < detail::kGeluErfMaxY2 ? y2 : detail::kGeluErfMaxY2;  // NaN: the clamp
  const int32_t k = static_cast<int32_t>(y2);                    // y2 >= 0: floor
  const float u = (y2 - static_cast<float>(k)) - 0.5f;           // exact
  float h = t[7][k];
  h = h * u + t[6][k];
  h = h * u + t[5][k];
  h = h * u + t[4][k];
  h = h * u + t[3][k];
  h = h * u + t[2][k];
  h = h * u + t[1][k];
  h = h + t[0][k];
  const float y = y2 * 0.5f;
  // y^2 = s + l exactly.
  const float s = y * y;
#if defined(__FMA__)
  const float l = __builtin_fmaf(y, y, -s);
#else
  const float y_high = std::bit_cast<float>(std::bit_cast<uint32_t>(y) & 0xfffff000u);
  const float y_low = y - y_high;
  const float l = ((y_high * y_high - s) + 2.0f * y_high * y_low) + y_low * y_low;
#endif
  const float hs = -0.5f * s, hl = -0.5f * l;  // -y^2/2 = hs + hl
  const float shifted = hs * detail::kLog2E + detail::kExpShifter;
  const float n_float = shifted - detail::kExpShifter;
  const int32_t n = static_cast<int32_t>(std::bit_cast<uint32_t>(shifted)) -
                    static_cast<int32_t>(std::bit_cast<uint32_t>(detail::kExpShifter));
  constexpr float kLn2High = 0.693145751953125f;      // 19 bits: n * kLn2High is exact
  constexpr float kLn2Low = 1.42860682030941723e-6f;
  float r = hs - n_float * kLn2High;                  // exact
  r = r + (hl - n_float * kLn2Low);
  const float p = detail::exp_poly_f32(r);
  const float q = p * (r * r) + r;  // e^r - 1
  const float g = y * h;
  const float scale = std::bit_cast<float>(static_cast<uint32_t>(n + 127) << 23);
  const float big_p = (g * q + g) * scale;
  const float result = x < 0 ? -big_p : x - big_p;
  return (x != x) ? x + x : result;
}

#if defined(__AVX512F__)
/// gelu_erf_f32 on 16 lanes: the same algorithm with the table lookups as register permutes
/// (vpermps; GCC would emit gathers) and the scale by 2^n as vscalefps. Fewer instructions than
/// the plain transcription (the loop is compute-bound even at 16M elements; with the fused tail
/// mark of gelu_erf_row_f32_marked, 7% less time per element in the x86-64-v4 build, 13% native)
/// with the same bits (compared on all 2^32 inputs, 2026-11-21): the fraction of 2y by vreduceps,
/// -y^2/2 split as y * (-y/2) (exact scalings of the same product), and x - P for x >= 0, -P
/// for x < 0 as max(x, -0) - P (vrangeps).
inline __m512 gelu_erf_f32x16(__m512 x) {
  const auto& t = detail::kGeluErfTable.c;
  const __m512 ax = _mm512_abs_ps(x);
  const __m512 y2 = _mm512_min_ps(_mm512_add_ps(ax, ax), _mm512_set1_ps(detail::kGeluErfMaxY2));
  const __m512i k = _mm512_cvttps_epi32(y2);
#if defined(__AVX512DQ__)
  // y2 - floor(y2) (imm: no fraction bits kept, round down), exact.
  const __m512 fraction = _mm512_reduce_ps(y2, 0x01);
#else
  const __m512 fraction = _mm512_sub_ps(y2, _mm512_cvtepi32_ps(k));
#endif
  const __m512 u = _mm512_sub_ps(fraction, _mm512_set1_ps(0.5f));
  auto coefficient = [&](int term) { return _mm512_permutexvar_ps(k, _mm512_loadu_ps(t[term])); };
  __m512 h = coefficient(7);
  for (int term = 6; term >= 1; --term) h = _mm512_fmadd_ps(h, u, coefficient(term));
  h = _mm512_add_ps(h, coefficient(0));
  const __m512 y = _mm512_mul_ps(y2, _mm512_set1_ps(0.5f));
  // -y^2/2 = hs + hl exactly: y * (-y/2) (= -0.5 * (y * y), both scalings exact) and its FMA
  // remainder.
  const __m512 minus_half_y = _mm512_mul_ps(y2, _mm512_set1_ps(-0.25f));
  const __m512 hs = _mm512_mul_ps(y, minus_half_y);
  const __m512 hl = _mm512_fmsub_ps(y, minus_half_y, hs);
  const __m512 shifter = _mm512_set1_ps(detail::kExpShifter);
  const __m512 n_float =
      _mm512_sub_ps(_mm512_fmadd_ps(hs, _mm512_set1_ps(detail::kLog2E), shifter), shifter);
  __m512 r = _mm512_fnmadd_ps(n_float, _mm512_set1_ps(0.693145751953125f), hs);
  r = _mm512_add_ps(r, _mm512_fnmadd_ps(n_float, _mm512_set1_ps(1.42860682030941723e-6f), hl));
  const __m512 p = detail::exp_poly_f32x16(r);
  const __m512 q = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r);
  const __m512 g = _mm512_mul_ps(y, h);
  const __m512 big_p = _mm512_scalef_ps(_mm512_fmadd_ps(g, q, g), n_float);
#if defined(__AVX512DQ__)
  // max(x, -0): x for x >= +0, -0 for x < 0 and x = -0 (vrangeps orders -0 below +0), so
  // max(x, -0) - P is x - P for x >= 0 and -0 - P = -P (the sign kept when P is 0) for x < 0.
  const __m512 base = _mm512_range_ps(x, _mm512_set1_ps(-0.0f), 0x01);
  const __m512 result = _mm512_sub_ps(base, big_p);
#else
  const __m512i sign_bit = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  const __mmask16 negative = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
  const __m512 result = _mm512_mask_blend_ps(
      negative, _mm512_sub_ps(x, big_p), _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(big_p), sign_bit)));
#endif
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  return _mm512_mask_add_ps(result, nan, x, x);
}
#endif

/// out[i] = gelu_erf_f32(in[i]) for i < n (out may be in: each element is read before it is
/// written). AVX-512: 16 lanes with register permutes and a masked last vector.
inline void gelu_erf_row_f32(const float* in, float* out, int64_t n) {
#if defined(__AVX512F__)
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, gelu_erf_f32x16(_mm512_loadu_ps(in + i)));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(out + i, m, gelu_erf_f32x16(_mm512_maskz_loadu_ps(m, in + i)));
  }
#else
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = gelu_erf_f32(in[i]);
#endif
}

namespace detail {
/// out[i] = in[i] < below ? in[i] : f(in[i]) for i < n (out may be in); returns whether any
/// input was below. The marking loop of the gelu_*_row_f32_marked functions (f inlines, so the
/// loop vectorises as one with f written out).
template <class F>
inline bool map_marking_below(const float* in, float* out, int64_t n, float below, F f) {
  int any = 0;
#pragma omp simd reduction(| : any)
  for (int64_t i = 0; i < n; ++i) {
    const float x = in[i];
    const bool tail = x < below;
    any |= tail;
    out[i] = tail ? x : f(x);
  }
  return any != 0;
}
}  // namespace detail

/// gelu_erf_row_f32 that also marks the inputs below kGeluWideBelow (and -Inf), where the
/// kernels must use the reference's formula: those lanes get x itself. No gelu value is below
/// kGeluWideBelow, so out[i] < kGeluWideBelow tells them apart afterwards, also when out aliases
/// in. Returns whether there was one. One compare per vector inside the loop instead of a
/// separate pass over the inputs.
inline bool gelu_erf_row_f32_marked(const float* in, float* out, int64_t n) {
  constexpr float kBelow = static_cast<float>(kGeluWideBelow);
#if defined(__AVX512F__)
  const __m512 below = _mm512_set1_ps(kBelow);
  __mmask16 any = 0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 x = _mm512_loadu_ps(in + i);
    const __mmask16 tail = _mm512_cmp_ps_mask(x, below, _CMP_LT_OQ);
    any = static_cast<__mmask16>(any | tail);
    _mm512_storeu_ps(out + i, _mm512_mask_mov_ps(gelu_erf_f32x16(x), tail, x));
  }
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1u);
    const __m512 x = _mm512_maskz_loadu_ps(m, in + i);
    const __mmask16 tail = _mm512_mask_cmp_ps_mask(m, x, below, _CMP_LT_OQ);
    any = static_cast<__mmask16>(any | tail);
    _mm512_mask_storeu_ps(out + i, m, _mm512_mask_mov_ps(gelu_erf_f32x16(x), tail, x));
  }
  return any != 0;
#else
  return detail::map_marking_below(in, out, n, kBelow, [](float x) { return gelu_erf_f32(x); });
#endif
}


/// gelu (tanh form) 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), for an f32
/// x >= kGeluWideBelow (and +-Inf, NaN), within 3 ulp of the reference's f64 value rounded to
/// f32 (sampled and dense sweeps; fast_math_test). With y = |x|, v = |u| and E = e^(-2v):
///   x < 0:  gelu(x) = -P,      x >= 0: gelu(x) = x - P,      P = y E / (1 + E)
/// (x sigmoid(2u) without cancellation). Only the exponent 2v (up to 66, needed to 2^-26
/// absolute) is computed in f64 lanes, with its reduction by n ln2; e^r, the quotient and the
/// rest are f32. y is clamped at 9, where P is below 2^-90. GCC vectorises the f32 <-> f64
/// conversions in `#pragma omp simd` loops.
inline float gelu_tanh_f32(float x) {
  const float ax = std::bit_cast<float>(std::bit_cast<uint32_t>(x) & 0x7fffffffu);
  const float y = ax < 9.0f ? ax : 9.0f;  // NaN: the clamp
  const double yd = y;
  constexpr double kTwiceSqrt2OverPi = 2.0 * 0.7978845608028654;
  const double two_v = yd * (kTwiceSqrt2OverPi + (kTwiceSqrt2OverPi * 0.044715) * (yd * yd));
  constexpr double kShifter = 6755399441055744.0;  // 1.5 * 2^52
  const double shifted = two_v * -1.4426950408889634 + kShifter;
  const double n_float = shifted - kShifter;
  const double r_wide = -two_v - n_float * 0.69314718055994531;  // |r| <= ln2 / 2
  const float r = static_cast<float>(r_wide);
  const int32_t n = static_cast<int32_t>(n_float);
  const float p = detail::exp_poly_f32(r);
  const float e_r = p * (r * r) + r + 1.0f;
  const float e = e_r * std::bit_cast<float>(static_cast<uint32_t>(n + 127) << 23);  // n >= -96
  const float big_p = (y * e) / (1.0f + e);
  const float result = x < 0 ? -big_p : x - big_p;
  return (x != x) ? x + x : result;
}

/// out[i] = gelu_tanh_f32(in[i]) for i < n (out may be in).
inline void gelu_tanh_row_f32(const float* in, float* out, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = gelu_tanh_f32(in[i]);
}

/// gelu_tanh_row_f32 that marks the inputs below kGeluWideBelow as gelu_erf_row_f32_marked does.
inline bool gelu_tanh_row_f32_marked(const float* in, float* out, int64_t n) {
  return detail::map_marking_below(in, out, n, static_cast<float>(kGeluWideBelow),
                                   [](float x) { return gelu_tanh_f32(x); });
}

}  // namespace deepx::cpu

#endif  // DEEPX_PLUGINS_CPU_FAST_MATH_H_
