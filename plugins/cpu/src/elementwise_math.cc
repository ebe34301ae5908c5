// The elementwise math and logic kernels beyond the arithmetic core of elementwise.cc:
// abs, sign, reciprocal, sqrt, rsqrt, expm1, log, log1p, sin, cos, tan, tanh, erf, sigmoid,
// silu, gelu, floor, ceil, round, clamp; pow, maximum, minimum; the comparisons; logical
// and/or/xor/not; bitwise_not; where; cast between every pair of dtypes.
//
// Transcendentals compute in f64 with the `std::` function and round once to the output dtype,
// which is what the reference does, except where fast_math.h has a vectorisable version within
// the suite's ulp limits (checked by fast_math_test): f32 tanh, sigmoid, silu, both gelu forms
// (f32 functions; gelu within 2-3 ulp, computed mostly in f32 lanes with only the delicate
// parts, the exponent's y^2 or 2u, carried exactly), and for f16/bf16 gelu and f32/f16/bf16
// log and erf ("wide" functions: f32 in, f64 out within about 1e-11 relative, rounded once like
// the reference's f64, so at most 1 ulp apart). gelu inputs below -5, where the reference's
// 1 + erf / 1 + tanh cancel in f64, take the reference's own libm expression
// (map_with_exact_tail, map_f32_with_exact_tail). dx.cast f32 -> f16 uses the F16C conversion
// where the build has it (float_to_half_row, bit-identical to half.h). Ops whose
// result is exact (abs, sign, floor, max/min, comparisons, clamp, where, cast) are bit-exact by
// construction and follow the edge cases docs/ops.md defines (NaN handling,
// ties of +0/-0, saturation, bool conversions).
#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstring>
#include <numbers>
#include <optional>
#include <string>

#include "fast_math.h"
#include "grad.h"
#include "kernels.h"
#include "map.h"

