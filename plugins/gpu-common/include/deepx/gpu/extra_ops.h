// Bodies of the op families added after the first set: gelu, clamp, bool logic, bitwise_not
// (per element), prod and argmax/argmin (block tree reductions, same phases as reduce.h), and
// the gradients of where, clamp, gelu, max/min and prod. Semantics follow the reference
// (reference-kernels/src/elementwise.cc, elementwise_logic.cc, reduce.cc).
#ifndef DEEPX_GPU_EXTRA_OPS_H_
#define DEEPX_GPU_EXTRA_OPS_H_

#include <math.h>
#include <stdint.h>

#include <type_traits>

#include "deepx/gpu/elementwise.h"
#include "deepx/gpu/indexing.h"
#include "deepx/gpu/numeric.h"

namespace deepx::gpu {

// ---- gelu --------------------------------------------------------------------------------------

/// gelu in f64 for every dtype (rounded once), as the reference writes it: the erf form as
/// x erfc(-x / sqrt 2) / 2 (1 + erf(x / sqrt 2) cancels for negative x), the tanh form as
/// PyTorch's expression (f32 arithmetic would lose the small results the reference resolves).
/// -Inf gives the limit -0.
DXG_HD double gelu_value(double x, bool tanh_form) {
  if (x < 0 && x * 0.5 == x) return -0.0;  // -Inf
  if (!tanh_form) return 0.5 * x * erfc(-x / 1.4142135623730951);
  return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

DXG_HD double gelu_derivative(double x, bool tanh_form) {
  if (!tanh_form) {
    const double cdf = 0.5 * erfc(-x / 1.4142135623730951);
    const double pdf = exp(-0.5 * x * x) / 2.5066282746310002;  // sqrt(2 pi)
    return cdf + x * pdf;
  }
  const double k = 0.7978845608028654, c = 0.044715;
  const double t = tanh(k * (x + c * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * c * x * x);
}

/// out = gelu(in); operands 0 = out, 1 = in.
template <class T>
struct GeluFn {
  Layout layout;
  T* out;
  const T* in;
  bool tanh_form;
  DXG_HD void operator()(int64_t i) const {
    int64_t off[kMaxOperands];
    layout_offsets(layout, i, off);
    store_from_double(&out[off[0]], dtype_of<T>(), gelu_value(static_cast<double>(Num<T>::load(in[off[1]])), tanh_form));
  }
};

// ---- clamp -------------------------------------------------------------------------------------

/// NaN-propagating max/min of the reference (a NaN operand gives a + b, a NaN).
DXG_HD double nan_max(double a, double b) { return a != a || b != b ? a + b : (a > b ? a : b); }
DXG_HD double nan_min(double a, double b) { return a != a || b != b ? a + b : (a < b ? a : b); }

/// Float clamp: max(x, lo) then min(., hi), in f64, rounded once. Operands 0 = out, 1 = in.
template <class T>
struct ClampFloatFn {
  Layout layout;
  T* out;
  const T* in;
  bool has_lo, has_hi;
  double lo, hi;
  DXG_HD void operator()(int64_t i) const {
    int64_t off[kMaxOperands];
    layout_offsets(layout, i, off);
    double x = static_cast<double>(Num<T>::load(in[off[1]]));
    if (has_lo) x = nan_max(x, lo);
    if (has_hi) x = nan_min(x, hi);
    store_from_double(&out[off[0]], dtype_of<T>(), x);
  }
};

/// Integer clamp with bounds already saturated to the dtype's range.
template <class T>
struct ClampIntFn {
  Layout layout;
  T* out;
  const T* in;
  bool has_lo, has_hi;
  int64_t lo, hi;
  DXG_HD void operator()(int64_t i) const {
    int64_t off[kMaxOperands];
    layout_offsets(layout, i, off);
    int64_t x = static_cast<int64_t>(in[off[1]]);
    if (has_lo && x < lo) x = lo;
    if (has_hi && x > hi) x = hi;
    out[off[0]] = static_cast<T>(x);
  }
};

// ---- logic and bitwise -------------------------------------------------------------------------

/// (bool, bool) -> bool with broadcasting; any non-zero byte reads as true. Operands 0 = out,
/// 1 = a, 2 = b.
struct LogicFn {
  Layout layout;
  uint8_t* out;
  const uint8_t* a;
  const uint8_t* b;
  LogicOp op;
  DXG_HD void operator()(int64_t i) const {
    int64_t off[kMaxOperands];
    layout_offsets(layout, i, off);
    const bool x = a[off[1]] != 0, y = b[off[2]] != 0;
    bool r = false;
    switch (op) {
      case LogicOp::And: r = x && y; break;
      case LogicOp::Or: r = x || y; break;
      case LogicOp::Xor: r = x != y; break;
    }
    out[off[0]] = r ? 1 : 0;
  }
};

/// bitwise_not (two's complement ~x; bool: logical not) and logical_not (`logical`).
template <class T>
struct NotFn {
  Layout layout;
  T* out;
  const T* in;
  bool logical;  // bool in and out: 1 where the input byte is 0
  DXG_HD void operator()(int64_t i) const {
    int64_t off[kMaxOperands];
    layout_offsets(layout, i, off);
    const T x = in[off[1]];
    out[off[0]] = logical ? static_cast<T>(x == T(0) ? 1 : 0) : static_cast<T>(~x);
  }
};

// ---- prod, argmax, argmin (block tree reductions: launch_reduce's interface) ------------------

/// Product over the reduced elements: f64 for F (rounded once), wrapping u64 for I (i64 out).
/// Layouts as ReduceFn's: outer operand 0 = out, 1 = in; inner operand 0 = in. Integer
/// products wrap modulo 2^64, which any order gives exactly, so the block shares the work; an
/// f64 product overflows, underflows and meets 0 * Inf at order-dependent places, so thread 0
/// multiplies in the reference's row-major order (the others contribute 1).
template <class T>
struct ProdFn {
  static constexpr bool kInt = std::is_integral_v<T>;
  using Acc = std::conditional_t<kInt, uint64_t, double>;
  Layout outer, inner;
  const T* in;
  char* out;
  DType out_type;
  DXG_HD Acc combine(Acc a, Acc b) const { return a * b; }
  DXG_HD Acc partial(int64_t o, int t, int n) const {
    const T* base = in + layout_offset(outer, 1, o);
    Acc acc = 1;
    if constexpr (!kInt) {
      if (t != 0) return acc;
      n = 1;
    }
    for (int64_t r = t; r < inner.count; r += n) {
      const T v = base[layout_offset(inner, 0, r)];
      if constexpr (kInt) acc *= static_cast<uint64_t>(static_cast<int64_t>(v));
      else acc *= static_cast<double>(Num<T>::load(v));
    }
    return acc;
  }
  DXG_HD void finish(int64_t o, Acc acc) const {
    char* p = out + layout_offset(outer, 0, o) * dtype_size(out_type);
    if constexpr (kInt) store_int_wrapping(p, out_type, static_cast<int64_t>(acc));
    else store_from_double(p, out_type, acc);
  }
};

/// A candidate of argmax/argmin: value and row-major position in the reduced elements (-1:
/// none yet). No member initialisers: it lives in __shared__ arrays.
template <class C>
struct ArgCandidate {
  C value;
  int64_t index;
};

/// argmax (sign > 0) / argmin: the first NaN if any, else the first extreme element. The
/// combine is associative and commutative (ties and NaNs go to the smaller position), so the
/// block tree gives the reference's serial answer.
template <class T>
struct ArgReduceFn {
  using C = std::conditional_t<std::is_integral_v<T>, int64_t, double>;
  using Acc = ArgCandidate<C>;
  Layout outer, inner;  // outer operand 0 = out (i64), 1 = in; inner operand 0 = in
  const T* in;
  int64_t* out;
  int sign;
  DXG_HD Acc combine(Acc a, Acc b) const {
    if (a.index < 0) return b;
    if (b.index < 0) return a;
    const bool nan_a = a.value != a.value, nan_b = b.value != b.value;
    const Acc& first = a.index < b.index ? a : b;
    if (nan_a || nan_b) return nan_a && nan_b ? first : (nan_a ? a : b);
    if (sign > 0 ? a.value > b.value : a.value < b.value) return a;
    if (sign > 0 ? b.value > a.value : b.value < a.value) return b;
    return first;
  }
  DXG_HD Acc partial(int64_t o, int t, int n) const {
    const T* base = in + layout_offset(outer, 1, o);
    Acc acc;
    acc.value = 0;
    acc.index = -1;
    for (int64_t r = t; r < inner.count; r += n) {
      Acc c;
      c.value = static_cast<C>(Num<T>::load(base[layout_offset(inner, 0, r)]));
      c.index = r;
      acc = combine(acc, c);
    }
    return acc;
  }
  DXG_HD void finish(int64_t o, Acc acc) const { out[layout_offset(outer, 0, o)] = acc.index < 0 ? 0 : acc.index; }
};

// ---- gradients ---------------------------------------------------------------------------------

/// where: one input's gradient over the broadcast shape into a compact f64 buffer (then summed
/// to the input's shape): dy where the condition selects this input, else 0. Operands 0 =
/// buffer, 1 = dy, 2 = cond.
template <class T>
struct WhereGradFn {
  Layout layout;
  double* buffer;
  const T* dy;
  const uint8_t* cond;
  bool take_a;
  DXG_HD void operator()(int64_t i) const {
    int64_t off[kMaxOperands];
    layout_offsets(layout, i, off);
    const bool selected = (cond[off[2]] != 0) == take_a;
    buffer[off[0]] = selected ? static_cast<double>(Num<T>::load(dy[off[1]])) + 0.0 : 0.0;
  }
};

/// clamp (derivative 1 where lo <= x <= hi, else 0) and gelu: dx = dy * f'(x) in f64, rounded
/// once. Operands 0 = dx, 1 = dy, 2 = x.
template <class T>
struct PointwiseGradFn {
  Layout layout;
  T* dx;
  const T* dy;
  const T* x;
  bool is_gelu, tanh_form, has_lo, has_hi;
  double lo, hi;
  DXG_HD void operator()(int64_t i) const {
    int64_t off[kMaxOperands];
    layout_offsets(layout, i, off);
    const double g = static_cast<double>(Num<T>::load(dy[off[1]]));
    const double v = static_cast<double>(Num<T>::load(x[off[2]]));
    double d;
    if (is_gelu) d = gelu_derivative(v, tanh_form);
    else d = (!has_lo || v >= lo) && (!has_hi || v <= hi) ? 1.0 : 0.0;
    store_from_double(&dx[off[0]], dtype_of<T>(), g * d + 0.0);
  }
};

/// dropout: dx = dy * mask / (1 - p) from the saved mask (dy when not training), in f64,
/// rounded once. Operands 0 = dx, 1 = dy, 2 = mask.
template <class T>
struct DropoutGradFn {
  Layout layout;
  T* dx;
  const T* dy;
  const uint8_t* mask;
  double p;
  bool training;
  DXG_HD void operator()(int64_t i) const {
    int64_t off[kMaxOperands];
    layout_offsets(layout, i, off);
    const double g = static_cast<double>(Num<T>::load(dy[off[1]]));
    const double v = !training ? g : (mask[off[2]] != 0 ? g / (1.0 - p) : 0.0);
    store_from_double(&dx[off[0]], dtype_of<T>(), 0.0 + v);
  }
};

/// Gradient of max/min, one thread per input element: dx = 0 + dy * (1 at the group's first
/// extreme element, found beforehand by ArgReduceFn into `best`, else 0), as the reference
/// (so an infinite dy gives NaN off the extreme, as dy * 0 does there). Outer operands: 0 =
/// dy, 1 = x (unused), 2 = dx; inner operands: 0 = x (unused), 1 = dx.
template <class T>
struct ExtremeGradFn {
  Layout outer, inner;
  const T* dy;
  T* dx;
  const int64_t* best;  // per group, compact
  DXG_HD void operator()(int64_t i) const {
    const int64_t o = i / inner.count, r = i % inner.count;
    const double g = static_cast<double>(Num<T>::load(dy[layout_offset(outer, 0, o)]));
    T* p = dx + layout_offset(outer, 2, o) + layout_offset(inner, 1, r);
    store_from_double(p, dtype_of<T>(), 0.0 + g * (r == best[o] ? 1.0 : 0.0));
  }
};

/// Gradient of prod: the product of the others, from prefix and suffix products (exact with
/// zeros), one thread per reduced group in the reference's order. Outer operands: 0 = dy,
/// 1 = x, 2 = dx; inner operands: 0 = x, 1 = dx. `scratch` holds `inner.count` f64 per group.
template <class T>
struct ProdGradFn {
  Layout outer, inner;
  const T* dy;
  const T* x;
  T* dx;
  double* scratch;
  DXG_HD double load_x(const T* base, int64_t r) const {
    return static_cast<double>(Num<T>::load(base[layout_offset(inner, 0, r)]));
  }
  DXG_HD void operator()(int64_t o) const {
    const double g = static_cast<double>(Num<T>::load(dy[layout_offset(outer, 0, o)]));
    const T* xb = x + layout_offset(outer, 1, o);
    T* db = dx + layout_offset(outer, 2, o);
    const int64_t n = inner.count;
    double* suffix = scratch + o * n;  // suffix[r] = product of x[r + 1 ..], multiplied from the end
    double s = 1.0;
    for (int64_t r = n; r-- > 0;) {
      suffix[r] = s;
      s = s * load_x(xb, r);
    }
    double prefix = 1.0;
    for (int64_t r = 0; r < n; ++r) {
      store_from_double(&db[layout_offset(inner, 1, r)], dtype_of<T>(), 0.0 + g * (prefix * suffix[r]));
      prefix *= load_x(xb, r);
    }
  }
};

}  // namespace deepx::gpu

#endif  // DEEPX_GPU_EXTRA_OPS_H_
