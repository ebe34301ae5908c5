// dx.max_pool2d and dx.avg_pool2d (NCHW; attrs kernel (required), stride (default = kernel),
// padding (at most half the kernel); floor mode) and their gradients, with the reference's
// semantics: the max of a window is its first NaN, else its first maximal element (row-major
// window order), and the gradient goes to that element; the average counts only the window's
// elements inside the input (padding excluded).
//
// The input is read through a dense compute-type copy (f32 for f32/f16/bf16, f64 for f64; the
// tensor itself when it is compact); window sums and gradient accumulations are f64, rounded
// once (as the reference: an f32 sum can overflow, and overlapping windows would round once per
// contribution). The work is split across OpenMP threads by (n, c) planes, so each thread owns
// its planes of the output (and of the input gradient, accumulated in a per-thread f64 plane
// that stays in cache and is rounded into the gradient right after).
//
// Speed: output columns whose window lies wholly inside the input row (all but a border of
// about kernel / stride columns) are computed a whole output row at a time, vectorised along
// the output width: a branch-free max (or f64 sum) over the window's rows and kernel columns,
// with the column stride a compile-time 1 or 2 for the common cases; the window is visited in
// the reference's row-major order, so the max (first NaN, else first maximum) and the f64 sums
// are the reference's. Border columns take the per-window loop.
#include <omp.h>

#include <cmath>
#include <limits>

#include "dense.h"
#include "kernels.h"
#include "spatial.h"

