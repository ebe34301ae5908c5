// Arithmetic elementwise kernels and their gradients: dx.add, dx.sub, dx.mul, dx.div, dx.pow,
// dx.maximum, dx.minimum (NumPy broadcasting), and the unary math ops (neg, abs, sign, exp, log,
// the trigonometric and activation functions, rounding, clamp). Floating values are computed in
// f64 and rounded once to the output dtype; integers are computed in 64-bit unsigned arithmetic
// so overflow wraps (two's complement) without UB. Backward kernels follow the convention at
// KernelEntry (kernels.hpp): derivatives are evaluated in f64 from the forward inputs, and
// gradients of broadcast inputs are summed in f64 back to the input's shape, rounded once.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <string>

#include "deepx/ops.h"

#include "deepx/reference/kernels.hpp"

namespace deepx::ref {
namespace {

enum class BinaryOp { kAdd, kSub, kMul, kDiv };

double apply_float(BinaryOp op, double a, double b) {
  switch (op) {
    case BinaryOp::kAdd: return a + b;
    case BinaryOp::kSub: return a - b;
    case BinaryOp::kMul: return a * b;
    case BinaryOp::kDiv: return a / b;
  }
  return 0;
}

// Integer arithmetic on i64-widened values; the caller stores the low bits (wrap).
std::int64_t apply_int(BinaryOp op, std::int64_t a, std::int64_t b) {
  const auto ua = static_cast<std::uint64_t>(a);
  const auto ub = static_cast<std::uint64_t>(b);
  switch (op) {
    case BinaryOp::kAdd: return static_cast<std::int64_t>(ua + ub);
    case BinaryOp::kSub: return static_cast<std::int64_t>(ua - ub);
    case BinaryOp::kMul: return static_cast<std::int64_t>(ua * ub);
    case BinaryOp::kDiv:
      // Only i64 can hit INT64_MIN / -1 (narrower values are exact in i64 and wrap on store);
      // its true quotient 2^63 wraps to INT64_MIN. C++ division truncates toward zero.
      if (a == std::numeric_limits<std::int64_t>::min() && b == -1) return a;
      return a / b;
  }
  return 0;
}

void binary(const Call& call, BinaryOp op) {
  const auto [a, b, out, ab, bb, shape] = broadcast_binary(call);

  if (is_float(out.dtype)) {
    for_each_index(shape, [&](std::span<const std::int64_t> i) {
      const double x = load_float(a.dtype, ab.at(i));
      const double y = load_float(b.dtype, bb.at(i));
      store_float(out.dtype, out.at(i), apply_float(op, x, y));
    });
    return;
  }
  if (op == BinaryOp::kDiv) {
    // Check every divisor before writing anything, so a failed call leaves the output as it was.
    for_each_index(shape, [&](std::span<const std::int64_t> i) {
      if (load_int(b.dtype, bb.at(i)) == 0) {
        fail(DX_ARITHMETIC_ERROR, "integer division by zero at index " + shape_string(i));
      }
    });
  }
  for_each_index(shape, [&](std::span<const std::int64_t> i) {
    const std::int64_t x = load_int(a.dtype, ab.at(i));
    const std::int64_t y = load_int(b.dtype, bb.at(i));
    store_int_wrapping(out.dtype, out.at(i), apply_int(op, x, y));
  });
}

template <typename FloatFn, typename IntFn>
void unary(const Call& call, FloatFn float_fn, IntFn int_fn) {
  const Tensor in = view(call.inputs[0], "input 0");
  const Tensor out = view(call.outputs[0], "output 0");
  expect_output_shape(out, in.shape);
  for_each_index(in.shape, [&](std::span<const std::int64_t> i) {
    if (is_float(out.dtype)) {
      store_float(out.dtype, out.at(i), float_fn(load_float(in.dtype, in.at(i))));
    } else {
      store_int_wrapping(out.dtype, out.at(i), int_fn(load_int(in.dtype, in.at(i))));
    }
  });
}

std::int64_t no_int_form(std::int64_t) {
  fail(DX_INTERNAL, "floating-only op called on an integer tensor");
}


// ---- floating binary ops and binary gradients ----

template <typename Fn>
void binary_float(const Call& call, Fn fn) {
  const auto [a, b, out, ab, bb, shape] = broadcast_binary(call);
  for_each_index(shape, [&](std::span<const std::int64_t> i) {
    store_float(out.dtype, out.at(i), fn(load_float(a.dtype, ab.at(i)), load_float(b.dtype, bb.at(i))));
  });
}

// Backward of a broadcasting binary op: da(x, y) and db(x, y) are the partial derivatives of
// f(x, y) at one element; each gradient is dy * partial, summed over the broadcast dims.
template <typename DA, typename DB>
void binary_backward(const Call& call, DA da, DB db) {
  const Tensor dy = view(call.inputs[0], "output gradient 0");
  const Tensor a = view(call.inputs[1], "forward input 0");
  const Tensor b = view(call.inputs[2], "forward input 1");
  const std::vector<std::int64_t> shape = broadcast_shapes(a.shape, b.shape);
  expect_output_shape(dy, shape);
  const std::optional<Tensor> ga = grad_output(call, 0, a.shape);
  const std::optional<Tensor> gb = grad_output(call, 1, b.shape);
  GradBuffer buf_a(ga ? a.shape : std::vector<std::int64_t>{});
  GradBuffer buf_b(gb ? b.shape : std::vector<std::int64_t>{});
  const Tensor acc_a = broadcast_to(buf_a.view, ga ? shape : std::vector<std::int64_t>{});
  const Tensor acc_b = broadcast_to(buf_b.view, gb ? shape : std::vector<std::int64_t>{});
  const Tensor ab = broadcast_to(a, shape);
  const Tensor bb = broadcast_to(b, shape);
  for_each_index(shape, [&](std::span<const std::int64_t> i) {
    const double g = load_float(dy.dtype, dy.at(i));
    const double x = load_float(a.dtype, ab.at(i));
    const double y = load_float(b.dtype, bb.at(i));
    if (ga) GradBuffer::add(acc_a.at(i), g * da(x, y));
    if (gb) GradBuffer::add(acc_b.at(i), g * db(x, y));
  });
  // Stored only after everything is read: a gradient may alias dy.
  if (ga) buf_a.store(*ga);
  if (gb) buf_b.store(*gb);
}

double nan_max(double a, double b) { return std::isnan(a) || std::isnan(b) ? a + b : (a > b ? a : b); }
double nan_min(double a, double b) { return std::isnan(a) || std::isnan(b) ? a + b : (a < b ? a : b); }

template <typename FloatFn, typename IntFn>
void binary_any(const Call& call, FloatFn float_fn, IntFn int_fn) {
  if (is_float(view(call.inputs[0], "input 0").dtype)) return binary_float(call, float_fn);
  const auto [a, b, out, ab, bb, shape] = broadcast_binary(call);
  for_each_index(shape, [&](std::span<const std::int64_t> i) {
    store_int_wrapping(out.dtype, out.at(i), int_fn(load_int(a.dtype, ab.at(i)), load_int(b.dtype, bb.at(i))));
  });
}

// ---- unary gradients ----

// Backward of a unary op: dx = dy * d(x), the derivative evaluated in f64 at the forward input.
template <typename Deriv>
void unary_backward(const Call& call, Deriv d) {
  const Tensor dy = view(call.inputs[0], "output gradient 0");
  const Tensor x = view(call.inputs[1], "forward input 0");
  const Tensor y = view(call.inputs[2], "forward output 0");
  expect_output_shape(dy, x.shape);
  expect_output_shape(y, x.shape);
  const std::optional<Tensor> dx = grad_output(call, 0, x.shape);
  if (!dx) return;
  GradBuffer buf(x.shape);
  for_each_index(x.shape, [&](std::span<const std::int64_t> i) {
    GradBuffer::add(buf.view.at(i), load_float(dy.dtype, dy.at(i)) * d(load_float(x.dtype, x.at(i))));
  });
  buf.store(*dx);
}

template <typename Fn>
void unary_float(const Call& call, Fn fn) {
  unary(call, fn, no_int_form);
}

constexpr double kInfinity = std::numeric_limits<double>::infinity();

double sigmoid_of(double x) { return 1.0 / (1.0 + std::exp(-x)); }

constexpr double kSqrt2OverPi = 0.7978845608028654;  // sqrt(2 / pi)
constexpr double kGeluCubic = 0.044715;

// dx.gelu's `approximate`: false for "none" (unset), true for "tanh".
bool gelu_uses_tanh(const Call& call) {
  const std::optional<std::string> mode = attr_string(call, 0, "approximate");
  if (!mode || *mode == "none") return false;
  if (*mode == "tanh") return true;
  fail(DX_INVALID_ARGUMENT, "dx.gelu: approximate must be \"none\" or \"tanh\", got \"" + *mode + "\"");
}

// The erf form is written without cancellation: 1 + erf(x / sqrt 2) loses every digit below x
// of about -5 (its f64 rounding noise would be the "expected" value, which another libm's erf
// cannot reproduce), so it is x erfc(-x / sqrt 2) / 2, the same function. The tanh form keeps
// PyTorch's expression: its accurate rewrite x / (1 + e^(-2u)) is ill-conditioned in u far
// below 0, so a kernel that contracts x + 0.044715 x^3 into an FMA would miss it by ~100 ulp,
// while 1 + tanh(u) is exactly 0 there on every libm. At -Inf both return the limit -0 (the
// formula would give -Inf * 0 = NaN).
double gelu_value(double x, bool tanh_form) {
  if (x == -kInfinity) return -0.0;
  if (!tanh_form) return 0.5 * x * std::erfc(-x / std::numbers::sqrt2);
  return 0.5 * x * (1.0 + std::tanh(kSqrt2OverPi * (x + kGeluCubic * x * x * x)));
}

double gelu_derivative(double x, bool tanh_form) {
  if (!tanh_form) {
    const double cdf = 0.5 * std::erfc(-x / std::numbers::sqrt2);
    const double pdf = std::exp(-0.5 * x * x) / std::sqrt(2.0 * std::numbers::pi);
    return cdf + x * pdf;
  }
  const double t = std::tanh(kSqrt2OverPi * (x + kGeluCubic * x * x * x));
  return 0.5 * (1.0 + t) +
         0.5 * x * (1.0 - t * t) * kSqrt2OverPi * (1.0 + 3.0 * kGeluCubic * x * x);
}

// dx.clamp's bounds for a floating tensor (either may be absent).
struct FloatBounds {
  std::optional<double> lo, hi;
};
FloatBounds float_bounds(const Call& call) {
  return {attr_f64(call, DX_CLAMP_MIN, "min"), attr_f64(call, DX_CLAMP_MAX, "max")};
}

// max(x, lo) then min(., hi), NaN (in x or a bound) propagating; lo > hi gives hi (PyTorch).
double clamp_float(double x, const FloatBounds& b) {
  if (b.lo) x = nan_max(x, *b.lo);
  if (b.hi) x = nan_min(x, *b.hi);
  return x;
}

// An integer clamp bound, saturated to the dtype's range: an i64 bound exactly, an f64 bound
// rounded inward (ceil for min, floor for max); a NaN bound is DX_INVALID_ARGUMENT.
std::optional<std::int64_t> int_bound(const Call& call, int slot, const char* name, DType t,
                                      bool is_lower) {
  const dx_attr_t* a = call.attr(slot, name);
  if (a == nullptr) return std::nullopt;
  std::int64_t lo = 0, hi = 0;
  int_range(t, lo, hi);
  if (a->type == DX_ATTR_I64) return std::clamp(a->value.i64, lo, hi);
  if (a->type != DX_ATTR_F64) fail(DX_INVALID_ARGUMENT, std::string("dx.clamp: '") + name + "' must be an i64 or f64");
  const double v = a->value.f64;
  if (std::isnan(v)) fail(DX_INVALID_ARGUMENT, std::string("dx.clamp: '") + name + "' is NaN on an integer tensor");
  return saturating_int(is_lower ? std::ceil(v) : std::floor(v), lo, hi);
}

}  // namespace

void add(const Call& call) { binary(call, BinaryOp::kAdd); }
void sub(const Call& call) { binary(call, BinaryOp::kSub); }
void mul(const Call& call) { binary(call, BinaryOp::kMul); }
void div(const Call& call) { binary(call, BinaryOp::kDiv); }

void pow(const Call& call) {
  binary_float(call, [](double a, double b) { return std::pow(a, b); });
}

void maximum(const Call& call) {
  binary_any(call, nan_max, [](std::int64_t a, std::int64_t b) { return std::max(a, b); });
}

void minimum(const Call& call) {
  binary_any(call, nan_min, [](std::int64_t a, std::int64_t b) { return std::min(a, b); });
}

void add_backward(const Call& call) {
  binary_backward(call, [](double, double) { return 1.0; }, [](double, double) { return 1.0; });
}
void sub_backward(const Call& call) {
  binary_backward(call, [](double, double) { return 1.0; }, [](double, double) { return -1.0; });
}
void mul_backward(const Call& call) {
  binary_backward(call, [](double, double b) { return b; }, [](double a, double) { return a; });
}
void div_backward(const Call& call) {
  binary_backward(call, [](double, double b) { return 1.0 / b; },
                  [](double a, double b) { return -a / (b * b); });
}
void pow_backward(const Call& call) {
  // As PyTorch: d/da is 0 where b == 0; d/db is 0 where a == 0 and b >= 0 (log 0 = -Inf).
  binary_backward(
      call, [](double a, double b) { return b == 0 ? 0.0 : b * std::pow(a, b - 1); },
      [](double a, double b) { return a == 0 && b >= 0 ? 0.0 : std::pow(a, b) * std::log(a); });
}
void maximum_backward(const Call& call) {
  // Ties split the gradient evenly (PyTorch); a NaN operand takes it.
  binary_backward(
      call,
      [](double a, double b) { return std::isnan(a) || a > b ? 1.0 : (a == b ? 0.5 : 0.0); },
      [](double a, double b) { return !std::isnan(a) && (std::isnan(b) || b > a) ? 1.0 : (a == b ? 0.5 : 0.0); });
}
void minimum_backward(const Call& call) {
  binary_backward(
      call,
      [](double a, double b) { return std::isnan(a) || a < b ? 1.0 : (a == b ? 0.5 : 0.0); },
      [](double a, double b) { return !std::isnan(a) && (std::isnan(b) || b < a) ? 1.0 : (a == b ? 0.5 : 0.0); });
}

void neg(const Call& call) {
  unary(
      call, [](double x) { return -x; },
      [](std::int64_t x) { return static_cast<std::int64_t>(0 - static_cast<std::uint64_t>(x)); });
}

void abs(const Call& call) {
  // Integers wrap: abs(INT_MIN) = INT_MIN, as two's complement (and PyTorch).
  unary(
      call, [](double x) { return std::fabs(x); },
      [](std::int64_t x) {
        return x < 0 ? static_cast<std::int64_t>(0 - static_cast<std::uint64_t>(x)) : x;
      });
}

void sign(const Call& call) {
  // -1, 0 or 1; NaN gives NaN; both zeros give +0.
  unary(
      call, [](double x) { return std::isnan(x) ? x : (x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0)); },
      [](std::int64_t x) -> std::int64_t { return x > 0 ? 1 : (x < 0 ? -1 : 0); });
}