namespace deepx::cpu {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kSqrt2OverPi = 0.7978845608028654;  // sqrt(2 / pi), as the reference
constexpr double kGeluCubic = 0.044715;

double nan_max(double a, double b) { return (a != a || b != b) ? a + b : (a > b ? a : b); }
double nan_min(double a, double b) { return (a != a || b != b) ? a + b : (a < b ? a : b); }

// ---- unary float functions (f64 in, f64 out; the kernel rounds once) ----------------------------

struct Reciprocal { static double f(double x) { return 1.0 / x; } };
struct Sqrt { static double f(double x) { return std::sqrt(x); } };
struct Rsqrt { static double f(double x) { return 1.0 / std::sqrt(x); } };
struct Expm1 { static double f(double x) { return std::expm1(x); } };
struct Log {
  static double f(double x) { return std::log(x); }
  static double wide(float x) { return log_wide(x); }
};
struct Log1p { static double f(double x) { return std::log1p(x); } };
struct Sin { static double f(double x) { return std::sin(x); } };
struct Cos { static double f(double x) { return std::cos(x); } };
struct Tan { static double f(double x) { return std::tan(x); } };
// Ops with an `f32` member run their f32 kernels on that branch-free, vectorisable version
// (fast_math.h: within the suite's ulp limits, checked by fast_math_test) instead of f64 libm.
struct Tanh {
  static double f(double x) { return std::tanh(x); }
  static float f32(float x) { return tanh_f32(x); }
};
struct Erf {
  static double f(double x) { return std::erf(x); }
  static double wide(float x) { return erf_wide(x); }
};
struct Sigmoid {
  static double f(double x) { return 1.0 / (1.0 + std::exp(-x)); }
  static float f32(float x) { return sigmoid_f32(x); }
};
// At -Inf the limit -0 (the formula would give -Inf / Inf = NaN).
struct Silu {
  static double f(double x) { return x == -kInf ? -0.0 : x / (1.0 + std::exp(-x)); }
  static float f32(float x) { return silu_f32(x); }
};
// The reference's gelu formulas (the erf form through erfc: see reference-kernels).
struct GeluErf {
  static double f(double x) {
    return x == -kInf ? -0.0 : 0.5 * x * std::erfc(-x / std::numbers::sqrt2);
  }
};
struct GeluTanh {
  static double f(double x) {
    return x == -kInf ? -0.0
                      : 0.5 * x * (1.0 + std::tanh(kSqrt2OverPi * (x + kGeluCubic * x * x * x)));
  }
};
struct Floor { static double f(double x) { return std::floor(x); } };
struct Ceil { static double f(double x) { return std::ceil(x); } };
// Half to even: nearbyint in the default rounding mode.
struct Round { static double f(double x) { return std::nearbyint(x); } };

// Cheap ops go parallel only on large tensors; libm calls on much smaller ones.
template <class Fn>
constexpr int64_t cost_of() {
  if constexpr (std::is_same_v<Fn, Reciprocal> || std::is_same_v<Fn, Sqrt> ||
                std::is_same_v<Fn, Rsqrt> || std::is_same_v<Fn, Floor> ||
                std::is_same_v<Fn, Ceil> || std::is_same_v<Fn, Round>) {
    return 4;
  } else {
    return 32;
  }
}

template <class Fn>
concept HasF32 = requires(float x) {
  { Fn::f32(x) } -> std::same_as<float>;
};

// Ops with a `wide` member compute f32/f16/bf16 elements with that vectorisable f32 -> f64
// function (fast_math.h, about 1e-11 relative), rounded once as the reference rounds its f64.
template <class Fn>
concept HasWide = requires(float x) {
  { Fn::wide(x) } -> std::same_as<double>;
};

template <class T, class Fn>
dx_error_t* float_unary_kernel(const dx_kernel_call_t* call) noexcept {
  return guard(call->host, [&] {
    const auto [out, in] = unary_views<T, T>(call);
    if constexpr (std::is_same_v<T, float> && HasF32<Fn>) {
      map_elements<T, T>(out, {&in}, [](float x) { return Fn::f32(x); }, 8);
    } else if constexpr (!std::is_same_v<T, double> && HasWide<Fn>) {
      map_elements<T, T>(out, {&in}, [](T x) { return from_f64<T>(Fn::wide(Num<T>::load(x))); }, 8);
    } else {
      map_elements<T, T>(out, {&in}, [](T x) { return from_f64<T>(Fn::f(to_f64(x))); },
                         cost_of<Fn>());
    }
  });
}

/// out = wide(x) rounded once for f32/f16/bf16 x, except elements below kGeluWideBelow, which
/// take exact(x) (the reference's libm expression in f64). Blocks of a row are computed by the
/// vectorised function first, then the few tail elements of the block are overwritten, from a
/// copy of the block's inputs (out may alias in).
template <class T, class Wide>
void map_with_exact_tail(const View& out, const View& in, Wide wide, double (*exact)(double)) {
  if (out.count() == 0) return;
  const StridedLoop<2> loop = loop_over(out, in);  // one shape: out first, then in
  T* const po = out.data<T>();
  const T* const px = in.data<const T>();
  auto row = [&](int64_t n, const int64_t* off, const int64_t* st) {
    constexpr int64_t kBlock = 256;
    float xs[kBlock];
    T* o = po + off[0];
    const T* x = px + off[1];
    const int64_t so = st[0], sx = st[1];
    for (int64_t b = 0; b < n; b += kBlock) {
      const int64_t m = std::min(kBlock, n - b);
      int tail = 0;
      if (sx == 1) {
#pragma omp simd reduction(| : tail)
        for (int64_t i = 0; i < m; ++i) {
          xs[i] = Num<T>::load(x[b + i]);
          tail |= xs[i] < static_cast<float>(kGeluWideBelow);
        }
      } else {
        for (int64_t i = 0; i < m; ++i) {
          xs[i] = Num<T>::load(x[(b + i) * sx]);
          tail |= xs[i] < static_cast<float>(kGeluWideBelow);
        }
      }
      if (so == 1) {
#pragma omp simd
        for (int64_t i = 0; i < m; ++i) o[b + i] = from_f64<T>(wide(xs[i]));
      } else {
        for (int64_t i = 0; i < m; ++i) o[(b + i) * so] = from_f64<T>(wide(xs[i]));
      }
      if (tail != 0) {
        for (int64_t i = 0; i < m; ++i) {
          if (xs[i] < static_cast<float>(kGeluWideBelow)) o[(b + i) * so] = from_f64<T>(exact(xs[i]));
        }
      }
    }
  };
  for_each_row(loop, row, 8);
}

/// out = row(x) for f32 x, except elements below kGeluWideBelow, which take exact(x) (the
/// reference's libm expression in f64). `row(in, out, n)` is a vectorised f32 row function that
/// marks those elements (gelu_erf_row_f32_marked: it stores x itself there, below any gelu value,
/// and returns whether there was one; in == out allowed). Unit-stride blocks go straight through
/// it and are patched in place when marked; other blocks go through a copy of their inputs.
template <class Row>
void map_f32_with_exact_tail(const View& out, const View& in, Row row_fn, double (*exact)(double)) {
  if (out.count() == 0) return;
  const StridedLoop<2> loop = loop_over(out, in);  // one shape: out first, then in
  float* const po = out.data<float>();
  const float* const px = in.data<const float>();
  constexpr float kBelow = static_cast<float>(kGeluWideBelow);
  auto patch = [exact](float* ys, int64_t m) {
    for (int64_t i = 0; i < m; ++i) {
      if (ys[i] < kBelow) ys[i] = static_cast<float>(exact(ys[i]));
    }
  };
  auto row = [&](int64_t n, const int64_t* off, const int64_t* st) {
    constexpr int64_t kBlock = 256;
    alignas(64) float xs[kBlock];
    alignas(64) float ys[kBlock];
    float* o = po + off[0];
    const float* x = px + off[1];
    const int64_t so = st[0], sx = st[1];
    for (int64_t b = 0; b < n; b += kBlock) {
      const int64_t m = std::min(kBlock, n - b);
      if (sx == 1 && so == 1) {
        if (row_fn(x + b, o + b, m)) patch(o + b, m);
        continue;
      }
      for (int64_t i = 0; i < m; ++i) xs[i] = x[(b + i) * sx];
      if (row_fn(xs, ys, m)) patch(ys, m);
      for (int64_t i = 0; i < m; ++i) o[(b + i) * so] = ys[i];
    }
  };
  for_each_row(loop, row, 8);
}

/// dx.gelu: attr `approximate` unset / "none" (erf form) or "tanh".
template <class T>
dx_error_t* gelu_kernel(const dx_kernel_call_t* call) noexcept {
  return guard(call->host, [&] {
    const bool tanh_form = gelu_tanh_form(call);
    const auto [out, in] = unary_views<T, T>(call);
    if constexpr (std::is_same_v<T, float>) {
      if (tanh_form) {
        map_f32_with_exact_tail(out, in, &gelu_tanh_row_f32_marked, &GeluTanh::f);
      } else {
        map_f32_with_exact_tail(out, in, &gelu_erf_row_f32_marked, &GeluErf::f);
      }
      return;
    }
    if constexpr (!std::is_same_v<T, double>) {
      if (tanh_form) {
        map_with_exact_tail<T>(out, in, [](float x) { return gelu_tanh_wide(x); }, &GeluTanh::f);
      } else {
        map_with_exact_tail<T>(out, in, [](float x) { return gelu_erf_wide(x); }, &GeluErf::f);
      }
      return;
    }
    if (tanh_form) {
      map_elements<T, T>(out, {&in}, [](T x) { return from_f64<T>(GeluTanh::f(to_f64(x))); }, 32);
    } else {
      map_elements<T, T>(out, {&in}, [](T x) { return from_f64<T>(GeluErf::f(to_f64(x))); }, 32);
    }
  });
}

// ---- abs, sign (F and I) ------------------------------------------------------------------------

template <class T>
T abs_of(T x) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    return T{static_cast<uint16_t>(x.bits & 0x7fffu)};
  } else if constexpr (std::is_floating_point_v<T>) {
    return std::fabs(x);
  } else if constexpr (std::is_signed_v<T>) {
    // Wraps: abs(INT_MIN) = INT_MIN.
    return x < 0 ? static_cast<T>(WrapT<T>(0) - WrapT<T>(x)) : x;
  } else {
    return x;
  }
}