namespace deepx::cpu {
namespace {

// Attribute slots (deepx/ops.h schema "kernel,stride,padding").
constexpr int kKernelSlot = 0, kStrideSlot = 1, kPaddingSlot = 2;

struct PoolPlan {
  View x;
  Pair2 kernel, stride, padding;
  int64_t planes = 0, h = 0, w = 0, ho = 0, wo = 0;
  int64_t out_shape[4];
};

PoolPlan plan_pool(const dx_kernel_call_t* call, const DLTensor* x, const char* op) {
  PoolPlan p;
  p.x = make_view(x, "input 0");
  if (p.x.rank != 4)
    fail(DX_SHAPE_MISMATCH, std::string("cpu: ") + op + ": x must be rank 4 (NCHW)");
  if (attr_at(call, kKernelSlot) == nullptr) {
    fail(DX_INVALID_ARGUMENT, std::string("cpu: ") + op + ": attribute kernel is required");
  }
  p.kernel = pair_attr(call, kKernelSlot, "kernel", {1, 1}, 1);
  p.stride = pair_attr(call, kStrideSlot, "stride", p.kernel, 1);
  p.padding = pair_attr(call, kPaddingSlot, "padding", {0, 0}, 0);
  if (2 * p.padding.h > p.kernel.h || 2 * p.padding.w > p.kernel.w) {
    fail(DX_INVALID_ARGUMENT,
         std::string("cpu: ") + op + ": padding must be at most half the kernel");
  }
  p.h = p.x.shape[2], p.w = p.x.shape[3];
  p.ho = window_extent(p.h, p.padding.h, 1, p.kernel.h, p.stride.h, op);
  p.wo = window_extent(p.w, p.padding.w, 1, p.kernel.w, p.stride.w, op);
  p.planes = p.x.shape[0] * p.x.shape[1];
  p.out_shape[0] = p.x.shape[0], p.out_shape[1] = p.x.shape[1];
  p.out_shape[2] = p.ho, p.out_shape[3] = p.wo;
  return p;
}

/// The in-bounds window of output (oh, ow): rows [h0, h1), columns [w0, w1) of the plane.
struct Window {
  int64_t h0, h1, w0, w1;
};
inline Window window_of(const PoolPlan& p, int64_t oh, int64_t ow) {
  const int64_t hs = oh * p.stride.h - p.padding.h, ws = ow * p.stride.w - p.padding.w;
  return {std::max<int64_t>(hs, 0), std::min<int64_t>(hs + p.kernel.h, p.h),
          std::max<int64_t>(ws, 0), std::min<int64_t>(ws + p.kernel.w, p.w)};
}

/// Offset in the plane of the window's maximum (first NaN, else first maximum), or -1 for an
/// empty window.
template <class F>
inline int64_t window_argmax(const F* plane, int64_t width, const Window& win) {
  int64_t best = -1;
  F best_value = F(0);
  for (int64_t ih = win.h0; ih < win.h1; ++ih) {
    const F* row = plane + ih * width;
    for (int64_t iw = win.w0; iw < win.w1; ++iw) {
      const F v = row[iw];
      if (best < 0 || std::isnan(v) || v > best_value) {
        best = ih * width + iw;
        best_value = v;
        if (std::isnan(v)) return best;
      }
    }
  }
  return best;
}

int plane_threads(int64_t work) { return work >= kParallelThreshold ? available_threads() : 1; }

template <class S>
void check_dtypes(const dx_kernel_call_t* call, bool backward, const char* op) {
  constexpr DLDataType t = dtype_of<S>();
  if (!backward) {
    expect_call_arity(call, 1, 1, op);
    expect_tensor(call->inputs[0], t, "input 0");
    expect_tensor(call->outputs[0], t, "output 0");
    return;
  }
  // inputs: dy, x, y; outputs: dx (may be null).
  expect_call_arity(call, 3, 1, op);
  expect_tensor(call->inputs[0], t, "output gradient 0");
  expect_tensor(call->inputs[2], t, "forward output 0");
  expect_tensor(call->inputs[1], t, "forward input 0");
  if (call->outputs[0] != nullptr) expect_tensor(call->outputs[0], t, "input gradient 0");
}

/// The output columns [lo, hi) whose window lies wholly inside the row (no column clipping):
/// those take the vectorised paths below, the few border columns the per-window loops.
inline void interior_columns(const PoolPlan& p, int64_t& lo, int64_t& hi) {
  valid_range(p.wo, p.stride.w, -p.padding.w, p.w - p.kernel.w + 1, lo, hi);
  if (hi < lo) hi = lo;
}

/// The max-pool select: v replaces the running maximum when larger, or when it is the first NaN
/// (a NaN maximum stays). Branch-free, so the column loops vectorise.
template <class F>
inline F max_step(F best, F v) {
  return (best == best && (v > best || v != v)) ? v : best;
}

/// One output row's interior columns [lo, hi) of a plane: out[ow] = max (kMax) or f64 sum of
/// the window rows [h0, h1) x kernel columns, vectorised along ow. The loop visits each
/// window in row-major order (rows outer, kernel columns inner), as the reference does, so the
/// f64 sums are its bits. kStride is the column stride when known at compile time (1, 2), else 0.
template <class F, bool kMax, int kStride>
void pool_row_interior(const PoolPlan& p, const F* plane, int64_t h0, int64_t h1, int64_t lo,
                       int64_t hi, F* out, double* sums) {
  const int64_t sw = kStride > 0 ? kStride : p.stride.w;
  const int64_t kw = p.kernel.w;
  if constexpr (kMax) {
    for (int64_t ow = lo; ow < hi; ++ow) out[ow] = -std::numeric_limits<F>::infinity();
  } else {
    for (int64_t ow = lo; ow < hi; ++ow) sums[ow] = 0;
  }
  for (int64_t ih = h0; ih < h1; ++ih) {
    for (int64_t kj = 0; kj < kw; ++kj) {
      // Column ow reads row[ow * sw]; ow >= lo keeps the index >= 0.
      const F* row = plane + ih * p.w + kj - p.padding.w;
      if constexpr (kMax) {
#pragma omp simd
        for (int64_t ow = lo; ow < hi; ++ow) out[ow] = max_step(out[ow], row[ow * sw]);
      } else {
#pragma omp simd
        for (int64_t ow = lo; ow < hi; ++ow) sums[ow] += static_cast<double>(row[ow * sw]);
      }
    }
  }
  if constexpr (!kMax) {
    const double members = static_cast<double>((h1 - h0) * kw);
#pragma omp simd
    for (int64_t ow = lo; ow < hi; ++ow) out[ow] = static_cast<F>(sums[ow] / members);
  }
}

/// One output of the per-window path (border columns; every column of narrow inputs).
template <class F, bool kMax>
inline F pool_window(const PoolPlan& p, const F* plane, int64_t oh, int64_t ow) {
  const Window win = window_of(p, oh, ow);
  if constexpr (kMax) {
    const int64_t at = window_argmax(plane, p.w, win);
    return at < 0 ? std::numeric_limits<F>::quiet_NaN() : plane[at];
  } else {
    // f64 sum, as the reference: an f32 sum could overflow or round differently.
    double sum = 0;
    for (int64_t ih = win.h0; ih < win.h1; ++ih) {
      for (int64_t iw = win.w0; iw < win.w1; ++iw) sum += static_cast<double>(plane[ih * p.w + iw]);
    }
    const int64_t members =
        std::max<int64_t>(win.h1 - win.h0, 0) * std::max<int64_t>(win.w1 - win.w0, 0);
    return static_cast<F>(sum / static_cast<double>(members));
  }
}

template <class F, bool kMax, int kStride>
void pool_plane_forward(const PoolPlan& p, const F* plane, F* out, double* sums) {
  int64_t lo, hi;
  interior_columns(p, lo, hi);
  for (int64_t oh = 0; oh < p.ho; ++oh) {
    F* out_row = out + oh * p.wo;
    const Window rows = window_of(p, oh, 0);
    for (int64_t ow = 0; ow < lo; ++ow) out_row[ow] = pool_window<F, kMax>(p, plane, oh, ow);
    if (lo < hi && rows.h0 < rows.h1) {
      pool_row_interior<F, kMax, kStride>(p, plane, rows.h0, rows.h1, lo, hi, out_row, sums);
    } else {
      for (int64_t ow = lo; ow < hi; ++ow) out_row[ow] = pool_window<F, kMax>(p, plane, oh, ow);
    }
    for (int64_t ow = hi; ow < p.wo; ++ow) out_row[ow] = pool_window<F, kMax>(p, plane, oh, ow);
  }
}

template <class S, bool kMax>
dx_error_t* pool_forward(const dx_kernel_call_t* call) noexcept {
  return guard(call->host, [&] {
    using F = ComputeOf<S>;
    const char* op = kMax ? "dx.max_pool2d" : "dx.avg_pool2d";
    check_dtypes<S>(call, false, op);
    const PoolPlan p = plan_pool(call, call->inputs[0], op);
    const View yv = make_view(call->outputs[0], "output 0");
    expect_shape(yv, p.out_shape, 4, "output 0");
    if (yv.count() == 0) return;
    const DenseInput<F, S> x(p.x);
    const DenseOutput<F, S> y(yv, false);
    const int64_t in_plane = p.h * p.w, out_plane = p.ho * p.wo;
    const int64_t work = p.planes * out_plane * p.kernel.h * p.kernel.w;
    const int threads = plane_threads(work);
    // One row of f64 window sums per thread (avg).
    std::vector<double> sums(kMax ? 0 : static_cast<size_t>(threads * p.wo));
    const int64_t stride = p.stride.w;
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
    for (int64_t c = 0; c < p.planes; ++c) {
      const F* plane = x.data() + c * in_plane;
      F* out = y.data() + c * out_plane;
      double* row_sums = kMax ? nullptr : sums.data() + omp_get_thread_num() * p.wo;
      if (stride == 1) {
        pool_plane_forward<F, kMax, 1>(p, plane, out, row_sums);
      } else if (stride == 2) {
        pool_plane_forward<F, kMax, 2>(p, plane, out, row_sums);
      } else {
        pool_plane_forward<F, kMax, 0>(p, plane, out, row_sums);
      }
    }
    y.finish();
  });
}

/// Rounds the f64 gradient plane `src` (compact h x w) once into plane `c` of `dx` (any strides).
template <class S>
void store_grad_plane(const PoolPlan& p, const double* src, const View& dx, int64_t c) {
  using C = typename Num<S>::C;
  const int64_t n = c / p.x.shape[1], ch = c % p.x.shape[1];
  S* base = dx.data<S>() + n * dx.strides[0] + ch * dx.strides[1];
  const int64_t sh = dx.strides[2], sw = dx.strides[3];
  for (int64_t ih = 0; ih < p.h; ++ih) {
    S* row = base + ih * sh;
    const double* in = src + ih * p.w;
    if (sw == 1) {
#pragma omp simd
      for (int64_t iw = 0; iw < p.w; ++iw) row[iw] = Num<S>::store(static_cast<C>(in[iw]));
    } else {
      for (int64_t iw = 0; iw < p.w; ++iw) row[iw * sw] = Num<S>::store(static_cast<C>(in[iw]));
    }
  }
}

/// Gradient of one plane into the f64 plane `dst` (zeroed here). Contributions are added in the
/// reference's order for max (outputs row-major, each to its window's first NaN or first
/// maximum); avg adds each window's share over the window, interior columns vectorised.
template <class F, bool kMax, int kStride>
void pool_plane_backward(const PoolPlan& p, const F* plane, const F* grad, double* dst,
                         int64_t* argmax, F* values, double* shares) {
  const int64_t in_plane = p.h * p.w;
  std::fill(dst, dst + in_plane, 0.0);
  int64_t lo, hi;
  interior_columns(p, lo, hi);
  const int64_t sw = kStride > 0 ? kStride : p.stride.w;
  const int64_t kw = p.kernel.w;
  for (int64_t oh = 0; oh < p.ho; ++oh) {
    const F* g_row = grad + oh * p.wo;
    const Window rows = window_of(p, oh, 0);
    const bool interior = lo < hi && rows.h0 < rows.h1;
    const int64_t mid_lo = interior ? lo : p.wo, mid_hi = interior ? hi : p.wo;
    auto border = [&](int64_t ow) {
      const Window win = window_of(p, oh, ow);
      const double g = g_row[ow];
      if constexpr (kMax) {
        const int64_t at = window_argmax(plane, p.w, win);
        if (at >= 0) dst[at] += g;
      } else {
        const int64_t members =
            std::max<int64_t>(win.h1 - win.h0, 0) * std::max<int64_t>(win.w1 - win.w0, 0);
        const double share = g / static_cast<double>(members);
        for (int64_t ih = win.h0; ih < win.h1; ++ih) {
          for (int64_t iw = win.w0; iw < win.w1; ++iw) dst[ih * p.w + iw] += share;
        }
      }
    };
    for (int64_t ow = 0; ow < std::min(mid_lo, p.wo); ++ow) border(ow);
    if (interior) {
      if constexpr (kMax) {
        // Vectorised argmax along ow (row-major window order), then the scatter in ow order.
        const F* first = plane + rows.h0 * p.w - p.padding.w;
        for (int64_t ow = lo; ow < hi; ++ow) argmax[ow] = rows.h0 * p.w + ow * sw - p.padding.w;
#pragma omp simd
        for (int64_t ow = lo; ow < hi; ++ow) values[ow] = first[ow * sw];
        for (int64_t ih = rows.h0; ih < rows.h1; ++ih) {
          for (int64_t kj = (ih == rows.h0 ? 1 : 0); kj < kw; ++kj) {
            const int64_t offset = ih * p.w + kj - p.padding.w;
            const F* row = plane + offset;
#pragma omp simd
            for (int64_t ow = lo; ow < hi; ++ow) {
              const F v = row[ow * sw];
              const F b = values[ow];
              const bool take = b == b && (v > b || v != v);
              values[ow] = take ? v : b;
              argmax[ow] = take ? offset + ow * sw : argmax[ow];
            }
          }
        }
        for (int64_t ow = lo; ow < hi; ++ow) dst[argmax[ow]] += static_cast<double>(g_row[ow]);
      } else {
        const double members = static_cast<double>((rows.h1 - rows.h0) * kw);
#pragma omp simd
        for (int64_t ow = lo; ow < hi; ++ow) shares[ow] = static_cast<double>(g_row[ow]) / members;
        for (int64_t ih = rows.h0; ih < rows.h1; ++ih) {
          for (int64_t kj = 0; kj < kw; ++kj) {
            double* row = dst + ih * p.w + kj - p.padding.w;
            // Distinct ow hit distinct elements within one (ih, kj) pass.
#pragma omp simd
            for (int64_t ow = lo; ow < hi; ++ow) row[ow * sw] += shares[ow];
          }
        }
      }
    }
    for (int64_t ow = std::max<int64_t>(mid_hi, mid_lo); ow < p.wo; ++ow) border(ow);
  }
}

template <class S, bool kMax>
dx_error_t* pool_backward(const dx_kernel_call_t* call) noexcept {
  return guard(call->host, [&] {
    using F = ComputeOf<S>;
    const char* op = kMax ? "dx.max_pool2d" : "dx.avg_pool2d";
    check_dtypes<S>(call, true, op);
    const PoolPlan p = plan_pool(call, call->inputs[1], op);
    const View dyv = make_view(call->inputs[0], "output gradient 0");
    expect_shape(dyv, p.out_shape, 4, "output gradient 0");
    if (call->outputs[0] == nullptr) return;
    const View dxv = make_view(call->outputs[0], "gradient output 0");
    expect_shape(dxv, p.x.shape, 4, "gradient output 0");
    if (dxv.count() == 0) return;
    const DenseInput<F, S> dy(dyv);
    const DenseInput<F, S> x(kMax ? p.x : empty_view(p.x));
    const int64_t in_plane = p.h * p.w, out_plane = p.ho * p.wo;
    const int64_t work = p.planes * (out_plane * p.kernel.h * p.kernel.w + in_plane);
    const int threads = plane_threads(work);
    // Per thread: an f64 gradient plane (overlapping windows add several gradients into one
    // element: accumulated in f64 and rounded once, as the reference), and rows of scratch.
    const size_t team = static_cast<size_t>(threads), row = static_cast<size_t>(p.wo);
    std::vector<double> planes(team * static_cast<size_t>(in_plane)), shares(team * row);
    std::vector<F> values(kMax ? team * row : 0);
    std::vector<int64_t> argmax(kMax ? team * row : 0);
    const int64_t stride = p.stride.w;
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
    for (int64_t c = 0; c < p.planes; ++c) {
      const size_t me = static_cast<size_t>(omp_get_thread_num());
      double* dst = planes.data() + me * static_cast<size_t>(in_plane);
      double* share_row = shares.data() + me * row;
      F* value_row = kMax ? values.data() + me * row : nullptr;
      int64_t* argmax_row = kMax ? argmax.data() + me * row : nullptr;
      const F* plane = kMax ? x.data() + c * in_plane : nullptr;
      const F* grad = dy.data() + c * out_plane;
      if (stride == 1) {
        pool_plane_backward<F, kMax, 1>(p, plane, grad, dst, argmax_row, value_row,
                                            share_row);
      } else if (stride == 2) {
        pool_plane_backward<F, kMax, 2>(p, plane, grad, dst, argmax_row, value_row,
                                            share_row);
      } else {
        pool_plane_backward<F, kMax, 0>(p, plane, grad, dst, argmax_row, value_row,
                                            share_row);
      }
      store_grad_plane<S>(p, dst, dxv, c);
    }
  });
}

}  // namespace

/// dx.max_pool2d and dx.avg_pool2d for every F dtype (called from conv.cc's registration).
void register_pool_kernels(Registrar& r) {
  auto add = [&r](auto tag) {
    using T = decltype(tag);
    constexpr DLDataType t = dtype_of<T>();
    r.add("dx.max_pool2d", 1, 1, {t, t}, &pool_forward<T, true>, DX_KERNEL_FLAG_DETERMINISTIC,
          &pool_backward<T, true>);
    r.add("dx.avg_pool2d", 1, 1, {t, t}, &pool_forward<T, false>, DX_KERNEL_FLAG_DETERMINISTIC,
          &pool_backward<T, false>);
  };
  add(double{});
  add(float{});
  add(Half{});
  add(BFloat16{});
}

}  // namespace deepx::cpu