void exp(const Call& call) {
  // std::exp in f64, rounded once by store_float for f32/f16/bf16.
  unary_float(call, [](double x) { return std::exp(x); });
}

void relu(const Call& call) {
  // NaN propagates; -0 gives +0 (x > 0 is false for -0).
  unary_float(call, [](double x) { return std::isnan(x) ? x : (x > 0 ? x : 0.0); });
}

void reciprocal(const Call& call) { unary_float(call, [](double x) { return 1.0 / x; }); }
void sqrt(const Call& call) { unary_float(call, [](double x) { return std::sqrt(x); }); }
void rsqrt(const Call& call) { unary_float(call, [](double x) { return 1.0 / std::sqrt(x); }); }
void expm1(const Call& call) { unary_float(call, [](double x) { return std::expm1(x); }); }
void log(const Call& call) { unary_float(call, [](double x) { return std::log(x); }); }
void log1p(const Call& call) { unary_float(call, [](double x) { return std::log1p(x); }); }
void sin(const Call& call) { unary_float(call, [](double x) { return std::sin(x); }); }
void cos(const Call& call) { unary_float(call, [](double x) { return std::cos(x); }); }
void tan(const Call& call) { unary_float(call, [](double x) { return std::tan(x); }); }
void tanh(const Call& call) { unary_float(call, [](double x) { return std::tanh(x); }); }
void erf(const Call& call) { unary_float(call, [](double x) { return std::erf(x); }); }
void sigmoid(const Call& call) { unary_float(call, sigmoid_of); }
// x / (1 + exp(-x)); at -Inf the limit -0 (the formula would give -Inf / Inf = NaN).
void silu(const Call& call) {
  unary_float(call, [](double x) { return x == -kInfinity ? -0.0 : x / (1.0 + std::exp(-x)); });
}
void gelu(const Call& call) {
  const bool tanh_form = gelu_uses_tanh(call);
  unary_float(call, [&](double x) { return gelu_value(x, tanh_form); });
}
void floor(const Call& call) { unary_float(call, [](double x) { return std::floor(x); }); }
void ceil(const Call& call) { unary_float(call, [](double x) { return std::ceil(x); }); }
// Half to even: nearbyint in the default (round-to-nearest-even) mode.
void round(const Call& call) { unary_float(call, [](double x) { return std::nearbyint(x); }); }

