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
// its planes of the output (and of the input gradient).
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
#pragma omp parallel for schedule(static) \
    num_threads(plane_threads(work)) if (work >= kParallelThreshold)
    for (int64_t c = 0; c < p.planes; ++c) {
      const F* plane = x.data() + c * in_plane;
      F* out = y.data() + c * out_plane;
      for (int64_t oh = 0; oh < p.ho; ++oh) {
        for (int64_t ow = 0; ow < p.wo; ++ow) {
          const Window win = window_of(p, oh, ow);
          F result;
          if constexpr (kMax) {
            const int64_t at = window_argmax(plane, p.w, win);
            result = at < 0 ? std::numeric_limits<F>::quiet_NaN() : plane[at];
          } else {
            // f64 sum, as the reference: an f32 sum could overflow or round differently.
            double sum = 0;
            for (int64_t ih = win.h0; ih < win.h1; ++ih) {
              for (int64_t iw = win.w0; iw < win.w1; ++iw)
                sum += static_cast<double>(plane[ih * p.w + iw]);
            }
            const int64_t members =
                std::max<int64_t>(win.h1 - win.h0, 0) * std::max<int64_t>(win.w1 - win.w0, 0);
            result = static_cast<F>(sum / static_cast<double>(members));
          }
          out[oh * p.wo + ow] = result;
        }
      }
    }
    y.finish();
  });
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
    // Overlapping windows add several gradients into one element: accumulate in f64 and round
    // once, as the reference.
    const DenseOutput<double, S> dx(dxv, true);
    const int64_t in_plane = p.h * p.w, out_plane = p.ho * p.wo;
    const int64_t work = p.planes * out_plane * p.kernel.h * p.kernel.w;
#pragma omp parallel for schedule(static) \
    num_threads(plane_threads(work)) if (work >= kParallelThreshold)
    for (int64_t c = 0; c < p.planes; ++c) {
      const F* grad = dy.data() + c * out_plane;
      double* dst = dx.data() + c * in_plane;
      for (int64_t oh = 0; oh < p.ho; ++oh) {
        for (int64_t ow = 0; ow < p.wo; ++ow) {
          const Window win = window_of(p, oh, ow);
          const double g = grad[oh * p.wo + ow];
          if constexpr (kMax) {
            const int64_t at = window_argmax(x.data() + c * in_plane, p.w, win);
            if (at >= 0) dst[at] += g;
          } else {
            const int64_t members =
                std::max<int64_t>(win.h1 - win.h0, 0) * std::max<int64_t>(win.w1 - win.w0, 0);
            const double share = g / static_cast<double>(members);
            for (int64_t ih = win.h0; ih < win.h1; ++ih) {
              for (int64_t iw = win.w0; iw < win.w1; ++iw) dst[ih * p.w + iw] += share;
            }
          }
        }
      }
    }
    dx.finish();
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