template <class T>
T sign_of(T x) {
  if constexpr (is_float_v<T>) {
    // -1, 0 or 1; NaN stays NaN; both zeros give +0.
    const double v = to_f64(x);
    return from_f64<T>(v != v ? v : (v > 0 ? 1.0 : (v < 0 ? -1.0 : 0.0)));
  } else {
    return static_cast<T>(x > 0 ? 1 : (x < 0 ? -1 : 0));
  }
}

template <class T>
dx_error_t* abs_kernel(const dx_kernel_call_t* call) noexcept {
  return guard(call->host, [&] {
    const auto [out, in] = unary_views<T, T>(call);
    map_elements<T, T>(out, {&in}, [](T x) { return abs_of(x); });
  });
}

template <class T>
dx_error_t* sign_kernel(const dx_kernel_call_t* call) noexcept {
  return guard(call->host, [&] {
    const auto [out, in] = unary_views<T, T>(call);
    map_elements<T, T>(out, {&in}, [](T x) { return sign_of(x); });
  });
}

// ---- clamp --------------------------------------------------------------------------------------

/// Integer bound saturated to T's range: an i64 exactly, an f64 rounded inward (ceil for the
/// lower bound, floor for the upper); a NaN bound is an error.
template <class T>
std::optional<int64_t> int_bound(const dx_kernel_call_t* call, int slot, const char* name,
                                 bool lower) {
  const dx_attr_t* a = attr_at(call, slot);
  if (a == nullptr) return std::nullopt;
  constexpr int64_t lo = std::numeric_limits<T>::min(), hi = std::numeric_limits<T>::max();
  if (a->type == DX_ATTR_I64) return std::clamp<int64_t>(a->value.i64, lo, hi);
  if (a->type != DX_ATTR_F64) {
    fail(DX_INVALID_ARGUMENT, std::string("cpu: dx.clamp: '") + name + "' must be an i64 or f64");
  }
  const double v = a->value.f64;
  if (v != v) fail(DX_INVALID_ARGUMENT, std::string("cpu: dx.clamp: '") + name + "' is NaN on an integer tensor");
  const double t = lower ? std::ceil(v) : std::floor(v);
  if (t <= static_cast<double>(lo)) return lo;
  if (t >= static_cast<double>(hi)) return hi;
  return static_cast<int64_t>(t);
}

