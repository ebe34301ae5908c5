// Block-cooperative bodies: reductions (sum, mean, max, min) and softmax. One block computes
// one output element (one row for softmax): each thread folds a strided share of the reduced
// elements (`partial`), then the block combines the partials in a fixed tree over shared
// memory (`tree_step`, between barriers), so results are deterministic run to run. The
// emulator in tests/ runs the same phases thread by thread, in the same order.
#ifndef DEEPX_GPU_REDUCE_H_
#define DEEPX_GPU_REDUCE_H_

#include <math.h>
#include <stdint.h>

#include <type_traits>

#include "deepx/gpu/elementwise.h"
#include "deepx/gpu/indexing.h"
#include "deepx/gpu/numeric.h"

namespace deepx::gpu {

/// Threads per block of the block-cooperative kernels (a power of two: the tree halves it).
constexpr int kReduceThreads = 256;

enum class ReduceOp : uint8_t { Sum, Mean, Max, Min };

/// One step of the shared-memory tree: threads below `stride` fold in their partner.
template <class Acc, class Fn>
DXG_HD void tree_step(Acc* shared, int t, int stride, const Fn& fn) {
  if (t < stride) shared[t] = fn.combine(shared[t], shared[t + stride]);
}

/// Accumulator of a reduction over storage type T: f64 for floats (the reference accumulates
/// in f64; the GPU has the bandwidth to spare), 128-bit integers for integers, so an integer
/// mean is exact before its one division and a sum wraps to i64 only at the end (both
/// compilers support __int128 in device code).
using Int128 = __int128;
template <class T>
struct ReduceAcc {
  using type = double;
};
template <> struct ReduceAcc<int64_t> { using type = Int128; };
template <> struct ReduceAcc<int32_t> { using type = Int128; };
template <> struct ReduceAcc<int16_t> { using type = Int128; };
template <> struct ReduceAcc<int8_t> { using type = Int128; };
template <> struct ReduceAcc<uint8_t> { using type = Int128; };

/// A 128-bit integer to the nearest double, rounding once: the top 64 significant bits with a
/// sticky bit for everything below (64 > 53 + 1, so the sticky bit decides ties correctly),
/// converted, then scaled by a power of two (exact).
DXG_HD double int128_to_double(Int128 v) {
  if (v >= Int128(INT64_MIN) && v <= Int128(INT64_MAX)) return static_cast<double>(static_cast<int64_t>(v));
  const bool negative = v < 0;
  unsigned __int128 u = negative ? static_cast<unsigned __int128>(0) - static_cast<unsigned __int128>(v)
                                 : static_cast<unsigned __int128>(v);
  int shift = 0;
  bool sticky = false;
  while ((u >> 64) != 0) {
    sticky |= (u & 1u) != 0;
    u >>= 1;
    ++shift;
  }
  const uint64_t top = static_cast<uint64_t>(u) | (sticky ? 1u : 0u);
  double d = static_cast<double>(top);
  for (int i = 0; i < shift; ++i) d *= 2.0;
  return negative ? -d : d;
}

template <class T>
struct ReduceFn {
  using Acc = typename ReduceAcc<T>::type;
  static constexpr bool kFloat = !std::is_same_v<Acc, Int128>;

  Layout outer;  // over the output elements: operand 0 = out, 1 = in (kept dimensions)
  Layout inner;  // over the reduced elements: operand 0 = in
  const T* in;
  char* out;
  DType out_type;
  ReduceOp op;

  DXG_HD Acc identity() const {
    switch (op) {
      case ReduceOp::Max:
        if constexpr (kFloat) return -HUGE_VAL; else return Acc(INT64_MIN);
      case ReduceOp::Min:
        if constexpr (kFloat) return HUGE_VAL; else return Acc(INT64_MAX);
      default: return 0;
    }
  }
  DXG_HD Acc combine(Acc a, Acc b) const {
    switch (op) {
      case ReduceOp::Max:
        if constexpr (kFloat) { if (a != a) return a; if (b != b) return b; }
        return a > b ? a : b;
      case ReduceOp::Min:
        if constexpr (kFloat) { if (a != a) return a; if (b != b) return b; }
        return a < b ? a : b;
      default:
        return a + b;  // 128-bit for integers: no overflow below 2^64 elements
    }
  }
  /// Thread t of n folds reduced elements t, t + n, ... of output element o.
  DXG_HD Acc partial(int64_t o, int t, int n) const {
    const T* base = in + layout_offset(outer, 1, o);
    Acc acc = identity();
    for (int64_t r = t; r < inner.count; r += n) {
      acc = combine(acc, static_cast<Acc>(Num<T>::load(base[layout_offset(inner, 0, r)])));
    }
    return acc;
  }
  DXG_HD void finish(int64_t o, Acc acc) const {
    char* p = out + layout_offset(outer, 0, o) * dtype_size(out_type);
    if constexpr (kFloat) {
      const double v = op == ReduceOp::Mean ? acc / static_cast<double>(inner.count) : acc;
      store_from_double(p, out_type, v);
    } else if (op == ReduceOp::Mean) {
      store_from_double(p, out_type, int128_to_double(acc) / static_cast<double>(inner.count));
    } else {
      // Sums wrap to i64 (two's complement: the low 64 bits).
      store_int_wrapping(p, out_type, static_cast<int64_t>(static_cast<uint64_t>(acc)));
    }
  }
};

/// Softmax along one axis: row o has `length` elements at strides in_stride / out_stride from
/// the row's base (outer: operand 0 = out, 1 = in). Max-shifted; a NaN poisons its row.
template <class T>
struct SoftmaxFn {
  using C = typename Num<T>::C;  // f32 for f32/f16/bf16, f64 for f64
  using Acc = C;

  Layout outer;
  int64_t length, in_stride, out_stride;
  const T* in;
  T* out;
  bool summing = false;  // which fold combine() performs: max first, then the sum

  DXG_HD C combine(C a, C b) const {
    if (summing) return a + b;
    if (a != a) return a;
    if (b != b) return b;
    return a > b ? a : b;
  }
  DXG_HD C load(int64_t o, int64_t j) const {
    return Num<T>::load(in[layout_offset(outer, 1, o) + j * in_stride]);
  }
  DXG_HD C partial_max(int64_t o, int t, int n) const {
    C m = -static_cast<C>(HUGE_VAL);
    for (int64_t j = t; j < length; j += n) {
      const C x = load(o, j);
      m = (m != m) ? m : (x != x ? x : (x > m ? x : m));
    }
    return m;
  }
  DXG_HD C partial_sum(int64_t o, int t, int n, C max) const {
    C s = 0;
    for (int64_t j = t; j < length; j += n) s += m_exp(load(o, j) - max);
    return s;
  }
  DXG_HD void write(int64_t o, int t, int n, C max, C sum) const {
    T* row = out + layout_offset(outer, 0, o);
    for (int64_t j = t; j < length; j += n) {
      row[j * out_stride] = Num<T>::store(m_exp(load(o, j) - max) / sum);
    }
  }
};

}  // namespace deepx::gpu

#endif  // DEEPX_GPU_REDUCE_H_
