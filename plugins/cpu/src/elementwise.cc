// Elementwise kernels: dx.add/sub/mul/div (broadcasting), dx.neg/exp/relu (the other
// elementwise ops are in elementwise_math.cc, dx.copy / dx.transpose / dx.fill in movement.cc).
#include <cmath>
#include <cstring>

#include "fast_math.h"
#include "grad.h"
#include "kernels.h"
#include "movement_util.h"
#include "strided.h"

namespace deepx::cpu {
namespace {

// ---- operations (on the compute type C of Num<T>) ---------------------------------------------

struct AddOp {
  template <class C>
  static C apply(C a, C b) {
    if constexpr (std::is_integral_v<C>) return static_cast<C>(WrapT<C>(a) + WrapT<C>(b));
    else return a + b;
  }
};
struct SubOp {
  template <class C>
  static C apply(C a, C b) {
    if constexpr (std::is_integral_v<C>) return static_cast<C>(WrapT<C>(a) - WrapT<C>(b));
    else return a - b;
  }
};
struct MulOp {
  template <class C>
  static C apply(C a, C b) {
    if constexpr (std::is_integral_v<C>) return static_cast<C>(WrapT<C>(a) * WrapT<C>(b));
    else return a * b;
  }
};
struct DivOp {
  template <class C>
  static C apply(C a, C b) {
    if constexpr (std::is_integral_v<C>) {
      // Zero divisors were refused before the loop; the test keeps the loop free of UB anyway.
      if (b == 0) return 0;
      // INT_MIN / -1 overflows: wrap like the other ops (negation in unsigned arithmetic).
      if constexpr (std::is_signed_v<C>) {
        if (b == -1) return static_cast<C>(WrapT<C>(0) - WrapT<C>(a));
      }
      return static_cast<C>(a / b);
    } else {
      return a / b;
    }
  }
};
struct NegOp {
  template <class C>
  static C apply(C a) {
    if constexpr (std::is_integral_v<C>) return static_cast<C>(WrapT<C>(0) - WrapT<C>(a));
    else return -a;
  }
};
struct ExpOp {
  static float apply(float a) { return exp_f32(a); }
  static double apply(double a) { return std::exp(a); }
};
struct ReluOp {
  // NaN propagates; -0 becomes +0.
  template <class C>
  static C apply(C a) {
    return a != a ? a : (a > C(0) ? a : C(0));
  }
};

// Expensive ops go parallel on smaller tensors than memory-bound ones.
template <class Op>
constexpr int64_t work_of() {
  return std::is_same_v<Op, ExpOp> ? 8 : std::is_same_v<Op, DivOp> ? 2 : 1;
}

/// Strides of `v` aligned to an iteration space of rank `rank` under NumPy broadcasting.
void broadcast_strides(const View& v, int rank, int64_t* out) {
  const int lead = rank - v.rank;
  for (int d = 0; d < rank; ++d) {
    if (d < lead) {
      out[d] = 0;
    } else {
      out[d] = v.shape[d - lead] == 1 ? 0 : v.strides[d - lead];
    }
  }
}

void check_broadcast(const View& out, const View& a, const View& b) {
  const int rank = a.rank > b.rank ? a.rank : b.rank;
  bool ok = out.rank == rank;
  for (int d = 0; ok && d < rank; ++d) {
    const int da = d - (rank - a.rank), db = d - (rank - b.rank);
    const int64_t sa = da >= 0 ? a.shape[da] : 1, sb = db >= 0 ? b.shape[db] : 1;
    int64_t want;
    if (sa == sb || sb == 1) want = sa;
    else if (sa == 1) want = sb;
    else fail(DX_SHAPE_MISMATCH, "cpu: shapes " + shape_string(a.shape, a.rank) + " and " +
                                    shape_string(b.shape, b.rank) + " do not broadcast");
    ok = out.shape[d] == want;
  }
  if (!ok) {
    fail(DX_SHAPE_MISMATCH, "cpu: output shape " + shape_string(out.shape, out.rank) +
                                " is not the broadcast of " + shape_string(a.shape, a.rank) +
                                " and " + shape_string(b.shape, b.rank));
  }
}

template <class T>
bool contains_zero(const View& v) {
  StridedLoop<1> loop = loop_over(v);
  const T* p = v.data<T>();
  bool found = false;
  auto row = [&](int64_t n, const int64_t* off, const int64_t* st) {
    const T* x = p + off[0];
    bool any = false;
    for (int64_t i = 0; i < n; ++i) any |= x[i * st[0]] == 0;
    found |= any;
  };
  if (v.count() > 0) run_range(loop, 0, loop.count(), row);
  return found;
}

// ---- binary ---------------------------------------------------------------------------------

template <class T, class Op>
dx_error_t* binary_kernel(const dx_kernel_call_t* call) noexcept {
  return guard(call->host, [&] {
    expect_arity(call, 2, 1);
    const View a = make_view(call->inputs[0], "input 0");
    const View b = make_view(call->inputs[1], "input 1");
    const View out = make_view(call->outputs[0], "output 0");
    constexpr DLDataType dt = dtype_of<T>();
    expect_dtype(a, dt, "input 0");
    expect_dtype(b, dt, "input 1");
    expect_dtype(out, dt, "output 0");
    check_broadcast(out, a, b);
    if (out.count() == 0) return;
    if constexpr (std::is_integral_v<T> && std::is_same_v<Op, DivOp>) {
      if (contains_zero<T>(b)) fail(DX_ARITHMETIC_ERROR, "cpu: integer division by zero");
    }

    using N = Num<T>;
    using C = typename N::C;
    T* const po = out.data<T>();
    const T* const pa = a.data<T>();
    const T* const pb = b.data<T>();
    auto row = [=](int64_t n, const int64_t* off, const int64_t* st) {
      T* o = po + off[0];
      const T* x = pa + off[1];
      const T* y = pb + off[2];
      if (st[0] == 1 && st[1] == 1 && st[2] == 1) {
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) o[i] = N::store(Op::apply(N::load(x[i]), N::load(y[i])));
      } else if (st[0] == 1 && st[1] == 1 && st[2] == 0) {
        const C yv = N::load(*y);
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) o[i] = N::store(Op::apply(N::load(x[i]), yv));
      } else if (st[0] == 1 && st[1] == 0 && st[2] == 1) {
        const C xv = N::load(*x);
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) o[i] = N::store(Op::apply(xv, N::load(y[i])));
      } else {
        const int64_t so = st[0], sx = st[1], sy = st[2];
        for (int64_t i = 0; i < n; ++i) {
          o[i * so] = N::store(Op::apply(N::load(x[i * sx]), N::load(y[i * sy])));
        }
      }
    };
    // Fast path: dense operands, each either full-size or a single (broadcast) element.
    const int64_t total = out.count(), na = a.count(), nb = b.count();
    if ((na == total || na == 1) && (nb == total || nb == 1) && out.compact() && a.compact() &&
        b.compact()) {
      const int64_t step_a = na == total ? 1 : 0, step_b = nb == total ? 1 : 0;
      for_each_range(total, [&row, step_a, step_b](int64_t begin, int64_t end) {
        const int64_t offsets[3] = {begin, begin * step_a, begin * step_b};
        const int64_t strides[3] = {1, step_a, step_b};
        row(end - begin, offsets, strides);
      }, work_of<Op>());
      return;
    }