template <class T>
dx_error_t* clamp_kernel(const dx_kernel_call_t* call) noexcept {
  return guard(call->host, [&] {
    if constexpr (is_float_v<T>) {
      // max(x, lo) then min(., hi) in f64, NaN (in x or a bound) propagating; lo > hi gives hi.
      const std::optional<double> lo = clamp_float_bound(call, DX_CLAMP_MIN, "min");
      const std::optional<double> hi = clamp_float_bound(call, DX_CLAMP_MAX, "max");
      const auto [out, in] = unary_views<T, T>(call);
      const bool has_lo = lo.has_value(), has_hi = hi.has_value();
      const double l = lo.value_or(0), h = hi.value_or(0);
      map_elements<T, T>(out, {&in}, [=](T x) {
        double v = to_f64(x);
        if (has_lo) v = nan_max(v, l);
        if (has_hi) v = nan_min(v, h);
        return from_f64<T>(v);
      });
    } else {
      const std::optional<int64_t> lo = int_bound<T>(call, DX_CLAMP_MIN, "min", true);
      const std::optional<int64_t> hi = int_bound<T>(call, DX_CLAMP_MAX, "max", false);
      const auto [out, in] = unary_views<T, T>(call);
      const T l = static_cast<T>(lo.value_or(std::numeric_limits<T>::min()));
      const T h = static_cast<T>(hi.value_or(std::numeric_limits<T>::max()));
      map_elements<T, T>(out, {&in}, [=](T x) {
        const T a = x < l ? l : x;
        return a > h ? h : a;
      });
    }
  });
}

// ---- binary: pow, maximum, minimum --------------------------------------------------------------

/// Validates a broadcasting binary call (inputs of dtype In, output Out); returns {out, a, b}.
template <class In, class Out>
std::array<View, 3> binary_views(const dx_kernel_call_t* call) {
  expect_arity(call, 2, 1);
  const View a = make_view(call->inputs[0], "input 0");
  const View b = make_view(call->inputs[1], "input 1");
  const View out = make_view(call->outputs[0], "output 0");
  expect_dtype(a, dtype_of<In>(), "input 0");
  expect_dtype(b, dtype_of<In>(), "input 1");
  expect_dtype(out, dtype_of<Out>(), "output 0");
  expect_broadcast_of<2>(out, {&a, &b});
  return {out, a, b};
}

template <class T>
dx_error_t* pow_kernel(const dx_kernel_call_t* call) noexcept {
  return guard(call->host, [&] {
    const auto v = binary_views<T, T>(call);
    map_elements<T, T, T>(v[0], {&v[1], &v[2]},
                          [](T a, T b) { return from_f64<T>(std::pow(to_f64(a), to_f64(b))); }, 32);
  });
}

/// maximum (Max = true) / minimum: NaN propagates (a + b), otherwise `a > b ? a : b` exactly as
/// the reference (so maximum(+0, -0) = -0, maximum(-0, +0) = +0).
template <class T, bool Max>
dx_error_t* extremum_kernel(const dx_kernel_call_t* call) noexcept {
  return guard(call->host, [&] {
    const auto v = binary_views<T, T>(call);
    map_elements<T, T, T>(v[0], {&v[1], &v[2]}, [](T a, T b) {
      if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
        const float x = Num<T>::load(a), y = Num<T>::load(b);
        if (x != x || y != y) return x != x ? a : b;
        return (Max ? x > y : x < y) ? a : b;
      } else if constexpr (std::is_floating_point_v<T>) {
        if (a != a || b != b) return a + b;
        return (Max ? a > b : a < b) ? a : b;
      } else {
        return (Max ? a > b : a < b) ? a : b;
      }
    });
  });
}

// ---- comparisons, logic -------------------------------------------------------------------------

enum class Cmp { Eq, Ne, Lt, Le, Gt, Ge };

template <class T>
auto compare_value(T v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) return Num<T>::load(v);
  else if constexpr (std::is_same_v<T, Bool>) return static_cast<int>(v.bits != 0);
  else return v;
}

template <class T, Cmp Op>
dx_error_t* compare_kernel(const dx_kernel_call_t* call) noexcept {
  return guard(call->host, [&] {
    const auto v = binary_views<T, Bool>(call);
    map_elements<Bool, T, T>(v[0], {&v[1], &v[2]}, [](T a, T b) {
      const auto x = compare_value(a), y = compare_value(b);
      bool r;
      if constexpr (Op == Cmp::Eq) r = x == y;
      else if constexpr (Op == Cmp::Ne) r = x != y;  // true for NaN, as IEEE
      else if constexpr (Op == Cmp::Lt) r = x < y;
      else if constexpr (Op == Cmp::Le) r = x <= y;
      else if constexpr (Op == Cmp::Gt) r = x > y;
      else r = x >= y;
      return Bool{static_cast<uint8_t>(r)};
    });
  });
}

