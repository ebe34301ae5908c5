// Reductions (dx.sum, dx.mean, dx.prod, dx.max, dx.min, dx.argmax, dx.argmin) and dx.softmax.
//
// Determinism: every reduction splits its reduced elements into fixed blocks of kBlock elements
// (in the input's row-major order over the reduced axes), reduces each block in a fixed order,
// and combines the block results in order. How the blocks are spread over threads never
// changes the arithmetic, so results are bit-identical for any thread count.
#include <omp.h>

#include <cmath>
#include <vector>

#include "fast_math.h"
#include "grad.h"
#include "kernels.h"
#include "nn_util.h"
#include "strided.h"

namespace deepx::cpu {
namespace {

constexpr int64_t kBlock = int64_t{1} << 14;

// ---- accumulation policies --------------------------------------------------------------------

/// Sum: floats accumulate in f64 (f32 inputs in short f32 chunks first, so the hot loop stays
/// single precision wide SIMD); integers in u64, i.e. i64 with wrap.
template <class T>
struct SumPolicy {
  using Acc = std::conditional_t<std::is_integral_v<T>, uint64_t, double>;
  using Out = std::conditional_t<std::is_integral_v<T>, int64_t, T>;
  static constexpr bool kNeedsElements = false;
  static Acc identity() { return Acc(0); }
  static Acc combine(Acc a, Acc b) { return a + b; }

  static Acc run(const T* x, int64_t n, int64_t stride) {
    if constexpr (std::is_integral_v<T>) {
      uint64_t s = 0;
      if (stride == 1) {
#pragma omp simd reduction(+ : s)
        for (int64_t i = 0; i < n; ++i) s += static_cast<uint64_t>(static_cast<int64_t>(x[i]));
      } else {
        for (int64_t i = 0; i < n; ++i) {
          s += static_cast<uint64_t>(static_cast<int64_t>(x[i * stride]));
        }
      }
      return s;
    } else if constexpr (std::is_same_v<T, double>) {
      if (stride != 1) {
        double s = 0;
        for (int64_t i = 0; i < n; ++i) s += x[i * stride];
        return s;
      }
      // Eight independent partial sums hide the add latency; fixed order, so deterministic.
      return nn::blocked_sum<double>(n, [x](int64_t i) { return x[i]; });
    } else {
      // f32 / f16 / bf16: 16 f32 lanes, each adding at most 16 terms per 256-element chunk before
      // the chunk is added into 16 f64 lanes (nn::blocked_sum, nn_util.h). Accurate (f32 error
      // over 16 terms only) and as wide as the machine's SIMD.
      if (stride != 1) {
        double total = 0;
        int64_t i = 0;
        for (; i + 64 <= n; i += 64) {
          float s = 0;
          for (int64_t j = 0; j < 64; ++j) s += Num<T>::load(x[(i + j) * stride]);
          total += s;
        }
        for (; i < n; ++i) total += Num<T>::load(x[i * stride]);
        return total;
      }
      return nn::blocked_sum<float>(n, [x](int64_t i) { return Num<T>::load(x[i]); });
    }
  }