    StridedLoop<3> loop;
    loop.rank = out.rank;
    for (int d = 0; d < out.rank; ++d) {
      loop.shape[d] = out.shape[d];
      loop.strides[0][d] = out.strides[d];
    }
    broadcast_strides(a, out.rank, loop.strides[1]);
    broadcast_strides(b, out.rank, loop.strides[2]);
    loop.simplify();
    for_each_row(loop, row, work_of<Op>());
  });
}

// ---- unary ----------------------------------------------------------------------------------

template <class T, class Op>
dx_error_t* unary_kernel(const dx_kernel_call_t* call) noexcept {
  return guard(call->host, [&] {
    expect_arity(call, 1, 1);
    const View in = make_view(call->inputs[0], "input 0");
    const View out = make_view(call->outputs[0], "output 0");
    constexpr DLDataType dt = dtype_of<T>();
    expect_dtype(in, dt, "input 0");
    expect_dtype(out, dt, "output 0");
    check_same_shape(out, in);
    if (out.count() == 0) return;

    using N = Num<T>;
    T* const po = out.data<T>();
    const T* const pi = in.data<T>();
    auto row = [=](int64_t n, const int64_t* off, const int64_t* st) {
      T* o = po + off[0];
      const T* x = pi + off[1];
      if (st[0] == 1 && st[1] == 1) {
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) o[i] = N::store(Op::apply(N::load(x[i])));
      } else {
        const int64_t so = st[0], sx = st[1];
        for (int64_t i = 0; i < n; ++i) o[i * so] = N::store(Op::apply(N::load(x[i * sx])));
      }
    };
    if (out.compact() && in.compact()) {
      for_each_range(out.count(), [&row](int64_t begin, int64_t end) {
        const int64_t offsets[2] = {begin, begin};
        const int64_t strides[2] = {1, 1};
        row(end - begin, offsets, strides);
      }, work_of<Op>());
      return;
    }
    StridedLoop<2> loop = loop_over(out, in);
    for_each_row(loop, row, work_of<Op>());
  });
}