enum class Logic { And, Or, Xor };

/// Any non-zero byte reads as true; the output is 0/1.
template <Logic Op>
dx_error_t* logic_kernel(const dx_kernel_call_t* call) noexcept {
  return guard(call->host, [&] {
    const auto v = binary_views<Bool, Bool>(call);
    map_elements<Bool, Bool, Bool>(v[0], {&v[1], &v[2]}, [](Bool a, Bool b) {
      const bool x = a.bits != 0, y = b.bits != 0;
      bool r;
      if constexpr (Op == Logic::And) r = x && y;
      else if constexpr (Op == Logic::Or) r = x || y;
      else r = x != y;
      return Bool{static_cast<uint8_t>(r)};
    });
  });
}

dx_error_t* logical_not_kernel(const dx_kernel_call_t* call) noexcept {
  return guard(call->host, [&] {
    const auto [out, in] = unary_views<Bool, Bool>(call);
    map_elements<Bool, Bool>(out, {&in}, [](Bool x) { return Bool{static_cast<uint8_t>(x.bits == 0)}; });
  });
}

/// ~x in two's complement; on bool, logical not.
template <class T>
dx_error_t* bitwise_not_kernel(const dx_kernel_call_t* call) noexcept {
  return guard(call->host, [&] {
    const auto [out, in] = unary_views<T, T>(call);
    map_elements<T, T>(out, {&in}, [](T x) {
      if constexpr (std::is_same_v<T, Bool>) return Bool{static_cast<uint8_t>(x.bits == 0)};
      else return static_cast<T>(~x);
    });
  });
}

// ---- where --------------------------------------------------------------------------------------

template <size_t Size>
using Bits = std::conditional_t<
    Size == 1, uint8_t,
    std::conditional_t<Size == 2, uint16_t, std::conditional_t<Size == 4, uint32_t, uint64_t>>>;

/// (bool cond, T a, T b) -> T with broadcasting; element bits are copied unchanged.
template <class T>
dx_error_t* where_kernel(const dx_kernel_call_t* call) noexcept {
  return guard(call->host, [&] {
    expect_arity(call, 3, 1);
    const View c = make_view(call->inputs[0], "input 0");
    const View a = make_view(call->inputs[1], "input 1");
    const View b = make_view(call->inputs[2], "input 2");
    const View out = make_view(call->outputs[0], "output 0");
    expect_dtype(c, dtype_of<Bool>(), "input 0");
    expect_dtype(a, dtype_of<T>(), "input 1");
    expect_dtype(b, dtype_of<T>(), "input 2");
    expect_dtype(out, dtype_of<T>(), "output 0");
    expect_broadcast_of<3>(out, {&c, &a, &b});
    using R = Bits<sizeof(T)>;
    map_elements<R, uint8_t, R, R>(out, {&c, &a, &b},
                                   [](uint8_t cond, R x, R y) { return cond != 0 ? x : y; });
  });
}

// ---- cast ---------------------------------------------------------------------------------------

/// f64 -> integer: truncate toward zero, saturate, NaN -> 0.
template <class T>
T saturate_from_f64(double d) {
  if (d != d) return T(0);
  constexpr T lo = std::numeric_limits<T>::min();
  constexpr T hi = std::numeric_limits<T>::max();
  const double t = std::trunc(d);
  if (t <= static_cast<double>(lo)) return lo;
  if (t >= static_cast<double>(hi)) return hi;  // (double)hi may round up: >= catches it
  return static_cast<T>(t);
}

/// i64 -> f64 rounded to odd, so that a second rounding to f16/bf16 is the correct one.
double int64_to_f64_round_odd(int64_t v) {
  double d = static_cast<double>(v);
  __extension__ typedef __int128 Int128;
  // d is an integer of magnitude <= 2^63, exactly representable as a 128-bit integer.
  const Int128 error = static_cast<Int128>(v) - static_cast<Int128>(d);
  if (error == 0) return d;
  if ((d > 0 && error < 0) || (d < 0 && error > 0)) d = std::nextafter(d, 0.0);  // truncate
  uint64_t bits;
  std::memcpy(&bits, &d, sizeof bits);
  bits |= 1u;
  std::memcpy(&d, &bits, sizeof bits);
  return d;
}

