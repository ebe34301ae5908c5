// Per-element and per-row bodies of the backward kernels (see src/elementwise_backward.cu for
// the calling convention: inputs = output gradients, forward inputs, forward outputs; outputs =
// input gradients). Derivatives follow the reference (reference-kernels/src/elementwise.cc);
// binary gradients are computed in f64, so a broadcast input's gradient is summed in f64 and
// rounded once, as the reference does.
#ifndef DEEPX_GPU_BACKWARD_H_
#define DEEPX_GPU_BACKWARD_H_

#include <math.h>
#include <stdint.h>

#include "deepx/gpu/elementwise.h"
#include "deepx/gpu/reduce.h"

namespace deepx::gpu {

/// d f(x) / dx of the differentiable unary ops, in the compute type.
template <class C>
DXG_HD C unary_derivative(UnaryOp op, C x) {
  const C one = 1, zero = 0;
  switch (op) {
    case UnaryOp::Abs: return x > zero ? one : (x < zero ? -one : zero);
    case UnaryOp::Neg: return -one;
    case UnaryOp::Sign: return zero;
    case UnaryOp::Reciprocal: return -one / (x * x);
    case UnaryOp::Sqrt: return C(0.5) / m_sqrt(x);
    case UnaryOp::Rsqrt: return C(-0.5) / (x * m_sqrt(x));
    case UnaryOp::Exp: case UnaryOp::Expm1: return m_exp(x);
    case UnaryOp::Log: return one / x;
    case UnaryOp::Log1p: return one / (one + x);
    case UnaryOp::Sin: return m_cos(x);
    case UnaryOp::Cos: return -m_sin(x);
    case UnaryOp::Tan: { const C t = m_tan(x); return one + t * t; }
    case UnaryOp::Tanh: { const C t = m_tanh(x); return one - t * t; }
    case UnaryOp::Erf: return C(1.1283791670955126) * m_exp(-x * x);  // 2 / sqrt(pi)
    case UnaryOp::Sigmoid: {
      const C s = apply_unary(UnaryOp::Sigmoid, x);
      return s * (one - s);
    }
    case UnaryOp::Silu: {
      const C s = apply_unary(UnaryOp::Sigmoid, x);
      return s * (one + x * (one - s));
    }
    case UnaryOp::Relu: return x > zero ? one : zero;
    default: return zero;
  }
}

/// dx = dy * f'(x), in f64 and rounded once, as the reference (an f32 derivative can overflow
/// where the product does not, e.g. dy * exp(89)); operands 0 = dx, 1 = dy, 2 = x.
template <class T>
struct UnaryGradFn {
  Layout layout;
  T* dx;
  const T* dy;
  const T* x;
  UnaryOp op;
  DXG_HD void operator()(int64_t i) const {
    int64_t off[kMaxOperands];
    layout_offsets(layout, i, off);
    const double g = static_cast<double>(Num<T>::load(dy[off[1]]));
    const double d = unary_derivative<double>(op, static_cast<double>(Num<T>::load(x[off[2]])));
    // "+ 0" turns -0 into +0: gradients are sums that start at +0 (as the reference's are).
    store_from_double(&dx[off[0]], dtype_of<T>(), g * d + 0.0);
  }
};

/// Partial derivative of a binary op with respect to its first (wrt_b = false) or second
/// operand, at (a, b), in f64.
DXG_HD double binary_partial(BinaryOp op, bool wrt_b, double a, double b) {
  const bool nan_a = a != a, nan_b = b != b;
  switch (op) {
    case BinaryOp::Add: return 1.0;
    case BinaryOp::Sub: return wrt_b ? -1.0 : 1.0;
    case BinaryOp::Mul: return wrt_b ? a : b;
    case BinaryOp::Div: return wrt_b ? -a / (b * b) : 1.0 / b;
    case BinaryOp::Pow:
      // As PyTorch: d/da is 0 where b == 0; d/db is 0 where a == 0 and b >= 0.
      if (!wrt_b) return b == 0 ? 0.0 : b * pow(a, b - 1);
      return a == 0 && b >= 0 ? 0.0 : pow(a, b) * log(a);
    case BinaryOp::Maximum:  // ties split evenly; a NaN operand takes the gradient
      if (!wrt_b) return nan_a || a > b ? 1.0 : (a == b ? 0.5 : 0.0);
      return !nan_a && (nan_b || b > a) ? 1.0 : (a == b ? 0.5 : 0.0);
    case BinaryOp::Minimum:
      if (!wrt_b) return nan_a || a < b ? 1.0 : (a == b ? 0.5 : 0.0);
      return !nan_a && (nan_b || b < a) ? 1.0 : (a == b ? 0.5 : 0.0);
  }
  return 0.0;
}

/// One input gradient of a broadcasting binary op over the output's shape: dy * partial, in f64,
/// written to a compact f64 buffer (operand 0) that is then summed to the input's shape.
/// Operands: 0 = buffer, 1 = dy, 2 = a, 3 = b.
template <class T>
struct BinaryGradFn {
  Layout layout;
  double* buffer;
  const T* dy;
  const T* a;
  const T* b;
  BinaryOp op;
  bool wrt_b;
  DXG_HD void operator()(int64_t i) const {
    int64_t off[kMaxOperands];
    layout_offsets(layout, i, off);
    const double g = Num<T>::load(dy[off[1]]);
    buffer[off[0]] = g * binary_partial(op, wrt_b, Num<T>::load(a[off[2]]), Num<T>::load(b[off[3]])) + 0.0;
  }
};

/// out = in * scale + 0 for any float dtypes, through f64, rounded once (copy/transpose/cast
/// and sum/mean gradients). Operands 0 = out, 1 = in.
struct ScaleFn {
  Layout layout;
  char* out;
  const char* in;
  DType out_type, in_type;
  double scale;
  DXG_HD void operator()(int64_t i) const {
    int64_t off[kMaxOperands];
    layout_offsets(layout, i, off);
    const double v = load_as_double(in + off[1] * dtype_size(in_type), in_type);
    // "+ 0": a gradient is a sum starting at +0, so -0 comes out as +0 (as in the reference).
    store_from_double(out + off[0] * dtype_size(out_type), out_type, v * scale + 0.0);
  }
};

/// Sums the f64 contributions of each gradient element serially, in the row-major order of the
/// reduced dimensions: the reference's order, so broadcast gradients match it bit for bit.
/// Operands of `outer`: 0 = gradient, 1 = buffer; `inner`: 0 = buffer.
struct SerialSumFn {
  Layout outer, inner;
  const double* buffer;
  char* out;
  DType out_type;
  DXG_HD void operator()(int64_t o) const {
    const double* base = buffer + layout_offset(outer, 1, o);
    double acc = 0.0;
    for (int64_t r = 0; r < inner.count; ++r) acc += base[layout_offset(inner, 0, r)];
    store_from_double(out + layout_offset(outer, 0, o) * dtype_size(out_type), out_type, acc + 0.0);
  }
};

/// Softmax gradient of one row, from the forward input (the softmax is recomputed, as the
/// reference does): dx = s * (dy - sum(dy * s)). Phases: max, sum of e, dot of dy and e (each a
/// fold plus a tree), then the writes. Operands of `outer`: 0 = dx, 1 = x, 2 = dy.
template <class T>
struct SoftmaxGradFn {
  using C = typename Num<T>::C;
  using Acc = C;
  Layout outer;
  int64_t length, x_stride, dy_stride, dx_stride;
  const T* x;
  const T* dy;
  T* dx;
  bool summing = false;

