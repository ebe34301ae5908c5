// Per-element bodies of the elementwise kernels, as functors with a `DXG_HD operator()(i)`:
// the device launches them over a grid-stride loop (kernels.h), the host-emulation tests call
// them in a plain loop. The op is a runtime code (one kernel per storage type, not per op and
// type), which keeps the number of template instantiations small; the switch is uniform across
// a warp, so it costs no divergence.
#ifndef DEEPX_GPU_ELEMENTWISE_H_
#define DEEPX_GPU_ELEMENTWISE_H_

#include <math.h>
#include <stdint.h>

#include "deepx/gpu/indexing.h"
#include "deepx/gpu/numeric.h"

namespace deepx::gpu {

enum class UnaryOp : uint8_t {
  Abs, Neg, Sign, Reciprocal, Sqrt, Rsqrt, Exp, Expm1, Log, Log1p, Sin, Cos, Tan, Tanh, Erf,
  Sigmoid, Relu, Silu, Floor, Ceil, Round
};
enum class BinaryOp : uint8_t { Add, Sub, Mul, Div, Pow, Maximum, Minimum };
enum class CompareOp : uint8_t { Eq, Ne, Lt, Le, Gt, Ge };
enum class LogicOp : uint8_t { And, Or, Xor };

// Math in the compute type: float or double, through the C functions both toolchains provide.
DXG_HD float m_exp(float x) { return expf(x); }
DXG_HD double m_exp(double x) { return exp(x); }
DXG_HD float m_expm1(float x) { return expm1f(x); }
DXG_HD double m_expm1(double x) { return expm1(x); }
DXG_HD float m_log(float x) { return logf(x); }
DXG_HD double m_log(double x) { return log(x); }
DXG_HD float m_log1p(float x) { return log1pf(x); }
DXG_HD double m_log1p(double x) { return log1p(x); }
DXG_HD float m_sqrt(float x) { return sqrtf(x); }
DXG_HD double m_sqrt(double x) { return sqrt(x); }
DXG_HD float m_sin(float x) { return sinf(x); }
DXG_HD double m_sin(double x) { return sin(x); }
DXG_HD float m_cos(float x) { return cosf(x); }
DXG_HD double m_cos(double x) { return cos(x); }
DXG_HD float m_tan(float x) { return tanf(x); }
DXG_HD double m_tan(double x) { return tan(x); }
DXG_HD float m_tanh(float x) { return tanhf(x); }
DXG_HD double m_tanh(double x) { return tanh(x); }
DXG_HD float m_erf(float x) { return erff(x); }
DXG_HD double m_erf(double x) { return erf(x); }
DXG_HD float m_floor(float x) { return floorf(x); }
DXG_HD double m_floor(double x) { return floor(x); }
DXG_HD float m_ceil(float x) { return ceilf(x); }
DXG_HD double m_ceil(double x) { return ceil(x); }
DXG_HD float m_rint(float x) { return rintf(x); }  // half to even
DXG_HD double m_rint(double x) { return rint(x); }
DXG_HD float m_pow(float a, float b) { return powf(a, b); }
DXG_HD double m_pow(double a, double b) { return pow(a, b); }

template <class C>
DXG_HD C apply_unary(UnaryOp op, C x) {
  const C zero = 0, one = 1;
  switch (op) {
    case UnaryOp::Abs: return x < zero ? -x : (x == zero ? zero : x);  // abs(-0) = +0
    case UnaryOp::Neg: return -x;
    case UnaryOp::Sign: return x != x ? x : (x > zero ? one : (x < zero ? -one : zero));
    case UnaryOp::Reciprocal: return one / x;
    case UnaryOp::Sqrt: return m_sqrt(x);
    case UnaryOp::Rsqrt: return one / m_sqrt(x);
    case UnaryOp::Exp: return m_exp(x);
    case UnaryOp::Expm1: return m_expm1(x);
    case UnaryOp::Log: return m_log(x);
    case UnaryOp::Log1p: return m_log1p(x);
    case UnaryOp::Sin: return m_sin(x);
    case UnaryOp::Cos: return m_cos(x);
    case UnaryOp::Tan: return m_tan(x);
    case UnaryOp::Tanh: return m_tanh(x);
    case UnaryOp::Erf: return m_erf(x);
    case UnaryOp::Sigmoid: {
      // Where e^-x overflows, e^x / (1 + e^x) still resolves the tiny result (bf16 shares
      // f32's range, so sigmoid(-100) is a normal bf16 number, not 0).
      const C e = m_exp(-x);
      if (e != zero && e * C(2) == e) {
        const C p = m_exp(x);
        return p / (one + p);
      }
      return one / (one + e);
    }
    case UnaryOp::Relu: return x != x ? x : (x > zero ? x : zero);
    case UnaryOp::Silu: {
      // x / (1 + e^-x); where e^-x overflows, x e^x / (1 + e^x) (tiny, not 0), and the limit
      // -0 at -Inf (the reference's silu(-Inf) = -0; the formulas would give NaN).
      if (x < zero && x * C(0.5) == x) return -zero;
      const C e = m_exp(-x);
      if (e != zero && e * C(2) == e) {
        const C p = m_exp(x);
        return x * p / (one + p);
      }
      return x / (one + e);
    }
    case UnaryOp::Floor: return m_floor(x);
    case UnaryOp::Ceil: return m_ceil(x);
    case UnaryOp::Round: return m_rint(x);
  }
  return x;
}

/// x < 0 without a "pointless comparison" for unsigned types.
template <class T>
DXG_HD bool is_negative(T x) {
  if constexpr (static_cast<T>(-1) < static_cast<T>(0)) return x < static_cast<T>(0);
  else return false;
}

/// Integer unary ops (abs, neg, sign) with two's-complement wrapping, computed unsigned.
template <class T>
DXG_HD T apply_unary_int(UnaryOp op, T x) {
  using U = unsigned long long;
  const U ux = static_cast<U>(static_cast<long long>(x));
  switch (op) {
    case UnaryOp::Neg: return static_cast<T>(U(0) - ux);
    case UnaryOp::Abs: return is_negative(x) ? static_cast<T>(U(0) - ux) : x;
    case UnaryOp::Sign: return static_cast<T>(x > T(0) ? 1 : (is_negative(x) ? -1 : 0));
    default: return x;
  }
}

template <class C>
DXG_HD C apply_binary(BinaryOp op, C a, C b) {
  switch (op) {
    case BinaryOp::Add: return a + b;
    case BinaryOp::Sub: return a - b;
    case BinaryOp::Mul: return a * b;
    case BinaryOp::Div: return a / b;
    case BinaryOp::Pow: return m_pow(a, b);
    case BinaryOp::Maximum: return a != a ? a : (b != b ? b : (a > b ? a : b));
    case BinaryOp::Minimum: return a != a ? a : (b != b ? b : (a < b ? a : b));
  }
  return a;
}

/// Integer binary ops: wrapping + - *, division truncating toward zero (the caller has checked
/// for zero divisors), INT_MIN / -1 wrapping to INT_MIN.
template <class T>
DXG_HD T apply_binary_int(BinaryOp op, T a, T b) {
  using U = unsigned long long;
  const U ua = static_cast<U>(static_cast<long long>(a));
  const U ub = static_cast<U>(static_cast<long long>(b));
  switch (op) {
    case BinaryOp::Add: return static_cast<T>(ua + ub);
    case BinaryOp::Sub: return static_cast<T>(ua - ub);
    case BinaryOp::Mul: return static_cast<T>(ua * ub);
    case BinaryOp::Div:
      if (b == T(0)) return T(0);                                // unreachable after the check
      if (is_negative(b) && b == static_cast<T>(-1)) return static_cast<T>(U(0) - ua);  // INT_MIN / -1 wraps
      return static_cast<T>(a / b);
    case BinaryOp::Maximum: return a > b ? a : b;
    case BinaryOp::Minimum: return a < b ? a : b;
    default: return a;
  }
}

template <class C>
DXG_HD bool apply_compare(CompareOp op, C a, C b) {
  switch (op) {
    case CompareOp::Eq: return a == b;
    case CompareOp::Ne: return a != b;  // NaN != anything
    case CompareOp::Lt: return a < b;
    case CompareOp::Le: return a <= b;
    case CompareOp::Gt: return a > b;
    case CompareOp::Ge: return a >= b;
  }
  return false;
}

template <class T>
DXG_HD bool is_int_type() {
  return static_cast<T>(0.5) == static_cast<T>(0);
}

// ---- functors ----------------------------------------------------------------------------------

/// out = op(in); operand 0 = out, 1 = in. F types.
template <class T>
struct UnaryFloatFn {
  Layout layout;
  T* out;
  const T* in;
  UnaryOp op;
  DXG_HD void operator()(int64_t i) const {
    const int64_t o = layout_offset(layout, 0, i), a = layout_offset(layout, 1, i);
    out[o] = Num<T>::store(apply_unary(op, Num<T>::load(in[a])));
  }
};

template <class T>
struct UnaryIntFn {
  Layout layout;
  T* out;
  const T* in;
  UnaryOp op;
  DXG_HD void operator()(int64_t i) const {
    const int64_t o = layout_offset(layout, 0, i), a = layout_offset(layout, 1, i);
    out[o] = apply_unary_int(op, in[a]);
  }
};

/// out = op(a, b) with broadcasting; operands 0 = out, 1 = a, 2 = b.
template <class T>
struct BinaryFloatFn {
  Layout layout;
  T* out;
  const T* a;
  const T* b;
  BinaryOp op;
  DXG_HD void operator()(int64_t i) const {
    int64_t off[kMaxOperands];
    layout_offsets(layout, i, off);
    out[off[0]] = Num<T>::store(apply_binary(op, Num<T>::load(a[off[1]]), Num<T>::load(b[off[2]])));
  }
};

template <class T>
struct BinaryIntFn {
  Layout layout;
  T* out;
  const T* a;
  const T* b;
  BinaryOp op;
  DXG_HD void operator()(int64_t i) const {
    int64_t off[kMaxOperands];
    layout_offsets(layout, i, off);
    out[off[0]] = apply_binary_int(op, a[off[1]], b[off[2]]);
  }
};

/// bool out = op(a, b); T is the storage type (compared in its compute type).
template <class T>
struct CompareFn {
  Layout layout;
  uint8_t* out;
  const T* a;
  const T* b;
  CompareOp op;
  DXG_HD void operator()(int64_t i) const {
    int64_t off[kMaxOperands];
    layout_offsets(layout, i, off);
    out[off[0]] = apply_compare(op, Num<T>::load(a[off[1]]), Num<T>::load(b[off[2]])) ? 1 : 0;
  }
};

/// Sets *flag when any element of the operand is zero (integer division check).
template <class T>
struct AnyZeroFn {
  Layout layout;
  const T* in;
  int* flag;
  DXG_HD void operator()(int64_t i) const {
    if (in[layout_offset(layout, 0, i)] == T(0)) *flag = 1;  // benign race: all write 1
  }
};

/// where(cond, a, b): bytes moved unchanged; W is an unsigned type of the element's size.
template <class W>
struct WhereFn {
  Layout layout;
  W* out;
  const uint8_t* cond;
  const W* a;
  const W* b;
  DXG_HD void operator()(int64_t i) const {
    int64_t off[kMaxOperands];
    layout_offsets(layout, i, off);
    out[off[0]] = cond[off[1]] != 0 ? a[off[2]] : b[off[3]];
  }
};

/// Strided copy of raw elements (copy, transpose, materialising any view).
template <class W>
struct CopyFn {
  Layout layout;
  W* out;
  const W* in;
  DXG_HD void operator()(int64_t i) const {
    int64_t off[kMaxOperands];
    layout_offsets(layout, i, off);
    out[off[0]] = in[off[1]];
  }
};

/// Strided fill with one element's bits.
template <class W>
struct FillFn {
  Layout layout;
  W* out;
  W value;
  DXG_HD void operator()(int64_t i) const { out[layout_offset(layout, 0, i)] = value; }
};

/// cast between any two dtypes (runtime-typed: one instantiation for all 100 signatures).
struct CastFn {
  Layout layout;
  char* out;
  const char* in;
  DType to, from;
  DXG_HD void operator()(int64_t i) const {
    int64_t off[kMaxOperands];
    layout_offsets(layout, i, off);
    cast_element(out + off[0] * dtype_size(to), to, in + off[1] * dtype_size(from), from);
  }
};

/// arange: out[i] = start + i * step at row-major position i. Integer outputs with integer
/// attributes are exact (wrapping); otherwise computed in f64 and stored by the cast rules.
struct ArangeFn {
  Layout layout;
  char* out;
  DType type;
  bool integer_attrs;
  int64_t start_i, step_i;
  double start_f, step_f;
  DXG_HD void operator()(int64_t i) const {
    char* p = out + layout_offset(layout, 0, i) * dtype_size(type);
    if (integer_attrs && !dtype_is_float(type)) {
      const uint64_t v = static_cast<uint64_t>(start_i) +
                         static_cast<uint64_t>(i) * static_cast<uint64_t>(step_i);
      store_int_wrapping(p, type, static_cast<int64_t>(v));
    } else {
      store_from_double(p, type, add_mul_unfused(start_f, static_cast<double>(i), step_f));
    }
  }
};

}  // namespace deepx::gpu

#endif  // DEEPX_GPU_ELEMENTWISE_H_