template <class From, class To>
To convert(From x) {
  if constexpr (std::is_same_v<From, To>) {
    return x;
  } else if constexpr (is_float_v<From>) {
    const double v = to_f64(x);  // exact
    if constexpr (is_float_v<To>) {
      if constexpr (std::is_same_v<From, double>) return from_f64<To>(v);
      else if constexpr (std::is_same_v<To, Half>) return Half{float_to_half(static_cast<float>(v))};
      else if constexpr (std::is_same_v<To, BFloat16>) {
        return BFloat16{float_to_bfloat16(static_cast<float>(v))};
      } else {
        return static_cast<To>(v);  // widening or f32 -> f32: exact
      }
    } else if constexpr (std::is_same_v<To, Bool>) {
      return Bool{static_cast<uint8_t>(v != 0)};  // NaN is true, as bool(nan)
    } else {
      return saturate_from_f64<To>(v);
    }
  } else {
    // Integers and bool (any non-zero byte is 1).
    int64_t v;
    if constexpr (std::is_same_v<From, Bool>) v = x.bits != 0;
    else v = static_cast<int64_t>(x);
    if constexpr (std::is_same_v<To, Bool>) {
      return Bool{static_cast<uint8_t>(v != 0)};
    } else if constexpr (std::is_same_v<To, double> || std::is_same_v<To, float>) {
      return static_cast<To>(v);  // one rounding
    } else if constexpr (std::is_same_v<To, Half> || std::is_same_v<To, BFloat16>) {
      const double d = std::is_same_v<From, int64_t> ? int64_to_f64_round_odd(v) : static_cast<double>(v);
      return from_f64<To>(d);
    } else {
      return static_cast<To>(static_cast<std::make_unsigned_t<To>>(static_cast<uint64_t>(v)));  // wraps
    }
  }
}

/// dx.cast's optional `dtype` attribute must name the output dtype (packed i64 or a name).
void check_cast_dtype(const dx_kernel_call_t* call, DLDataType out) {
  const dx_attr_t* a = attr_at(call, 0);
  if (a == nullptr) return;
  bool match = false;
  if (a->type == DX_ATTR_I64) {
    const int64_t packed = out.code | (int64_t{out.bits} << 8) | (int64_t{out.lanes} << 16);
    match = a->value.i64 == packed;
  } else if (a->type == DX_ATTR_STRING && a->value.str != nullptr) {
    match = std::string(a->value.str) == dtype_name(out);
  } else {
    fail(DX_INVALID_ARGUMENT, "cpu: dx.cast: attribute 'dtype' must be an i64 (packed dtype) or a string");
  }
  if (!match) {
    fail(DX_INVALID_ARGUMENT, "cpu: dx.cast: attribute 'dtype' disagrees with the output dtype " + dtype_name(out));
  }
}

/// out = elem(in) elementwise (same shapes); rows with unit stride on both sides go to
/// `row_fn(in, out, n)` (a vectorised row function), the others element by element.
template <class Out, class In, class RowFn, class ElemFn>
void map_unary_rows(const View& out, const View& in, RowFn row_fn, ElemFn elem) {
  if (out.count() == 0) return;
  StridedLoop<2> loop;
  loop.rank = out.rank;
  for (int d = 0; d < out.rank; ++d) {
    loop.shape[d] = out.shape[d];
    loop.strides[0][d] = out.strides[d];
  }
  broadcast_strides_into(in, out.rank, loop.strides[1]);
  loop.simplify();
  Out* const po = out.data<Out>();
  const In* const px = in.data<const In>();
  auto row = [&](int64_t n, const int64_t* off, const int64_t* st) {
    Out* o = po + off[0];
    const In* x = px + off[1];
    if (st[0] == 1 && st[1] == 1) {
      row_fn(x, o, n);
    } else {
      for (int64_t i = 0; i < n; ++i) o[i * st[0]] = elem(x[i * st[1]]);
    }
  };
  for_each_row(loop, row, 1);
}

template <class From, class To>
dx_error_t* cast_kernel(const dx_kernel_call_t* call) noexcept {
  return guard(call->host, [&] {
    const auto [out, in] = unary_views<From, To>(call);
    check_cast_dtype(call, dtype_of<To>());
    if constexpr (std::is_same_v<From, To>) {
      using R = Bits<sizeof(From)>;
      map_elements<R, R>(out, {&in}, [](R x) { return x; });
    } else if constexpr (std::is_same_v<From, float> && std::is_same_v<To, Half>) {
      // The common narrowing casts through the select forms of fast_math.h (same bits as
      // convert(), but vectorised).
      map_unary_rows<uint16_t, float>(out, in, &float_to_half_row, &float_to_half_select);
    } else if constexpr (std::is_same_v<From, float> && std::is_same_v<To, BFloat16>) {
      map_elements<uint16_t, float>(out, {&in}, [](float x) { return float_to_bfloat16_select(x); });
    } else if constexpr (std::is_same_v<From, Half> && std::is_same_v<To, float>) {
      map_elements<float, uint16_t>(out, {&in}, [](uint16_t x) { return half_to_float_select(x); });
    } else {
      map_elements<To, From>(out, {&in}, [](From x) { return convert<From, To>(x); });
    }
  });
}