  DXG_HD C combine(C a, C b) const {
    if (summing) return a + b;
    if (a != a) return a;
    if (b != b) return b;
    return a > b ? a : b;
  }
  DXG_HD C load_x(int64_t o, int64_t j) const { return Num<T>::load(x[layout_offset(outer, 1, o) + j * x_stride]); }
  DXG_HD C load_dy(int64_t o, int64_t j) const { return Num<T>::load(dy[layout_offset(outer, 2, o) + j * dy_stride]); }
  DXG_HD C partial_max(int64_t o, int t, int n) const {
    C m = -static_cast<C>(HUGE_VAL);
    for (int64_t j = t; j < length; j += n) {
      const C v = load_x(o, j);
      m = (m != m) ? m : (v != v ? v : (v > m ? v : m));
    }
    return m;
  }
  DXG_HD C partial_sum(int64_t o, int t, int n, C max) const {
    C s = 0;
    for (int64_t j = t; j < length; j += n) s += m_exp(load_x(o, j) - max);
    return s;
  }
  DXG_HD C partial_dot(int64_t o, int t, int n, C max) const {
    C s = 0;
    for (int64_t j = t; j < length; j += n) s += load_dy(o, j) * m_exp(load_x(o, j) - max);
    return s;
  }
  DXG_HD void write(int64_t o, int t, int n, C max, C sum, C dot) const {
    T* row = dx + layout_offset(outer, 0, o);
    const C weighted = dot / sum;
    for (int64_t j = t; j < length; j += n) {
      const C s = m_exp(load_x(o, j) - max) / sum;
      row[j * dx_stride] = Num<T>::store(s * (load_dy(o, j) - weighted));
    }
  }
};

}  // namespace deepx::gpu

#endif  // DEEPX_GPU_BACKWARD_H_