  static Out finish(Acc a, int64_t) {
    if constexpr (std::is_integral_v<T>) return static_cast<int64_t>(a);
    else if constexpr (std::is_same_v<T, Half>) return Half{double_to_half(a)};
    else if constexpr (std::is_same_v<T, BFloat16>) return BFloat16{double_to_bfloat16(a)};
    else return static_cast<T>(a);
  }
};

/// Max (IsMax) or min: compares in the compute type; a NaN anywhere makes the result NaN.
template <class T, bool IsMax = true>
struct ExtremePolicy {
  using C = typename Num<T>::C;
  struct Acc {
    C value;
    bool nan;
  };
  using Out = T;
  static constexpr bool kNeedsElements = true;
  static C better(C a, C b) {
    if constexpr (IsMax) return b > a ? b : a;
    else return b < a ? b : a;
  }
  static Acc identity() {
    if constexpr (std::is_floating_point_v<C>) {
      return {IsMax ? -std::numeric_limits<C>::infinity() : std::numeric_limits<C>::infinity(), false};
    } else {
      return {IsMax ? std::numeric_limits<C>::lowest() : std::numeric_limits<C>::max(), false};
    }
  }
  static Acc combine(Acc a, Acc b) { return {better(a.value, b.value), a.nan || b.nan}; }
  static Acc run(const T* x, int64_t n, int64_t stride) {
    const C start = identity().value;
    C m = start;
    int nan = 0;
    int64_t i = 0;
    if (stride == 1) {
      // Independent lanes hide the compare latency; max/min is order-free, so any split is exact.
      constexpr int kLanes = 16;
      C lanes[kLanes];
      int nan_lanes[kLanes] = {};
      for (int l = 0; l < kLanes; ++l) lanes[l] = start;
      for (; i + kLanes <= n; i += kLanes) {
#pragma omp simd
        for (int l = 0; l < kLanes; ++l) {
          const C v = Num<T>::load(x[i + l]);
          if constexpr (IsMax) lanes[l] = v > lanes[l] ? v : lanes[l];
          else lanes[l] = v < lanes[l] ? v : lanes[l];
          nan_lanes[l] |= (v != v);
        }
      }
      for (int l = 0; l < kLanes; ++l) {
        m = better(m, lanes[l]);
        nan |= nan_lanes[l];
      }
    }
    for (; i < n; ++i) {
      const C v = Num<T>::load(x[i * stride]);
      m = better(m, v);
      nan |= (v != v);
    }
    return {m, nan != 0};
  }
  static Out finish(Acc a, int64_t) {
    if constexpr (std::is_floating_point_v<C>) {
      if (a.nan) return Num<T>::store(std::numeric_limits<C>::quiet_NaN());
    }
    return Num<T>::store(a.value);
  }
};
template <class T>
using MaxPolicy = ExtremePolicy<T, true>;
template <class T>
using MinPolicy = ExtremePolicy<T, false>;

/// Product: floats in f64 rounded once; integers in u64 (i64 with wrap).
template <class T>
struct ProdPolicy {
  using Acc = std::conditional_t<std::is_integral_v<T>, uint64_t, double>;
  using Out = std::conditional_t<std::is_integral_v<T>, int64_t, T>;
  static constexpr bool kNeedsElements = false;
  static Acc identity() { return Acc(1); }
  static Acc combine(Acc a, Acc b) { return a * b; }
  static Acc run(const T* x, int64_t n, int64_t stride) {
    Acc p = 1;
    for (int64_t i = 0; i < n; ++i) {
      if constexpr (std::is_integral_v<T>) p *= static_cast<uint64_t>(static_cast<int64_t>(x[i * stride]));
      else p *= static_cast<double>(Num<T>::load(x[i * stride]));
    }
    return p;
  }
  static Out finish(Acc a, int64_t n) { return SumPolicy<T>::finish(a, n); }
};

/// Mean: floats sum as dx.sum (f64) and divide once; integers sum exactly in 128 bits and give
/// f64 (as the reference). The mean of nothing is 0 / 0 = NaN.
template <class T>
struct MeanPolicy {
  __extension__ typedef __int128 Int128;
  using Acc = std::conditional_t<std::is_integral_v<T>, Int128, double>;
  using Out = std::conditional_t<std::is_integral_v<T>, double, T>;
  static constexpr bool kNeedsElements = false;
  static Acc identity() { return Acc(0); }
  static Acc combine(Acc a, Acc b) { return a + b; }
  static Acc run(const T* x, int64_t n, int64_t stride) {
    if constexpr (std::is_integral_v<T>) {
      Int128 s = 0;
      for (int64_t i = 0; i < n; ++i) s += x[i * stride];
      return s;
    } else {
      return SumPolicy<T>::run(x, n, stride);
    }
  }
  static Out finish(Acc a, int64_t n) {
    const double mean = static_cast<double>(a) / static_cast<double>(n);
    if constexpr (std::is_integral_v<T>) return mean;
    else return SumPolicy<T>::finish(mean, n);
  }
};

// ---- the plan: kept dims outside, reduced dims inside -----------------------------------------

struct ReducePlan {
  StridedLoop<2> outer;  // operand 0: output strides, operand 1: input strides (kept dims)
  StridedLoop<1> inner;  // input strides over the reduced dims
  int64_t out_count = 0;
  int64_t inner_count = 0;
};

/// Marks the axes of `in` a reduction covers. `arg`: dx.argmax/argmin, whose slot 0 is one i64
/// `axis` (unset = flattened; a rank-0 input accepts axis 0 and -1, as PyTorch).
void reduced_axes(const dx_kernel_call_t* call, const View& in, bool arg, bool* reduced) {
  for (int d = 0; d < in.rank; ++d) reduced[d] = false;
  const dx_attr_t* axes = attr_at(call, DX_REDUCE_AXES);
  if (arg && axes != nullptr) {
    if (axes->type != DX_ATTR_I64) fail(DX_INVALID_ARGUMENT, "cpu: attribute 'axis' must be an i64");
    if (in.rank == 0) {
      if (axes->value.i64 != 0 && axes->value.i64 != -1) {
        fail(DX_OUT_OF_RANGE, "cpu: axis " + std::to_string(axes->value.i64) + " is out of range for rank 0");
      }
      axes = nullptr;
    }
  }
  int64_t num_axes = 0;
  const int64_t* list = nullptr;
  if (axes != nullptr) {
    if (axes->type == DX_ATTR_I64_ARRAY) {
      num_axes = axes->count;
      list = axes->value.i64s;
      if (num_axes > 0 && list == nullptr) fail(DX_INVALID_ARGUMENT, "cpu: axes array is null");
    } else if (axes->type == DX_ATTR_I64) {
      num_axes = 1;
      list = &axes->value.i64;
    } else {
      fail(DX_INVALID_ARGUMENT, "cpu: axes must be an i64 array");
    }
  }
  if (num_axes == 0) {
    for (int d = 0; d < in.rank; ++d) reduced[d] = true;
  } else {
    for (int64_t k = 0; k < num_axes; ++k) {
      int64_t axis = list[k];
      if (axis < 0) axis += in.rank;
      if (axis < 0 || axis >= in.rank) {
        fail(DX_OUT_OF_RANGE, "cpu: axis " + std::to_string(list[k]) + " is out of range for rank " +
                                  std::to_string(in.rank));
      }
      if (reduced[axis]) fail(DX_OUT_OF_RANGE, "cpu: axis " + std::to_string(list[k]) + " repeats");
      reduced[axis] = true;
    }
  }
}

/// The plan of a reduction of `in` into `out` (validated against the attributes).
ReducePlan plan_reduction(const dx_kernel_call_t* call, const View& in, const View& out,
                          bool arg = false) {
  bool reduced[kMaxRank];
  reduced_axes(call, in, arg, reduced);
  const bool keepdims = attr_bool(call, DX_REDUCE_KEEPDIMS, "keepdims", false);

  int64_t expected[kMaxRank];
  int expected_rank = 0;
  for (int d = 0; d < in.rank; ++d) {
    if (!reduced[d]) expected[expected_rank++] = in.shape[d];
    else if (keepdims) expected[expected_rank++] = 1;
  }
  bool ok = out.rank == expected_rank;
  for (int d = 0; ok && d < expected_rank; ++d) ok = out.shape[d] == expected[d];
  if (!ok) {
    fail(DX_SHAPE_MISMATCH, "cpu: output shape " + shape_string(out.shape, out.rank) +
                                " does not match the reduction's " +
                                shape_string(expected, expected_rank));
  }

  ReducePlan plan;
  int out_dim = 0;
  for (int d = 0; d < in.rank; ++d) {
    if (reduced[d]) {
      plan.inner.shape[plan.inner.rank] = in.shape[d];
      plan.inner.strides[0][plan.inner.rank] = in.strides[d];
      ++plan.inner.rank;
      if (keepdims) ++out_dim;
    } else {
      plan.outer.shape[plan.outer.rank] = in.shape[d];
      plan.outer.strides[0][plan.outer.rank] = out.strides[out_dim];
      plan.outer.strides[1][plan.outer.rank] = in.strides[d];
      ++plan.outer.rank;
      ++out_dim;
    }
  }
  plan.out_count = plan.outer.count();
  plan.inner_count = plan.inner.count();
  plan.outer.simplify();
  plan.inner.simplify();
  return plan;
}

/// Reduces block `block` (kBlock elements of the reduced sub-tensor starting at `x`).
template <class T, class Policy>
typename Policy::Acc reduce_block(const ReducePlan& plan, const T* x, int64_t block) {
  typename Policy::Acc acc = Policy::identity();
  const int64_t begin = block * kBlock;
  const int64_t end = std::min(plan.inner_count, begin + kBlock);
  auto row = [&](int64_t n, const int64_t* off, const int64_t* st) {
    acc = Policy::combine(acc, Policy::run(x + off[0], n, st[0]));
  };
  run_range(plan.inner, begin, end, row);
  return acc;
}

template <class T, class Policy>
typename Policy::Acc reduce_all_blocks(const ReducePlan& plan, const T* x) {
  const int64_t blocks = (plan.inner_count + kBlock - 1) / kBlock;
  typename Policy::Acc acc = Policy::identity();
  for (int64_t b = 0; b < blocks; ++b) acc = Policy::combine(acc, reduce_block<T, Policy>(plan, x, b));
  return acc;
}

template <class T, class Policy>
dx_error_t* reduce_kernel(const dx_kernel_call_t* call) noexcept {
  using Out = typename Policy::Out;
  using Acc = typename Policy::Acc;
  return guard(call->host, [&] {
    expect_arity(call, 1, 1);
    const View in = make_view(call->inputs[0], "input 0");
    const View out = make_view(call->outputs[0], "output 0");
    expect_dtype(in, dtype_of<T>(), "input 0");
    expect_dtype(out, dtype_of<Out>(), "output 0");
    const ReducePlan plan = plan_reduction(call, in, out);
    if constexpr (Policy::kNeedsElements) {
      // As the reference: an empty reduced set is an error even when the output is empty.
      if (plan.inner_count == 0) fail(DX_INVALID_ARGUMENT, "cpu: max/min of an empty set");
    }
    if (plan.out_count == 0) return;
    const T* const px = in.data<T>();
    Out* const py = out.data<Out>();
    const int threads = available_threads();
    const int64_t blocks = (plan.inner_count + kBlock - 1) / kBlock;

    if (threads > 1 && plan.out_count < 4 * threads && blocks > 1 &&
        plan.out_count * plan.inner_count >= kParallelThreshold) {
      // Few outputs, long reductions: spread (output, block) pairs over the threads.
      std::vector<int64_t> out_offsets, in_offsets;
      out_offsets.reserve(plan.out_count);
      in_offsets.reserve(plan.out_count);
      auto collect = [&](int64_t n, const int64_t* off, const int64_t* st) {
        for (int64_t j = 0; j < n; ++j) {
          out_offsets.push_back(off[0] + j * st[0]);
          in_offsets.push_back(off[1] + j * st[1]);
        }
      };
      run_range(plan.outer, 0, plan.out_count, collect);
      std::vector<Acc> partial(static_cast<size_t>(plan.out_count * blocks));
      const int64_t tasks = plan.out_count * blocks;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
      for (int64_t t = 0; t < tasks; ++t) {
        const int64_t o = t / blocks, b = t % blocks;
        partial[t] = reduce_block<T, Policy>(plan, px + in_offsets[o], b);
      }
      for (int64_t o = 0; o < plan.out_count; ++o) {
        Acc acc = Policy::identity();
        for (int64_t b = 0; b < blocks; ++b) acc = Policy::combine(acc, partial[o * blocks + b]);
        py[out_offsets[o]] = Policy::finish(acc, plan.inner_count);
      }
      return;
    }
    auto row = [&plan, px, py](int64_t n, const int64_t* off, const int64_t* st) {
      for (int64_t j = 0; j < n; ++j) {
        py[off[0] + j * st[0]] =
            Policy::finish(reduce_all_blocks<T, Policy>(plan, px + off[1] + j * st[1]),
                           plan.inner_count);
      }
    };
    for_each_row(plan.outer, row, plan.inner_count > 0 ? plan.inner_count : 1);
  });
}

// ---- argmax / argmin ---------------------------------------------------------------------------

/// Index (row-major over the reduced dims) of the first maximum (IsMax) or minimum; the first
/// NaN wins over everything, as the reference (and PyTorch).
template <class T, bool IsMax>
dx_error_t* arg_kernel(const dx_kernel_call_t* call) noexcept {
  return guard(call->host, [&] {
    expect_arity(call, 1, 1);
    const View in = make_view(call->inputs[0], "input 0");
    const View out = make_view(call->outputs[0], "output 0");
    expect_dtype(in, dtype_of<T>(), "input 0");
    expect_dtype(out, dtype_of<int64_t>(), "output 0");
    const ReducePlan plan = plan_reduction(call, in, out, /*arg=*/true);
    if (plan.inner_count == 0) fail(DX_INVALID_ARGUMENT, "cpu: argmax/argmin of an empty set");
    if (plan.out_count == 0) return;
    using C = typename Num<T>::C;
    const T* const px = in.data<T>();
    int64_t* const py = out.data<int64_t>();
    auto one = [&plan](const T* x) {
      C best{};
      int64_t best_at = -1, position = 0;
      bool found_nan = false;
      auto row = [&](int64_t n, const int64_t* off, const int64_t* st) {
        if (found_nan) return;
        const T* p = x + off[0];
        const int64_t s = st[0];
        for (int64_t i = 0; i < n; ++i) {
          const C v = Num<T>::load(p[i * s]);
          if constexpr (std::is_floating_point_v<C>) {
            if (v != v) {
              best_at = position + i;
              found_nan = true;
              return;
            }
          }
          if (best_at < 0 || (IsMax ? v > best : v < best)) {
            best = v;
            best_at = position + i;
          }
        }
        position += n;
      };
      run_range(plan.inner, 0, plan.inner_count, row);
      return best_at;
    };
    auto row = [&](int64_t n, const int64_t* off, const int64_t* st) {
      for (int64_t j = 0; j < n; ++j) py[off[0] + j * st[0]] = one(px + off[1] + j * st[1]);
    };
    for_each_row(plan.outer, row, plan.inner_count);
  });
}

// ---- softmax ------------------------------------------------------------------------------------

// Row kernels: one vectorised pass for the max (nn::line_max), one fused pass that stores
// e = exp(x - max) and sums it (f32: exp_nonpositive_f32 and 16-lane f32 sums per 256-element
// chunk added into f64; f64: exp_f64), one scale pass by the f32/f64 inverse of the sum.
// Unit-stride f32/f64 lines run in place on the tensors; f16/bf16 and strided lines go through
// a per-thread compute-type buffer. A NaN anywhere, or an infinite max (an all -Inf line, or
// +Inf whose exp(Inf - Inf) is NaN), makes the whole line NaN, as the reference.
// `next` streams the next line into L2 during the exp pass (nn::exp_shifted_store).
template <class T>
void softmax_line(const T* x, int64_t sx, T* y, int64_t sy, int64_t length, typename Num<T>::C* buffer,
                  nn::LinePrefetcher& next) {
  using C = typename Num<T>::C;
  constexpr bool kNative = std::is_same_v<T, C>;
  const C* xc = reinterpret_cast<const C*>(x);  // used only when T is C and unit-stride
  if (!kNative || sx != 1) {
    nn::load_run(x, sx, length, buffer);
    xc = buffer;
  }
  C* e = (kNative && sy == 1) ? reinterpret_cast<C*>(y) : buffer;  // e may overwrite xc: same index
  bool nan = false;
  const C m = nn::line_max(xc, length, nan);
  if (nan || !(m > -std::numeric_limits<C>::infinity() && m < std::numeric_limits<C>::infinity())) {
    for (int64_t i = 0; i < length; ++i) y[i * sy] = Num<T>::store(std::numeric_limits<C>::quiet_NaN());
    return;
  }
  const double sum = nn::exp_shifted_store(xc, m, e, length, next);
  const C inverse = static_cast<C>(1.0 / sum);
  if (static_cast<void*>(e) == static_cast<void*>(y)) {
#pragma omp simd
    for (int64_t i = 0; i < length; ++i) e[i] = e[i] * inverse;
  } else if (sy == 1) {
#pragma omp simd
    for (int64_t i = 0; i < length; ++i) y[i] = Num<T>::store(e[i] * inverse);
  } else {
    for (int64_t i = 0; i < length; ++i) y[i * sy] = Num<T>::store(e[i] * inverse);
  }
}

template <class T>
dx_error_t* softmax_kernel(const dx_kernel_call_t* call) noexcept {
  return guard(call->host, [&] {
    const std::pair<View, View> views = unary_views<T, T>(call);
    const View& out = views.first;
    const View& in = views.second;
    const int64_t axis = nn::softmax_axis(call, in.rank, "softmax");
    if (in.count() == 0) return;
    int64_t length = 1, sx = 0, sy = 0;
    StridedLoop<2> outer;
    for (int d = 0; d < in.rank; ++d) {
      if (d == axis) {
        length = in.shape[d];
        sx = in.strides[d];
        sy = out.strides[d];
        continue;
      }
      outer.shape[outer.rank] = in.shape[d];
      outer.strides[0][outer.rank] = out.strides[d];
      outer.strides[1][outer.rank] = in.strides[d];
      ++outer.rank;
    }
    outer.simplify();
    const T* const px = in.data<T>();
    T* const py = out.data<T>();
    using C = typename Num<T>::C;
    const int slots = available_threads();
    std::vector<C> scratch(static_cast<size_t>(slots) * static_cast<size_t>(length));
    auto row = [&](int64_t n, const int64_t* off, const int64_t* st) {
      C* buffer = scratch.data() + static_cast<size_t>(slots == 1 ? 0 : omp_get_thread_num()) * length;
      for (int64_t j = 0; j < n; ++j) {
        const T* line = px + off[1] + j * st[1];
        nn::LinePrefetcher next = nn::next_line(line, st[1], j + 1 < n, sx == 1, length);
        softmax_line<T>(line, sx, py + off[0] + j * st[0], sy, length, buffer, next);
      }
    };
    for_each_row(outer, row, length * 8);
  });
}

// ---- backward ---------------------------------------------------------------------------------
// (dy, x, y) -> dx with the reference's semantics (reference-kernels/src/reduce.cc):
// contributions dy * w evaluated in f64 and rounded once into dx.

enum class ReduceGrad { kSum, kMean, kProd, kMax, kMin };

/// dx[group member k] = dy[group] * w_k: w = 1 (sum), 1 / n (mean), the product of the other
/// members from prefix and suffix products (prod, exact with zeros), or 1 for the first extreme
/// member (the first NaN if any) and 0 for the others (max, min).
template <class T, ReduceGrad Kind>
dx_error_t* reduce_backward_kernel(const dx_kernel_call_t* call) noexcept {
  return guard(call->host, [&] {
    constexpr DLDataType t = dtype_of<T>();
    const auto [dy, x, y] = backward_tensors<1>(call, t);
    plan_reduction(call, x, dy);  // validates the attributes and dy's shape
    check_same_shape(y, dy);
    const std::optional<View> dx = grad_view(call, 0, t, x);
    if (!dx) return;
    bool reduced[kMaxRank];
    reduced_axes(call, x, false, reduced);
    const bool keepdims = attr_bool(call, DX_REDUCE_KEEPDIMS, "keepdims", false);
    // dy seen at x's rank: stride 0 along the reduced axes.
    View dy_aligned = x;
    dy_aligned.base = dy.base;
    int64_t group = 1;
    for (int d = 0, out_dim = 0; d < x.rank; ++d) {
      if (reduced[d]) {
        dy_aligned.strides[d] = 0;
        group *= x.shape[d];
        if (keepdims) ++out_dim;
      } else {
        dy_aligned.strides[d] = dy.strides[out_dim++];
      }
    }

    if constexpr (Kind == ReduceGrad::kSum || Kind == ReduceGrad::kMean) {
      GradTarget target(dx, {&dy_aligned}, /*exact_alias_ok=*/true);
      const double w = Kind == ReduceGrad::kSum ? 1.0 : 1.0 / static_cast<double>(group);
      write_gradient<T, T>(target.view(), x, {&dy_aligned}, [w](T g) { return to_f64(g) * w; });
      target.finish();
    } else {
      // Group by group: every member of a group is read before any of its gradients is written,
      // so dx may alias x exactly.
      GradTarget target(dx, {&dy_aligned, &x}, /*exact_alias_ok=*/true);
      const View& out = target.view();
      StridedLoop<3> outer;  // dy, x, dx over the kept axes
      StridedLoop<2> inner;  // x, dx over the reduced axes
      for (int d = 0; d < x.rank; ++d) {
        if (reduced[d]) {
          inner.shape[inner.rank] = x.shape[d];
          inner.strides[0][inner.rank] = x.strides[d];
          inner.strides[1][inner.rank] = out.strides[d];
          ++inner.rank;
        } else {
          outer.shape[outer.rank] = x.shape[d];
          outer.strides[0][outer.rank] = dy_aligned.strides[d];
          outer.strides[1][outer.rank] = x.strides[d];
          outer.strides[2][outer.rank] = out.strides[d];
          ++outer.rank;
        }
      }
      outer.simplify();
      inner.simplify();
      const int64_t members = inner.count();
      if (outer.count() == 0 || members == 0) return;
      const int slots = available_threads();
      // Prod: per thread, the group's values and their suffix products.
      std::vector<double> scratch(Kind == ReduceGrad::kProd ? static_cast<size_t>(slots) * 2 * (members + 1) : 0);
      const T* const px = x.data<const T>();
      const T* const pdy = dy.data<const T>();
      T* const pdx = out.data<T>();
      auto one_group = [&](const T* gx, T* gdx, double g, double* values, double* suffix) {
        if constexpr (Kind == ReduceGrad::kProd) {
          int64_t k = 0;
          auto collect = [&](int64_t n, const int64_t* off, const int64_t* st) {
            for (int64_t i = 0; i < n; ++i) values[k++] = to_f64(gx[off[0] + i * st[0]]);
          };
          run_range(inner, 0, members, collect);
          suffix[members] = 1.0;
          for (int64_t j = members; j-- > 0;) suffix[j] = suffix[j + 1] * values[j];
          double prefix = 1.0;
          k = 0;
          auto write = [&](int64_t n, const int64_t* off, const int64_t* st) {
            for (int64_t i = 0; i < n; ++i, ++k) {
              gdx[off[1] + i * st[1]] = from_f64<T>(0.0 + g * (prefix * suffix[k + 1]));
              prefix *= values[k];
            }
          };
          run_range(inner, 0, members, write);
        } else {
          constexpr bool kMax = Kind == ReduceGrad::kMax;
          int64_t position = 0, best_at = 0;
          double best = 0;
          bool done = false;
          auto find = [&](int64_t n, const int64_t* off, const int64_t* st) {
            for (int64_t i = 0; i < n && !done; ++i, ++position) {
              const double v = to_f64(gx[off[0] + i * st[0]]);
              if (position == 0 || v != v || (kMax ? v > best : v < best)) {
                best = v;
                best_at = position;
                done = v != v;
              }
            }
          };
          run_range(inner, 0, members, find);
          const T zero = from_f64<T>(0.0 + g * 0.0);
          int64_t k = 0;
          auto write = [&](int64_t n, const int64_t* off, const int64_t* st) {
            for (int64_t i = 0; i < n; ++i, ++k) gdx[off[1] + i * st[1]] = zero;
            if (best_at >= k - n && best_at < k) {
              gdx[off[1] + (best_at - (k - n)) * st[1]] = from_f64<T>(0.0 + g * 1.0);
            }
          };
          run_range(inner, 0, members, write);
        }
      };
      auto row = [&](int64_t n, const int64_t* off, const int64_t* st) {
        const int slot = slots == 1 ? 0 : omp_get_thread_num();
        double* values = scratch.empty() ? nullptr : scratch.data() + static_cast<size_t>(slot) * 2 * (members + 1);
        double* suffix = values == nullptr ? nullptr : values + members + 1;
        for (int64_t j = 0; j < n; ++j) {
          one_group(px + off[1] + j * st[1], pdx + off[2] + j * st[2],
                    to_f64(pdy[off[0] + j * st[0]]), values, suffix);
        }
      };
      for_each_row(outer, row, members * 2);
      target.finish();
    }
  });
}

/// dx = s * (dy - sum(dy * s)) along the axis, with s the softmax recomputed in f64 from x (not
/// the rounded y), as the reference; a NaN in a line makes its gradient NaN.
template <class T>
dx_error_t* softmax_backward_kernel(const dx_kernel_call_t* call) noexcept {
  return guard(call->host, [&] {
    constexpr DLDataType t = dtype_of<T>();
    const auto [dy, x, y] = backward_tensors<1>(call, t);
    check_same_shape(dy, x);
    check_same_shape(y, x);
    const int64_t axis = nn::softmax_axis(call, x.rank, "softmax");
    const std::optional<View> dx = grad_view(call, 0, t, x);
    if (!dx) return;
    // A line is read completely before its gradient is written: dx may alias dy or x exactly.
    GradTarget target(dx, {&dy, &x}, /*exact_alias_ok=*/true);
    const View& out = target.view();
    if (x.rank == 0) {
      *out.data<T>() = from_f64<T>(0.0);  // softmax of one element is constant 1
      target.finish();
      return;
    }
    if (x.count() == 0) return;
    const int64_t length = x.shape[axis];
    const int64_t sdy = dy.strides[axis], sx = x.strides[axis], sdx = out.strides[axis];
    StridedLoop<3> outer;  // dy, x, dx
    for (int d = 0; d < x.rank; ++d) {
      if (d == axis) continue;
      outer.shape[outer.rank] = x.shape[d];
      outer.strides[0][outer.rank] = dy.strides[d];
      outer.strides[1][outer.rank] = x.strides[d];
      outer.strides[2][outer.rank] = out.strides[d];
      ++outer.rank;
    }
    outer.simplify();
    using C = typename Num<T>::C;
    constexpr bool kNative = std::is_same_v<T, C>;
    const int slots = available_threads();
    std::vector<C> scratch(static_cast<size_t>(slots) * 3 * static_cast<size_t>(length));
    const T* const px = x.data<const T>();
    const T* const pdy = dy.data<const T>();
    T* const pdx = out.data<T>();
    // Per line: max, then e = exp(x - max) into scratch with sum(e) and sum(dy e) in one pass,
    // then dx = (e / sum) (dy - sum(dy e) / sum), in the compute type (f32 for f32/f16/bf16:
    // the error is a few f32 ulps of s |dy|, far inside the normwise tolerance). e goes to
    // scratch because dx may alias dy. The exp pass (compute-bound on a line in cache) streams
    // the next line's x and dy in, the dx pass the next line's dx lines for writing
    // (nn::LinePrefetcher: the hardware prefetchers stop at 4 KiB pages).
    auto line = [&](const T* lx, const T* ldy, T* ldx, C* buffer, nn::LinePrefetcher& next_x,
                    nn::LinePrefetcher& next_g, nn::LinePrefetcher& next_d) {
      const C* xc = reinterpret_cast<const C*>(lx);  // used only when T is C and unit-stride
      if (!kNative || sx != 1) {
        nn::load_run(lx, sx, length, buffer);
        xc = buffer;
      }
      const C* gc = reinterpret_cast<const C*>(ldy);
      if (!kNative || sdy != 1) {
        nn::load_run(ldy, sdy, length, buffer + length);
        gc = buffer + length;
      }
      C* e = buffer + 2 * length;
      bool nan = false;
      const C m = nn::line_max(xc, length, nan);
      if (nan || !(m > -std::numeric_limits<C>::infinity() && m < std::numeric_limits<C>::infinity())) {
        for (int64_t i = 0; i < length; ++i) ldx[i * sdx] = Num<T>::store(std::numeric_limits<C>::quiet_NaN());
        return;
      }
      double sum = 0, dot = 0;
      nn::exp_shifted_store_dot(xc, gc, m, e, length, sum, dot, next_x, next_g);
      const C inverse = static_cast<C>(1.0 / sum);
      const C mean = static_cast<C>(dot / sum);
      // + 0 turns -0 into +0, as the reference's accumulation from +0.
      if (kNative && sdx == 1) {
        C* d = reinterpret_cast<C*>(ldx);
        constexpr int64_t kStep = 16;
        const int per_step = nn::lines_per_step(next_d.remaining(), length / kStep);
        int64_t i = 0;
        for (; i + kStep <= length; i += kStep) {
          next_d.step<true>(per_step);
#pragma omp simd
          for (int64_t l = i; l < i + kStep; ++l) d[l] = (e[l] * inverse) * (gc[l] - mean) + C(0);
        }
        for (; i < length; ++i) d[i] = (e[i] * inverse) * (gc[i] - mean) + C(0);
      } else {
        for (int64_t i = 0; i < length; ++i) {
          ldx[i * sdx] = Num<T>::store((e[i] * inverse) * (gc[i] - mean) + C(0));
        }
      }
    };
    auto row = [&](int64_t n, const int64_t* off, const int64_t* st) {
      const int slot = slots == 1 ? 0 : omp_get_thread_num();
      C* buffer = scratch.data() + static_cast<size_t>(slot) * 3 * length;
      for (int64_t j = 0; j < n; ++j) {
        const T* lx = px + off[1] + j * st[1];
        const T* ldy = pdy + off[0] + j * st[0];
        T* ldx = pdx + off[2] + j * st[2];
        const bool has_next = j + 1 < n;
        nn::LinePrefetcher next_x = nn::next_line(lx, st[1], has_next, sx == 1, length);
        nn::LinePrefetcher next_g = nn::next_line(ldy, st[0], has_next, sdy == 1, length);
        nn::LinePrefetcher next_d = nn::next_line(static_cast<const T*>(ldx), st[2], has_next, sdx == 1, length);
        line(lx, ldy, ldx, buffer, next_x, next_g, next_d);
      }
    };
    for_each_row(outer, row, length * 24);
    target.finish();
  });
}

constexpr dx_kernel_flags_t kDeterministic = DX_KERNEL_FLAG_DETERMINISTIC;

template <class T>
void add_arg(Registrar& r) {
  constexpr DLDataType t = dtype_of<T>();
  r.add("dx.argmax", 1, 1, {t, dtype_of<int64_t>()}, &arg_kernel<T, true>, kDeterministic);
  r.add("dx.argmin", 1, 1, {t, dtype_of<int64_t>()}, &arg_kernel<T, false>, kDeterministic);
}

template <class T>
void add_float(Registrar& r) {
  constexpr DLDataType t = dtype_of<T>();
  r.add("dx.sum", 1, 1, {t, t}, &reduce_kernel<T, SumPolicy<T>>, kDeterministic,
        &reduce_backward_kernel<T, ReduceGrad::kSum>);
  r.add("dx.max", 1, 1, {t, t}, &reduce_kernel<T, MaxPolicy<T>>, kDeterministic,
        &reduce_backward_kernel<T, ReduceGrad::kMax>);
  r.add("dx.softmax", 1, 1, {t, t}, &softmax_kernel<T>, kDeterministic, &softmax_backward_kernel<T>);
  r.add("dx.min", 1, 1, {t, t}, &reduce_kernel<T, MinPolicy<T>>, kDeterministic,
        &reduce_backward_kernel<T, ReduceGrad::kMin>);
  r.add("dx.prod", 1, 1, {t, t}, &reduce_kernel<T, ProdPolicy<T>>, kDeterministic,
        &reduce_backward_kernel<T, ReduceGrad::kProd>);
  r.add("dx.mean", 1, 1, {t, t}, &reduce_kernel<T, MeanPolicy<T>>, kDeterministic,
        &reduce_backward_kernel<T, ReduceGrad::kMean>);
  add_arg<T>(r);
}

template <class T>
void add_integer(Registrar& r) {
  constexpr DLDataType t = dtype_of<T>();
  r.add("dx.sum", 1, 1, {t, dtype_of<int64_t>()}, &reduce_kernel<T, SumPolicy<T>>, kDeterministic);
  r.add("dx.max", 1, 1, {t, t}, &reduce_kernel<T, MaxPolicy<T>>, kDeterministic);
  r.add("dx.min", 1, 1, {t, t}, &reduce_kernel<T, MinPolicy<T>>, kDeterministic);
  r.add("dx.prod", 1, 1, {t, dtype_of<int64_t>()}, &reduce_kernel<T, ProdPolicy<T>>, kDeterministic);
  r.add("dx.mean", 1, 1, {t, dtype_of<double>()}, &reduce_kernel<T, MeanPolicy<T>>, kDeterministic);
  add_arg<T>(r);
}

}  // namespace

void register_reduction_kernels(Registrar& r) {
  add_float<double>(r);
  add_float<float>(r);
  add_float<Half>(r);
  add_float<BFloat16>(r);
  add_integer<int64_t>(r);
  add_integer<int32_t>(r);
  add_integer<int16_t>(r);
  add_integer<int8_t>(r);
  add_integer<uint8_t>(r);
}

}  // namespace deepx::cpu