// ---- registration -------------------------------------------------------------------------------

constexpr dx_kernel_flags_t kInPlace = DX_KERNEL_FLAG_DETERMINISTIC | DX_KERNEL_FLAG_INPLACE;
constexpr dx_kernel_flags_t kDeterministic = DX_KERNEL_FLAG_DETERMINISTIC;

template <class T>
void add_float_math(Registrar& r) {
  constexpr DLDataType t = dtype_of<T>();
  const ElementwiseBackward g = elementwise_backward<T>();
  r.add("dx.reciprocal", 1, 1, {t, t}, &float_unary_kernel<T, Reciprocal>, kInPlace, g.reciprocal);
  r.add("dx.sqrt", 1, 1, {t, t}, &float_unary_kernel<T, Sqrt>, kInPlace, g.sqrt);
  r.add("dx.rsqrt", 1, 1, {t, t}, &float_unary_kernel<T, Rsqrt>, kInPlace, g.rsqrt);
  r.add("dx.expm1", 1, 1, {t, t}, &float_unary_kernel<T, Expm1>, kInPlace, g.expm1);
  r.add("dx.log", 1, 1, {t, t}, &float_unary_kernel<T, Log>, kInPlace, g.log);
  r.add("dx.log1p", 1, 1, {t, t}, &float_unary_kernel<T, Log1p>, kInPlace, g.log1p);
  r.add("dx.sin", 1, 1, {t, t}, &float_unary_kernel<T, Sin>, kInPlace, g.sin);
  r.add("dx.cos", 1, 1, {t, t}, &float_unary_kernel<T, Cos>, kInPlace, g.cos);
  r.add("dx.tan", 1, 1, {t, t}, &float_unary_kernel<T, Tan>, kInPlace, g.tan);
  r.add("dx.tanh", 1, 1, {t, t}, &float_unary_kernel<T, Tanh>, kInPlace, g.tanh);
  r.add("dx.erf", 1, 1, {t, t}, &float_unary_kernel<T, Erf>, kInPlace, g.erf);
  r.add("dx.sigmoid", 1, 1, {t, t}, &float_unary_kernel<T, Sigmoid>, kInPlace, g.sigmoid);
  r.add("dx.silu", 1, 1, {t, t}, &float_unary_kernel<T, Silu>, kInPlace, g.silu);
  r.add("dx.gelu", 1, 1, {t, t}, &gelu_kernel<T>, kInPlace, g.gelu);
  r.add("dx.floor", 1, 1, {t, t}, &float_unary_kernel<T, Floor>, kInPlace);
  r.add("dx.ceil", 1, 1, {t, t}, &float_unary_kernel<T, Ceil>, kInPlace);
  r.add("dx.round", 1, 1, {t, t}, &float_unary_kernel<T, Round>, kInPlace);
  r.add("dx.pow", 2, 1, {t, t, t}, &pow_kernel<T>, kInPlace, g.pow);
}

/// Ops on F and I.
template <class T>
void add_numeric(Registrar& r) {
  constexpr DLDataType t = dtype_of<T>();
  const ElementwiseBackward g = elementwise_backward<T>();
  r.add("dx.abs", 1, 1, {t, t}, &abs_kernel<T>, kInPlace, g.abs);
  r.add("dx.sign", 1, 1, {t, t}, &sign_kernel<T>, kInPlace, g.sign);
  r.add("dx.clamp", 1, 1, {t, t}, &clamp_kernel<T>, kInPlace, g.clamp);
  r.add("dx.maximum", 2, 1, {t, t, t}, &extremum_kernel<T, true>, kInPlace, g.maximum);
  r.add("dx.minimum", 2, 1, {t, t, t}, &extremum_kernel<T, false>, kInPlace, g.minimum);
}

template <class From, class To>
void add_cast(Registrar& r) {
  const dx_kernel_flags_t flags = sizeof(From) == sizeof(To) ? kInPlace : kDeterministic;
  r.add("dx.cast", 1, 1, {dtype_of<From>(), dtype_of<To>()}, &cast_kernel<From, To>, flags,
        cast_backward(dtype_of<From>(), dtype_of<To>()));
}

template <class From>
void add_casts_from(Registrar& r) {
  add_cast<From, double>(r);
  add_cast<From, float>(r);
  add_cast<From, Half>(r);
  add_cast<From, BFloat16>(r);
  add_cast<From, int64_t>(r);
  add_cast<From, int32_t>(r);
  add_cast<From, int16_t>(r);
  add_cast<From, int8_t>(r);
  add_cast<From, uint8_t>(r);
  add_cast<From, Bool>(r);
}