// ---- registration -----------------------------------------------------------------------------

constexpr dx_kernel_flags_t kElementwiseFlags =
    DX_KERNEL_FLAG_DETERMINISTIC | DX_KERNEL_FLAG_INPLACE;

template <class T>
void add_arithmetic(Registrar& r) {
  constexpr DLDataType t = dtype_of<T>();
  const ElementwiseBackward g = elementwise_backward<T>();
  r.add("dx.add", 2, 1, {t, t, t}, &binary_kernel<T, AddOp>, kElementwiseFlags, g.add);
  r.add("dx.sub", 2, 1, {t, t, t}, &binary_kernel<T, SubOp>, kElementwiseFlags, g.sub);
  r.add("dx.mul", 2, 1, {t, t, t}, &binary_kernel<T, MulOp>, kElementwiseFlags, g.mul);
  r.add("dx.div", 2, 1, {t, t, t}, &binary_kernel<T, DivOp>, kElementwiseFlags, g.div);
  r.add("dx.neg", 1, 1, {t, t}, &unary_kernel<T, NegOp>, kElementwiseFlags, g.neg);
}

template <class T>
void add_float_unary(Registrar& r) {
  constexpr DLDataType t = dtype_of<T>();
  const ElementwiseBackward g = elementwise_backward<T>();
  r.add("dx.exp", 1, 1, {t, t}, &unary_kernel<T, ExpOp>, kElementwiseFlags, g.exp);
  r.add("dx.relu", 1, 1, {t, t}, &unary_kernel<T, ReluOp>, kElementwiseFlags, g.relu);
}

}  // namespace

void register_elementwise_kernels(Registrar& r) {
  add_arithmetic<double>(r);
  add_arithmetic<float>(r);
  add_arithmetic<Half>(r);
  add_arithmetic<BFloat16>(r);
  add_arithmetic<int64_t>(r);
  add_arithmetic<int32_t>(r);
  add_arithmetic<int16_t>(r);
  add_arithmetic<int8_t>(r);
  add_arithmetic<uint8_t>(r);

  add_float_unary<double>(r);
  add_float_unary<float>(r);
  add_float_unary<Half>(r);
  add_float_unary<BFloat16>(r);
}

}  // namespace deepx::cpu