void clamp(const Call& call) {
  const Tensor in = view(call.inputs[0], "input 0");
  if (is_float(in.dtype)) {
    const FloatBounds b = float_bounds(call);
    unary_float(call, [&](double x) { return clamp_float(x, b); });
    return;
  }
  const std::optional<std::int64_t> lo = int_bound(call, DX_CLAMP_MIN, "min", in.dtype, true);
  const std::optional<std::int64_t> hi = int_bound(call, DX_CLAMP_MAX, "max", in.dtype, false);
  unary(call, [](double x) { return x; }, [&](std::int64_t x) {
    if (lo) x = std::max(x, *lo);
    if (hi) x = std::min(x, *hi);
    return x;
  });
}

void neg_backward(const Call& call) { unary_backward(call, [](double) { return -1.0; }); }
void exp_backward(const Call& call) { unary_backward(call, [](double x) { return std::exp(x); }); }
void relu_backward(const Call& call) { unary_backward(call, [](double x) { return x > 0 ? 1.0 : 0.0; }); }
void abs_backward(const Call& call) {
  unary_backward(call, [](double x) { return x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0); });
}
void sign_backward(const Call& call) { unary_backward(call, [](double) { return 0.0; }); }
void reciprocal_backward(const Call& call) { unary_backward(call, [](double x) { return -1.0 / (x * x); }); }
void sqrt_backward(const Call& call) { unary_backward(call, [](double x) { return 0.5 / std::sqrt(x); }); }
void rsqrt_backward(const Call& call) {
  unary_backward(call, [](double x) { return -0.5 / (x * std::sqrt(x)); });
}
void expm1_backward(const Call& call) { unary_backward(call, [](double x) { return std::exp(x); }); }
void log_backward(const Call& call) { unary_backward(call, [](double x) { return 1.0 / x; }); }
void log1p_backward(const Call& call) { unary_backward(call, [](double x) { return 1.0 / (1.0 + x); }); }
void sin_backward(const Call& call) { unary_backward(call, [](double x) { return std::cos(x); }); }
void cos_backward(const Call& call) { unary_backward(call, [](double x) { return -std::sin(x); }); }
void tan_backward(const Call& call) {
  unary_backward(call, [](double x) { const double t = std::tan(x); return 1.0 + t * t; });
}
void tanh_backward(const Call& call) {
  unary_backward(call, [](double x) { const double t = std::tanh(x); return 1.0 - t * t; });
}
void erf_backward(const Call& call) {
  unary_backward(call, [](double x) { return 2.0 / std::sqrt(std::numbers::pi) * std::exp(-x * x); });
}
void sigmoid_backward(const Call& call) {
  unary_backward(call, [](double x) { const double s = sigmoid_of(x); return s * (1.0 - s); });
}
void silu_backward(const Call& call) {
  unary_backward(call, [](double x) { const double s = sigmoid_of(x); return s * (1.0 + x * (1.0 - s)); });
}
void gelu_backward(const Call& call) {
  const bool tanh_form = gelu_uses_tanh(call);
  unary_backward(call, [&](double x) { return gelu_derivative(x, tanh_form); });
}
void clamp_backward(const Call& call) {
  // The gradient passes where lo <= x <= hi (PyTorch), and is 0 where the bound was applied.
  const FloatBounds b = float_bounds(call);
  unary_backward(call, [&](double x) {
    return (!b.lo || x >= *b.lo) && (!b.hi || x <= *b.hi) ? 1.0 : 0.0;
  });
}

}  // namespace deepx::ref