/// Ops on every dtype (F, I and bool).
template <class T>
void add_any(Registrar& r) {
  constexpr DLDataType t = dtype_of<T>();
  const ElementwiseBackward g = elementwise_backward<T>();
  constexpr DLDataType b = dtype_of<Bool>();
  r.add("dx.eq", 2, 1, {t, t, b}, &compare_kernel<T, Cmp::Eq>, kDeterministic);
  r.add("dx.ne", 2, 1, {t, t, b}, &compare_kernel<T, Cmp::Ne>, kDeterministic);
  r.add("dx.lt", 2, 1, {t, t, b}, &compare_kernel<T, Cmp::Lt>, kDeterministic);
  r.add("dx.le", 2, 1, {t, t, b}, &compare_kernel<T, Cmp::Le>, kDeterministic);
  r.add("dx.gt", 2, 1, {t, t, b}, &compare_kernel<T, Cmp::Gt>, kDeterministic);
  r.add("dx.ge", 2, 1, {t, t, b}, &compare_kernel<T, Cmp::Ge>, kDeterministic);
  r.add("dx.where", 3, 1, {b, t, t, t}, &where_kernel<T>, kInPlace, g.where);
  add_casts_from<T>(r);
}

}  // namespace

bool gelu_tanh_form(const dx_kernel_call_t* call) {
  const dx_attr_t* a = attr_at(call, 0);
  if (a == nullptr) return false;
  if (a->type != DX_ATTR_STRING || a->value.str == nullptr) {
    fail(DX_INVALID_ARGUMENT, "cpu: dx.gelu: attribute 'approximate' must be a string");
  }
  const std::string mode = a->count > 0 ? std::string(a->value.str, static_cast<size_t>(a->count))
                                        : std::string(a->value.str);
  if (mode == "tanh") return true;
  if (mode != "none") {
    fail(DX_INVALID_ARGUMENT, "cpu: dx.gelu: approximate must be \"none\" or \"tanh\", got \"" +
                                  mode + "\"");
  }
  return false;
}

std::optional<double> clamp_float_bound(const dx_kernel_call_t* call, int slot, const char* name) {
  const dx_attr_t* a = attr_at(call, slot);
  if (a == nullptr) return std::nullopt;
  if (a->type == DX_ATTR_F64) return a->value.f64;
  if (a->type == DX_ATTR_I64) return static_cast<double>(a->value.i64);
  fail(DX_INVALID_ARGUMENT, std::string("cpu: dx.clamp: attribute '") + name + "' must be an f64");
}

void register_math_kernels(Registrar& r) {
  add_float_math<double>(r);
  add_float_math<float>(r);
  add_float_math<Half>(r);
  add_float_math<BFloat16>(r);

  add_numeric<double>(r);
  add_numeric<float>(r);
  add_numeric<Half>(r);
  add_numeric<BFloat16>(r);
  add_numeric<int64_t>(r);
  add_numeric<int32_t>(r);
  add_numeric<int16_t>(r);
  add_numeric<int8_t>(r);
  add_numeric<uint8_t>(r);

  add_any<double>(r);
  add_any<float>(r);
  add_any<Half>(r);
  add_any<BFloat16>(r);
  add_any<int64_t>(r);
  add_any<int32_t>(r);
  add_any<int16_t>(r);
  add_any<int8_t>(r);
  add_any<uint8_t>(r);
  add_any<Bool>(r);

  constexpr DLDataType b = dtype_of<Bool>();
  r.add("dx.logical_and", 2, 1, {b, b, b}, &logic_kernel<Logic::And>, kInPlace);
  r.add("dx.logical_or", 2, 1, {b, b, b}, &logic_kernel<Logic::Or>, kInPlace);
  r.add("dx.logical_xor", 2, 1, {b, b, b}, &logic_kernel<Logic::Xor>, kInPlace);
  r.add("dx.logical_not", 1, 1, {b, b}, &logical_not_kernel, kInPlace);
  r.add("dx.bitwise_not", 1, 1, {b, b}, &bitwise_not_kernel<Bool>, kInPlace);
  r.add("dx.bitwise_not", 1, 1, {dtype_of<int64_t>(), dtype_of<int64_t>()}, &bitwise_not_kernel<int64_t>, kInPlace);
  r.add("dx.bitwise_not", 1, 1, {dtype_of<int32_t>(), dtype_of<int32_t>()}, &bitwise_not_kernel<int32_t>, kInPlace);
  r.add("dx.bitwise_not", 1, 1, {dtype_of<int16_t>(), dtype_of<int16_t>()}, &bitwise_not_kernel<int16_t>, kInPlace);
  r.add("dx.bitwise_not", 1, 1, {dtype_of<int8_t>(), dtype_of<int8_t>()}, &bitwise_not_kernel<int8_t>, kInPlace);
  r.add("dx.bitwise_not", 1, 1, {dtype_of<uint8_t>(), dtype_of<uint8_t>()}, &bitwise_not_kernel<uint8_t>, kInPlace);
}

}  // namespace deepx::cpu
