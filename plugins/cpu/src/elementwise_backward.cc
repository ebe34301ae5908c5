// Backward kernels of the elementwise ops and of dx.copy / dx.transpose / dx.cast (F dtypes):
//   unary  (dy, x, y)        -> dx  = dy * f'(x)
//   binary (dy, a, b, y)     -> da, db, each summed over the dims where its input broadcasts
//   where  (dy, c, a, b, y)  -> dc (zeros), da = c ? dy : 0, db = c ? 0 : dy (summed likewise)
// with the reference's formulas (reference-kernels/src/elementwise.cc, elementwise_logic.cc,
// movement.cc)
// evaluated in f64 and rounded once; see grad.h for the engine. For f32/f16/bf16 the derivatives
// built on exp, tanh and erf use the vectorisable f64 functions of fast_math.h (exp_f64: 1e-14
// relative, the erfc behind gelu's cdf: 1e-11) instead of libm calls, so their loops run as
// SIMD, far inside what those dtypes resolve; f64 gradients keep the reference's libm calls.
#include <cmath>
#include <concepts>
#include <numbers>

#include "fast_math.h"
#include "grad.h"
#include "kernels.h"
#include "movement_util.h"

namespace deepx::cpu {
namespace {

constexpr double kSqrt2OverPi = 0.7978845608028654;  // sqrt(2 / pi), as the reference
constexpr double kGeluCubic = 0.044715;

double sigmoid_of(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double fast_sigmoid_of(double x) { return 1.0 / (1.0 + exp_f64(-x)); }

/// tanh for f64 from exp_f64: 1 - 2 / (e^2|x| + 1) with x's sign (absolute error about 1e-16,
/// which is all 1 - t^2 and 1 + t need); +-Inf give +-1, NaN stays NaN.
double tanh_of(double x) {
  const double magnitude = x < 0 ? -x : x;
  const double t = 1.0 - 2.0 / (exp_f64(2.0 * magnitude) + 1.0);
  return x < 0 ? -t : t;
}

/// 0.5 (1 + erf(x / sqrt 2)) from erfc, without the cancellation below 0.
double normal_cdf(double x) {
  const double half_erfc = 0.5 * detail::erfc_nonnegative_f64((x < 0 ? -x : x) * 0.70710678118654752);
  const double cdf = x < 0 ? half_erfc : 1.0 - half_erfc;
  return (x != x) ? x : cdf;
}

// ---- unary derivatives (f64 in, f64 out), exactly the reference's formulas ---------------------

struct NegD { static double d(double) { return -1.0; } };
struct AbsD { static double d(double x) { return x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0); } };
struct SignD { static double d(double) { return 0.0; } };
// A `fast` member is the vectorisable form used for f32/f16/bf16 (unary_backward_kernel).
struct ExpD {
  static double d(double x) { return std::exp(x); }
  static double fast(double x) { return exp_f64(x); }
};
struct ReluD { static double d(double x) { return x > 0 ? 1.0 : 0.0; } };
struct ReciprocalD { static double d(double x) { return -1.0 / (x * x); } };
struct SqrtD { static double d(double x) { return 0.5 / std::sqrt(x); } };
struct RsqrtD { static double d(double x) { return -0.5 / (x * std::sqrt(x)); } };
struct LogD { static double d(double x) { return 1.0 / x; } };
struct Log1pD { static double d(double x) { return 1.0 / (1.0 + x); } };
struct SinD { static double d(double x) { return std::cos(x); } };
struct CosD { static double d(double x) { return -std::sin(x); } };
struct TanD {
  static double d(double x) {
    const double t = std::tan(x);
    return 1.0 + t * t;
  }
};
struct TanhD {
  static double d(double x) {
    const double t = std::tanh(x);
    return 1.0 - t * t;
  }
  static double fast(double x) {
    const double t = tanh_of(x);
    return 1.0 - t * t;
  }
};
struct ErfD {
  static double d(double x) { return 2.0 / std::sqrt(std::numbers::pi) * std::exp(-x * x); }
  static double fast(double x) { return 2.0 / std::sqrt(std::numbers::pi) * exp_f64(-x * x); }
};
struct SigmoidD {
  static double d(double x) {
    const double s = sigmoid_of(x);
    return s * (1.0 - s);
  }
  static double fast(double x) {
    const double s = fast_sigmoid_of(x);
    return s * (1.0 - s);
  }
};
struct SiluD {
  static double d(double x) {
    const double s = sigmoid_of(x);
    return s * (1.0 + x * (1.0 - s));
  }
  static double fast(double x) {
    const double s = fast_sigmoid_of(x);
    return s * (1.0 + x * (1.0 - s));
  }
};

template <class D>
concept HasFastDerivative = requires(double x) {
  { D::fast(x) } -> std::same_as<double>;
};

template <class D>
constexpr int64_t derivative_cost() {
  if constexpr (std::is_same_v<D, NegD> || std::is_same_v<D, AbsD> || std::is_same_v<D, SignD> ||
                std::is_same_v<D, ReluD> || std::is_same_v<D, ReciprocalD> ||
                std::is_same_v<D, LogD> || std::is_same_v<D, Log1pD>) {
    return 2;
  } else if constexpr (std::is_same_v<D, SqrtD> || std::is_same_v<D, RsqrtD>) {
    return 4;
  } else {
    return 32;
  }
}

/// Validates a unary backward call (dy, x, y) -> dx with dy/y of dtype Out and x/dx of dtype
/// In; returns the wanted gradient (null when not wanted) and the views.
template <class In, class Out>
struct UnaryBackward {
  View dy, x;
  GradTarget dx;
  explicit UnaryBackward(const dx_kernel_call_t* call) {
    expect_arity(call, 3, 1);
    dy = make_view(call->inputs[0], "output gradient 0");
    x = make_view(call->inputs[1], "forward input 0");
    const View y = make_view(call->inputs[2], "forward output 0");
    expect_dtype(dy, dtype_of<Out>(), "output gradient 0");
    expect_dtype(x, dtype_of<In>(), "forward input 0");
    expect_dtype(y, dtype_of<Out>(), "forward output 0");
    check_same_shape(dy, x);
    check_same_shape(y, x);
    dx = GradTarget(grad_view(call, 0, dtype_of<In>(), x), {&dy, &x}, /*exact_alias_ok=*/true);
  }
};

/// dx = dy * d(x) for the derivative `deriv` (f64 -> f64).
template <class T, class Deriv>
void unary_gradient(const dx_kernel_call_t* call, Deriv deriv, int64_t cost) {
  UnaryBackward<T, T> b(call);
  if (!b.dx) return;
  write_gradient<T, T, T>(b.dx.view(), b.x, {&b.dy, &b.x},
                          [deriv](T g, T x) { return to_f64(g) * deriv(to_f64(x)); }, cost);
  b.dx.finish();
}

template <class T, class D>
dx_error_t* unary_backward_kernel(const dx_kernel_call_t* call) noexcept {
  return guard(call->host, [&] {
    if constexpr (!std::is_same_v<T, double> && HasFastDerivative<D>) {
      unary_gradient<T>(call, [](double x) { return D::fast(x); }, derivative_cost<D>());
    } else {
      unary_gradient<T>(call, [](double x) { return D::d(x); }, derivative_cost<D>());
    }
  });
}

/// The reference's gelu derivative; Fast selects the vectorisable exp/erfc/tanh (f32/f16/bf16).
template <bool Fast>
double gelu_derivative(double x, bool tanh_form) {
  if (!tanh_form) {
    const double cdf = Fast ? normal_cdf(x) : 0.5 * std::erfc(-x / std::numbers::sqrt2);
    const double pdf = (Fast ? exp_f64(-0.5 * x * x) : std::exp(-0.5 * x * x)) / std::sqrt(2.0 * std::numbers::pi);
    return cdf + x * pdf;
  }
  const double u = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
  const double t = Fast ? tanh_of(u) : std::tanh(u);
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * kSqrt2OverPi * (1.0 + 3.0 * kGeluCubic * x * x);
}

template <class T>
dx_error_t* gelu_backward_kernel(const dx_kernel_call_t* call) noexcept {
  return guard(call->host, [&] {
    constexpr bool kFast = !std::is_same_v<T, double>;
    if (gelu_tanh_form(call)) {
      unary_gradient<T>(call, [](double x) { return gelu_derivative<kFast>(x, true); }, 64);
    } else {
      unary_gradient<T>(call, [](double x) { return gelu_derivative<kFast>(x, false); }, 64);
    }
  });
}

/// The gradient passes where min <= x <= max (PyTorch) and is dy * 0 elsewhere.
template <class T>
dx_error_t* clamp_backward_kernel(const dx_kernel_call_t* call) noexcept {
  return guard(call->host, [&] {
    const std::optional<double> lo = clamp_float_bound(call, DX_CLAMP_MIN, "min");
    const std::optional<double> hi = clamp_float_bound(call, DX_CLAMP_MAX, "max");
    const bool has_lo = lo.has_value(), has_hi = hi.has_value();
    const double l = lo.value_or(0), h = hi.value_or(0);
    unary_gradient<T>(call, [=](double x) {
      return (!has_lo || x >= l) && (!has_hi || x <= h) ? 1.0 : 0.0;
    }, 2);
  });
}

/// dx.cast F -> F: dx is dy converted back to the input dtype. dx.copy is the same with From = To.
template <class From, class To>
dx_error_t* cast_backward_kernel(const dx_kernel_call_t* call) noexcept {
  return guard(call->host, [&] {
    UnaryBackward<From, To> b(call);
    if (!b.dx) return;
    write_gradient<From, To>(b.dx.view(), b.x, {&b.dy}, [](To g) { return to_f64(g); });
    b.dx.finish();
  });
}

/// dx.transpose: dx viewed through the forward permutation has dy's shape; dx[perm] = dy.
template <class T>
dx_error_t* transpose_backward_kernel(const dx_kernel_call_t* call) noexcept {
  return guard(call->host, [&] {
    constexpr DLDataType t = dtype_of<T>();
    const auto [dy, x, y] = backward_tensors<1>(call, t);
    int64_t perm[kMaxRank];
    transpose_perm(call, x.rank, perm);
    View permuted = x;
    for (int d = 0; d < x.rank; ++d) permuted.shape[d] = x.shape[perm[d]];
    check_same_shape(dy, permuted);
    check_same_shape(y, permuted);
    const std::optional<View> dx = grad_view(call, 0, t, x);
    if (!dx) return;
    GradTarget target(dx, {&dy}, /*exact_alias_ok=*/false);
    View dx_permuted = target.view();
    for (int d = 0; d < x.rank; ++d) {
      dx_permuted.shape[d] = x.shape[perm[d]];
      dx_permuted.strides[d] = target.view().strides[perm[d]];
    }
    // dx = 0.0 + dy (-0 becomes +0, as the reference's f64 accumulation from +0), moved
    // through copy_view's transpose tiles with the addition fused.
    movement::copy_gradient_view(dx_permuted, dy);
    target.finish();
  });
}

// ---- binary ------------------------------------------------------------------------------------

struct AddD {
  static double da(double, double) { return 1.0; }
  static double db(double, double) { return 1.0; }
};
struct SubD {
  static double da(double, double) { return 1.0; }
  static double db(double, double) { return -1.0; }
};
struct MulD {
  static double da(double, double b) { return b; }
  static double db(double a, double) { return a; }
};
struct DivD {
  static double da(double, double b) { return 1.0 / b; }
  static double db(double a, double b) { return -a / (b * b); }
};
// As PyTorch: d/da is 0 where b == 0; d/db is 0 where a == 0 and b >= 0.
struct PowD {
  static double da(double a, double b) { return b == 0 ? 0.0 : b * std::pow(a, b - 1); }
  static double db(double a, double b) { return a == 0 && b >= 0 ? 0.0 : std::pow(a, b) * std::log(a); }
};
// Ties split the gradient evenly; a NaN operand takes it.
struct MaximumD {
  static double da(double a, double b) { return a != a || a > b ? 1.0 : (a == b ? 0.5 : 0.0); }
  static double db(double a, double b) {
    return a == a && (b != b || b > a) ? 1.0 : (a == b ? 0.5 : 0.0);
  }
};
struct MinimumD {
  static double da(double a, double b) { return a != a || a < b ? 1.0 : (a == b ? 0.5 : 0.0); }
  static double db(double a, double b) {
    return a == a && (b != b || b < a) ? 1.0 : (a == b ? 0.5 : 0.0);
  }
};

template <class T, class D>
dx_error_t* binary_backward_kernel(const dx_kernel_call_t* call) noexcept {
  return guard(call->host, [&] {
    constexpr DLDataType t = dtype_of<T>();
    const auto [dy, a, b, y] = backward_tensors<2>(call, t);
    expect_broadcast_of<2>(dy, {&a, &b});
    check_same_shape(y, dy);
    const std::optional<View> va = grad_view(call, 0, t, a);
    const std::optional<View> vb = grad_view(call, 1, t, b);
    // With both gradients wanted, the first pass must not clobber what the second reads.
    const bool alone = !(va && vb);
    GradTarget ga(va, {&dy, &a, &b}, alone);
    GradTarget gb(vb, {&dy, &a, &b}, alone);
    constexpr int64_t cost = std::is_same_v<D, PowD> ? 64 : 2;
    if (ga) {
      write_gradient<T, T, T, T>(ga.view(), dy, {&dy, &a, &b}, [](T g, T x, T z) {
        return to_f64(g) * D::da(to_f64(x), to_f64(z));
      }, cost);
    }
    if (gb) {
      write_gradient<T, T, T, T>(gb.view(), dy, {&dy, &a, &b}, [](T g, T x, T z) {
        return to_f64(g) * D::db(to_f64(x), to_f64(z));
      }, cost);
    }
    ga.finish();
    gb.finish();
  });
}

/// dx.where(cond, a, b): the condition's gradient is zeros.
template <class T>
dx_error_t* where_backward_kernel(const dx_kernel_call_t* call) noexcept {
  return guard(call->host, [&] {
    expect_arity(call, 5, 3);
    const View dy = make_view(call->inputs[0], "output gradient 0");
    const View c = make_view(call->inputs[1], "forward input 0");
    const View a = make_view(call->inputs[2], "forward input 1");
    const View b = make_view(call->inputs[3], "forward input 2");
    const View y = make_view(call->inputs[4], "forward output 0");
    constexpr DLDataType t = dtype_of<T>();
    expect_dtype(dy, t, "output gradient 0");
    expect_dtype(c, dtype_of<Bool>(), "forward input 0");
    expect_dtype(a, t, "forward input 1");
    expect_dtype(b, t, "forward input 2");
    expect_dtype(y, t, "forward output 0");
    expect_broadcast_of<3>(dy, {&c, &a, &b});
    check_same_shape(y, dy);
    const std::optional<View> vc = grad_view(call, 0, dtype_of<Bool>(), c);
    const std::optional<View> va = grad_view(call, 1, t, a);
    const std::optional<View> vb = grad_view(call, 2, t, b);
    const bool alone = !(va && vb);
    GradTarget ga(va, {&dy, &c}, alone);
    GradTarget gb(vb, {&dy, &c}, alone);
    GradTarget gc(vc, {&dy, &c, va ? &*va : nullptr, vb ? &*vb : nullptr}, false);
    if (ga) {
      write_gradient<T, T, uint8_t>(ga.view(), dy, {&dy, &c}, [](T g, uint8_t cond) {
        return cond != 0 ? to_f64(g) : 0.0;
      });
    }
    if (gb) {
      write_gradient<T, T, uint8_t>(gb.view(), dy, {&dy, &c}, [](T g, uint8_t cond) {
        return cond != 0 ? 0.0 : to_f64(g);
      });
    }
    ga.finish();
    gb.finish();
    if (gc) {
      map_elements<uint8_t>(gc.view(), {}, []() { return uint8_t{0}; });
      gc.finish();
    }
  });
}

template <class From>
dx_kernel_fn cast_from(DLDataType to) {
  if (same_dtype(to, dtype_of<double>())) return &cast_backward_kernel<From, double>;
  if (same_dtype(to, dtype_of<float>())) return &cast_backward_kernel<From, float>;
  if (same_dtype(to, dtype_of<Half>())) return &cast_backward_kernel<From, Half>;
  if (same_dtype(to, dtype_of<BFloat16>())) return &cast_backward_kernel<From, BFloat16>;
  return nullptr;
}

}  // namespace

template <class T>
ElementwiseBackward elementwise_backward() {
  if constexpr (!is_float_v<T>) {
    return {};
  } else {
    return {
        .add = &binary_backward_kernel<T, AddD>,
        .sub = &binary_backward_kernel<T, SubD>,
        .mul = &binary_backward_kernel<T, MulD>,
        .div = &binary_backward_kernel<T, DivD>,
        .pow = &binary_backward_kernel<T, PowD>,
        .maximum = &binary_backward_kernel<T, MaximumD>,
        .minimum = &binary_backward_kernel<T, MinimumD>,
        .where = &where_backward_kernel<T>,
        .neg = &unary_backward_kernel<T, NegD>,
        .abs = &unary_backward_kernel<T, AbsD>,
        .sign = &unary_backward_kernel<T, SignD>,
        .exp = &unary_backward_kernel<T, ExpD>,
        .expm1 = &unary_backward_kernel<T, ExpD>,
        .relu = &unary_backward_kernel<T, ReluD>,
        .reciprocal = &unary_backward_kernel<T, ReciprocalD>,
        .sqrt = &unary_backward_kernel<T, SqrtD>,
        .rsqrt = &unary_backward_kernel<T, RsqrtD>,
        .log = &unary_backward_kernel<T, LogD>,
        .log1p = &unary_backward_kernel<T, Log1pD>,
        .sin = &unary_backward_kernel<T, SinD>,
        .cos = &unary_backward_kernel<T, CosD>,
        .tan = &unary_backward_kernel<T, TanD>,
        .tanh = &unary_backward_kernel<T, TanhD>,
        .erf = &unary_backward_kernel<T, ErfD>,
        .sigmoid = &unary_backward_kernel<T, SigmoidD>,
        .silu = &unary_backward_kernel<T, SiluD>,
        .gelu = &gelu_backward_kernel<T>,
        .clamp = &clamp_backward_kernel<T>,
        .copy = &cast_backward_kernel<T, T>,
        .transpose = &transpose_backward_kernel<T>,
    };
  }
}

template ElementwiseBackward elementwise_backward<double>();
template ElementwiseBackward elementwise_backward<float>();
template ElementwiseBackward elementwise_backward<Half>();
template ElementwiseBackward elementwise_backward<BFloat16>();
template ElementwiseBackward elementwise_backward<int64_t>();
template ElementwiseBackward elementwise_backward<int32_t>();
template ElementwiseBackward elementwise_backward<int16_t>();
template ElementwiseBackward elementwise_backward<int8_t>();
template ElementwiseBackward elementwise_backward<uint8_t>();
template ElementwiseBackward elementwise_backward<Bool>();

dx_kernel_fn cast_backward(DLDataType from, DLDataType to) {
  if (same_dtype(from, dtype_of<double>())) return cast_from<double>(to);
  if (same_dtype(from, dtype_of<float>())) return cast_from<float>(to);
  if (same_dtype(from, dtype_of<Half>())) return cast_from<Half>(to);
  if (same_dtype(from, dtype_of<BFloat16>())) return cast_from<BFloat16>(to);
  return nullptr;
}

}  // namespace deepx::cpu
