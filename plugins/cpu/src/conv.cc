// dx.conv2d (NCHW input, OIHW weight, optional bias; attrs stride, padding, dilation, groups)
// and its gradient, with the reference's signatures, attribute rules and error statuses.
//
// Forward: im2col + GEMM. For a chunk of `nb` images and one group, the column matrix
// col (K = C_in/groups * kh * kw rows, nb * Ho * Wo columns) is built in parallel (OpenMP over
// its rows), then y_g = W_g (C_out/groups x K) * col with sgemm/dgemm (OpenBLAS threads). Images
// are batched into one GEMM until it has a few thousand columns, so small feature maps still
// give BLAS a wide product; a 1x1, stride-1, unpadded convolution of a large map skips im2col and
// multiplies the input in place. f16/bf16 are widened to f32 buffers and rounded once at the end.
// Backward: dW_g += dY_g col^T (GEMM), dcol = W_g^T dY_g (GEMM) scattered back by col2im
// (OpenMP over input planes, so no two threads touch one element), db = sums of dY.
#include <algorithm>
#include <vector>

#include "dense.h"
#include "kernels.h"
#include "spatial.h"

namespace deepx::cpu {
namespace {

constexpr const char* kOp = "dx.conv2d";
// Attribute slots of dx.conv2d (deepx/ops.h schema "stride,padding,dilation,groups").
constexpr int kStrideSlot = 0, kPaddingSlot = 1, kDilationSlot = 2, kGroupsSlot = 3;
// GEMM width the image batching aims for, and the most elements one column buffer may hold.
constexpr int64_t kTargetColumns = 4096;
constexpr int64_t kColumnBufferLimit = int64_t{1} << 23;

struct ConvPlan {
  View x, w, b;
  bool has_bias = false;
  Pair2 stride, padding, dilation;
  int64_t groups = 1, n = 0, cin = 0, h = 0, wd = 0, cout = 0, kh = 0, kw = 0, ho = 0, wo = 0;
  int64_t cin_g = 0, cout_g = 0, k = 0, p = 0;  // K = cin_g kh kw; P = ho wo
  int64_t out_shape[4];
  bool pointwise = false;  // 1x1, stride 1, no padding: col is the input itself

  /// Images per GEMM chunk.
  int64_t chunk() const {
    int64_t nb =
        pointwise && p >= 256 ? 1 : std::max<int64_t>(1, kTargetColumns / std::max<int64_t>(1, p));
    nb = std::min(nb, std::max<int64_t>(1, kColumnBufferLimit / std::max<int64_t>(1, k * p)));
    return std::max<int64_t>(1, std::min(nb, n));
  }
};

/// Validates a forward (first = 0) or backward (first = 1) call's x, w, b and attributes, in
/// the reference's order. Dtypes were checked by the caller.
ConvPlan plan_conv(const dx_kernel_call_t* call, int first) {
  ConvPlan p;
  p.x = make_view(call->inputs[first], "input 0");
  p.w = make_view(call->inputs[first + 1], "input 1");
  if (call->inputs[first + 2] != nullptr) {
    p.b = make_view(call->inputs[first + 2], "input 2");
    p.has_bias = true;
  }
  p.stride = pair_attr(call, kStrideSlot, "stride", {1, 1}, 1);
  p.padding = pair_attr(call, kPaddingSlot, "padding", {0, 0}, 0);
  p.dilation = pair_attr(call, kDilationSlot, "dilation", {1, 1}, 1);
  p.groups = attr_i64(call, kGroupsSlot, "groups", 1);
  if (p.x.rank != 4 || p.w.rank != 4) {
    fail(DX_SHAPE_MISMATCH, "cpu: dx.conv2d: x and weight must be rank 4 (NCHW, OIHW)");
  }
  p.n = p.x.shape[0], p.cin = p.x.shape[1], p.h = p.x.shape[2], p.wd = p.x.shape[3];
  p.cout = p.w.shape[0], p.kh = p.w.shape[2], p.kw = p.w.shape[3];
  if (p.groups < 1 || p.cin % p.groups != 0 || p.cout % p.groups != 0 ||
      p.w.shape[1] != p.cin / p.groups) {
    fail(DX_SHAPE_MISMATCH, "cpu: dx.conv2d: x " + shape_string(p.x.shape, 4) + ", weight " +
                                shape_string(p.w.shape, 4) + " and groups " +
                                std::to_string(p.groups) + " disagree");
  }
  if (p.has_bias && (p.b.rank != 1 || p.b.shape[0] != p.cout)) {
    fail(DX_SHAPE_MISMATCH, "cpu: dx.conv2d: bias must be (C_out,)");
  }
  p.ho = window_extent(p.h, p.padding.h, p.dilation.h, p.kh, p.stride.h, kOp);
  p.wo = window_extent(p.wd, p.padding.w, p.dilation.w, p.kw, p.stride.w, kOp);
  p.out_shape[0] = p.n, p.out_shape[1] = p.cout, p.out_shape[2] = p.ho, p.out_shape[3] = p.wo;
  p.cin_g = p.cin / p.groups;
  p.cout_g = p.cout / p.groups;
  p.k = p.cin_g * p.kh * p.kw;
  p.p = p.ho * p.wo;
  p.pointwise = p.kh == 1 && p.kw == 1 && p.stride.h == 1 && p.stride.w == 1 && p.padding.h == 0 &&
                p.padding.w == 0;
  return p;
}

/// col[r][nn * P + oh * Wo + ow] = x[n0 + nn, g * cin_g + c, ih, iw] (0 in the padding) for
/// r = (c, ki, kj), the nb images from n0.
template <class F>
void im2col(const ConvPlan& p, const F* x, int64_t n0, int64_t nb, int64_t g, F* col) {
  const int64_t rows = p.k, width = nb * p.p, plane = p.h * p.wd;
  const int64_t kk = p.kh * p.kw;
  const int64_t tasks = rows * nb;
  fork_join(tasks, rows * width, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t r = t / nb, nn = t % nb;
      const int64_t c = r / kk, ki = (r / p.kw) % p.kh, kj = r % p.kw;
      const F* src = x + ((n0 + nn) * p.cin + g * p.cin_g + c) * plane;
      F* dst = col + r * width + nn * p.p;
      const int64_t col_offset = kj * p.dilation.w - p.padding.w;
      int64_t lo, hi;
      valid_range(p.wo, p.stride.w, col_offset, p.wd, lo, hi);
      const int64_t sw = p.stride.w;
      for (int64_t oh = 0; oh < p.ho; ++oh) {
        F* out = dst + oh * p.wo;
        const int64_t ih = oh * p.stride.h - p.padding.h + ki * p.dilation.h;
        if (ih < 0 || ih >= p.h || lo >= hi) {
          std::fill(out, out + p.wo, F(0));
          continue;
        }
        const F* row = src + ih * p.wd + col_offset;
        for (int64_t ow = 0; ow < lo; ++ow) out[ow] = F(0);
        if (sw == 1) {
#pragma omp simd
          for (int64_t ow = lo; ow < hi; ++ow) out[ow] = row[ow];
        } else {
          for (int64_t ow = lo; ow < hi; ++ow) out[ow] = row[ow * sw];
        }
        for (int64_t ow = hi; ow < p.wo; ++ow) out[ow] = F(0);
      }
    }
  });
}

/// dx[n0 + nn, g * cin_g + c, ih, iw] += col[r][nn * P + oh * Wo + ow]: the adjoint of im2col.
/// One task per input plane, so no two threads write the same element.
template <class F>
void col2im(const ConvPlan& p, const F* col, int64_t n0, int64_t nb, int64_t g, F* dx) {
  const int64_t width = nb * p.p, plane = p.h * p.wd;
  const int64_t tasks = nb * p.cin_g;
  fork_join(tasks, p.k * width, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t nn = t / p.cin_g, c = t % p.cin_g;
      F* dst = dx + ((n0 + nn) * p.cin + g * p.cin_g + c) * plane;
      for (int64_t ki = 0; ki < p.kh; ++ki) {
        for (int64_t kj = 0; kj < p.kw; ++kj) {
          const int64_t r = (c * p.kh + ki) * p.kw + kj;
          const F* src = col + r * width + nn * p.p;
          const int64_t col_offset = kj * p.dilation.w - p.padding.w;
          int64_t lo, hi;
          valid_range(p.wo, p.stride.w, col_offset, p.wd, lo, hi);
          if (lo >= hi) continue;
          const int64_t sw = p.stride.w;
          for (int64_t oh = 0; oh < p.ho; ++oh) {
            const int64_t ih = oh * p.stride.h - p.padding.h + ki * p.dilation.h;
            if (ih < 0 || ih >= p.h) continue;
            F* row = dst + ih * p.wd + col_offset;
            const F* in = src + oh * p.wo;
            if (sw == 1) {
#pragma omp simd
              for (int64_t ow = lo; ow < hi; ++ow) row[ow] += in[ow];
            } else {
              for (int64_t ow = lo; ow < hi; ++ow) row[ow * sw] += in[ow];
            }
          }
        }
      }
    }
  });
}

/// Checks the forward call's tensors' dtypes (DX_INVALID_ARGUMENT), as the reference's
/// trampoline does before anything else.
template <class S>
void check_forward_dtypes(const dx_kernel_call_t* call) {
  expect_call_arity(call, 3, 1, kOp);
  constexpr DLDataType t = dtype_of<S>();
  expect_tensor(call->inputs[0], t, "input 0");
  expect_tensor(call->inputs[1], t, "input 1");
  if (call->inputs[2] != nullptr) expect_tensor(call->inputs[2], t, "input 2");
  expect_tensor(call->outputs[0], t, "output 0");
}

template <class F, class S>
std::vector<F> load_bias(const ConvPlan& p) {
  std::vector<F> bias;
  if (p.has_bias) {
    bias.resize(static_cast<size_t>(p.cout));
    pack_dense<F, S>(p.b, bias.data());
  }
  return bias;
}

/// Depthwise forward (one input channel per group): each output plane is a sum of kh * kw
/// shifted, scaled rows of its input plane, accumulated in F along output rows (vectorised),
/// in the reference's term order (kernel rows, then kernel columns; the bias last). A GEMM per
/// (image, channel) would have K = kh * kw and cost more in calls than in arithmetic.
template <class F>
void depthwise_forward(const ConvPlan& p, const F* x, const F* w, const F* bias, F* y) {
  const int64_t planes = p.n * p.cout;
  const int64_t in_plane = p.h * p.wd;
  fork_join(planes, planes * p.p * p.kh * p.kw, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t n = t / p.cout, co = t % p.cout;
      const int64_t ci = co / p.cout_g;  // group = input channel
      const F* src = x + (n * p.cin + ci) * in_plane;
      const F* taps = w + co * p.kh * p.kw;
      F* dst = y + t * p.p;
      std::fill(dst, dst + p.p, F(0));
      for (int64_t oh = 0; oh < p.ho; ++oh) {
        F* out = dst + oh * p.wo;
        for (int64_t ki = 0; ki < p.kh; ++ki) {
          const int64_t ih = oh * p.stride.h - p.padding.h + ki * p.dilation.h;
          if (ih < 0 || ih >= p.h) continue;
          for (int64_t kj = 0; kj < p.kw; ++kj) {
            const int64_t offset = kj * p.dilation.w - p.padding.w;
            int64_t lo, hi;
            valid_range(p.wo, p.stride.w, offset, p.wd, lo, hi);
            const F tap = taps[ki * p.kw + kj];
            const F* row = src + ih * p.wd + offset;
            if (p.stride.w == 1) {
#pragma omp simd
              for (int64_t ow = lo; ow < hi; ++ow) out[ow] += tap * row[ow];
            } else if (p.stride.w == 2) {
#pragma omp simd
              for (int64_t ow = lo; ow < hi; ++ow) out[ow] += tap * row[2 * ow];
            } else {
              const int64_t sw = p.stride.w;
              for (int64_t ow = lo; ow < hi; ++ow) out[ow] += tap * row[ow * sw];
            }
          }
        }
      }
      if (bias != nullptr) {
        const F b = bias[co];
#pragma omp simd
        for (int64_t i = 0; i < p.p; ++i) dst[i] += b;
      }
    }
  });
}

template <class S>
dx_error_t* conv2d_forward(const dx_kernel_call_t* call) noexcept {
  return guard(call->host, [&] {
    using F = ComputeOf<S>;
    check_forward_dtypes<S>(call);
    const ConvPlan p = plan_conv(call, 0);
    const View yv = make_view(call->outputs[0], "output 0");
    expect_shape(yv, p.out_shape, 4, "output 0");
    if (yv.count() == 0) return;
    const int64_t nb = p.chunk();
    check_blas_dims({p.k, nb * p.p, p.cout_g}, kOp);

    const DenseInput<F, S> x(p.x);
    const DenseInput<F, S> w(p.w);
    const std::vector<F> bias = load_bias<F, S>(p);
    const DenseOutput<F, S> y(yv, false);
    if (p.cin_g == 1 && p.groups > 1) {
      depthwise_forward<F>(p, x.data(), w.data(), p.has_bias ? bias.data() : nullptr, y.data());
      y.finish();
      return;
    }
    const bool direct_col = p.pointwise && nb == 1;
    std::vector<F> col(direct_col ? 0 : static_cast<size_t>(p.k * nb * p.p));
    std::vector<F> product(nb == 1 ? 0 : static_cast<size_t>(p.cout_g * nb * p.p));
    const int64_t width = nb * p.p;
    for (int64_t n0 = 0; n0 < p.n; n0 += nb) {
      const int64_t count = std::min(nb, p.n - n0);
      const int64_t cols = count * p.p;
      for (int64_t g = 0; g < p.groups; ++g) {
        const F* b_matrix;
        int64_t ldb;
        if (direct_col) {
          b_matrix = x.data() + (n0 * p.cin + g * p.cin_g) * p.p;
          ldb = p.p;
        } else {
          im2col(p, x.data(), n0, count, g, col.data());
          b_matrix = col.data();
          ldb = count * p.p;
        }
        const F* w_g = w.data() + g * p.cout_g * p.k;
        if (nb == 1) {
          gemm<F>(false, false, p.cout_g, p.p, p.k, F(1), w_g, p.k, b_matrix, ldb, F(0),
                  y.data() + (n0 * p.cout + g * p.cout_g) * p.p, p.p);
          continue;
        }
        gemm<F>(false, false, p.cout_g, cols, p.k, F(1), w_g, p.k, b_matrix, ldb, F(0),
                product.data(), width);
        const int64_t planes = count * p.cout_g;
        fork_join(planes, planes * p.p, [&](int64_t begin, int64_t end) {
          for (int64_t t = begin; t < end; ++t) {
            const int64_t nn = t / p.cout_g, co = t % p.cout_g;
            const F* src = product.data() + co * width + nn * p.p;
            F* dst = y.data() + ((n0 + nn) * p.cout + g * p.cout_g + co) * p.p;
            std::copy(src, src + p.p, dst);
          }
        });
      }
    }
    if (p.has_bias) {
      const int64_t planes = p.n * p.cout;
      fork_join(planes, planes * p.p, [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
          const F b = bias[static_cast<size_t>(t % p.cout)];
          F* dst = y.data() + t * p.p;
#pragma omp simd
          for (int64_t i = 0; i < p.p; ++i) dst[i] += b;
        }
      });
    }
    y.finish();
  });
}

template <class S>
dx_error_t* conv2d_backward(const dx_kernel_call_t* call) noexcept {
  return guard(call->host, [&] {
    using F = ComputeOf<S>;
    // inputs: dy, x, w, b (may be null), y; outputs: dx, dw, db (each may be null).
    expect_call_arity(call, 5, 3, "backward of dx.conv2d");
    constexpr DLDataType t = dtype_of<S>();
    expect_tensor(call->inputs[0], t, "output gradient 0");
    expect_tensor(call->inputs[4], t, "forward output 0");
    for (int i = 0; i < 3; ++i) {
      const std::string role = "forward input " + std::to_string(i);
      if (i == 2 && call->inputs[3] == nullptr) {
        if (call->outputs[2] != nullptr) {
          fail(DX_INVALID_ARGUMENT,
               "cpu: backward of dx.conv2d: gradient 2 requested for an absent bias");
        }
        continue;
      }
      expect_tensor(call->inputs[1 + i], t, role);
      if (call->outputs[i] != nullptr) {
        expect_tensor(call->outputs[i], t, "input gradient " + std::to_string(i));
      }
    }
    const ConvPlan p = plan_conv(call, 1);
    const View dyv = make_view(call->inputs[0], "output gradient 0");
    expect_shape(dyv, p.out_shape, 4, "output gradient 0");
    View dxv, dwv, dbv;
    const bool want_dx = call->outputs[0] != nullptr, want_dw = call->outputs[1] != nullptr;
    const bool want_db = p.has_bias && call->outputs[2] != nullptr;
    if (want_dx) {
      dxv = make_view(call->outputs[0], "gradient output 0");
      expect_shape(dxv, p.x.shape, 4, "gradient output 0");
    }
    if (want_dw) {
      dwv = make_view(call->outputs[1], "gradient output 1");
      expect_shape(dwv, p.w.shape, 4, "gradient output 1");
    }
    if (want_db) {
      dbv = make_view(call->outputs[2], "gradient output 2");
      expect_shape(dbv, p.b.shape, 1, "gradient output 2");
    }
    const int64_t nb = p.chunk();
    check_blas_dims({p.k, nb * p.p, p.cout_g}, "backward of dx.conv2d");

    const DenseInput<F, S> dy(dyv);
    if (want_db) {
      std::vector<F> db(static_cast<size_t>(p.cout));
      fork_join(p.cout, dyv.count(), [&](int64_t begin, int64_t end) {
        for (int64_t co = begin; co < end; ++co) {
          double sum = 0;
          for (int64_t n = 0; n < p.n; ++n) {
            const F* src = dy.data() + (n * p.cout + co) * p.p;
            double partial = 0;
#pragma omp simd reduction(+ : partial)
            for (int64_t i = 0; i < p.p; ++i) partial += static_cast<double>(src[i]);
            sum += partial;
          }
          db[static_cast<size_t>(co)] = static_cast<F>(sum);
        }
      });
      store_dense<F, S>(db.data(), dbv);
    }
    if (!want_dx && !want_dw) return;

    const DenseInput<F, S> x(want_dw ? p.x : empty_view(p.x));
    const DenseInput<F, S> w(want_dx ? p.w : empty_view(p.w));
    const DenseOutput<F, S> dx(want_dx ? dxv : empty_view(p.x), true);
    const DenseOutput<F, S> dw(want_dw ? dwv : empty_view(p.w), true);
    const bool direct_col = p.pointwise && nb == 1;
    std::vector<F> col((want_dw && !direct_col) ? static_cast<size_t>(p.k * nb * p.p) : 0);
    std::vector<F> dcol((want_dx && !direct_col) ? static_cast<size_t>(p.k * nb * p.p) : 0);
    std::vector<F> dy_g(nb == 1 ? 0 : static_cast<size_t>(p.cout_g * nb * p.p));
    for (int64_t n0 = 0; n0 < p.n; n0 += nb) {
      const int64_t count = std::min(nb, p.n - n0);
      const int64_t cols = count * p.p;
      for (int64_t g = 0; g < p.groups; ++g) {
        // dY_g: (cout_g, cols), straight from dy for one image, else gathered.
        const F* dy_matrix;
        int64_t ld_dy;
        if (nb == 1) {
          dy_matrix = dy.data() + (n0 * p.cout + g * p.cout_g) * p.p;
          ld_dy = p.p;
        } else {
          const int64_t planes = count * p.cout_g;
          fork_join(planes, planes * p.p, [&](int64_t begin, int64_t end) {
            for (int64_t t2 = begin; t2 < end; ++t2) {
              const int64_t nn = t2 / p.cout_g, co = t2 % p.cout_g;
              const F* src = dy.data() + ((n0 + nn) * p.cout + g * p.cout_g + co) * p.p;
              std::copy(src, src + p.p, dy_g.data() + co * cols + nn * p.p);
            }
          });
          dy_matrix = dy_g.data();
          ld_dy = cols;
        }
        if (want_dw) {
          const F* col_matrix;
          int64_t ld_col;
          if (direct_col) {
            col_matrix = x.data() + (n0 * p.cin + g * p.cin_g) * p.p;
            ld_col = p.p;
          } else {
            im2col(p, x.data(), n0, count, g, col.data());
            col_matrix = col.data();
            ld_col = cols;
          }
          gemm<F>(false, true, p.cout_g, p.k, cols, F(1), dy_matrix, ld_dy, col_matrix, ld_col,
                  F(1), dw.data() + g * p.cout_g * p.k, p.k);
        }
        if (want_dx) {
          const F* w_g = w.data() + g * p.cout_g * p.k;
          if (direct_col) {
            gemm<F>(true, false, p.k, p.p, p.cout_g, F(1), w_g, p.k, dy_matrix, ld_dy, F(0),
                    dx.data() + (n0 * p.cin + g * p.cin_g) * p.p, p.p);
          } else {
            gemm<F>(true, false, p.k, cols, p.cout_g, F(1), w_g, p.k, dy_matrix, ld_dy, F(0),
                    dcol.data(), cols);
            col2im(p, dcol.data(), n0, count, g, dx.data());
          }
        }
      }
    }
    if (want_dx) dx.finish();
    if (want_dw) dw.finish();
  });
}

}  // namespace

void register_pool_kernels(Registrar& r);
void register_attention_kernels(Registrar& r);

void register_conv_attention_kernels(Registrar& r) {
  // OpenBLAS results depend on its blocking and thread split, so the GEMM-based kernels do not
  // claim DETERMINISTIC (as dx.matmul).
  auto add = [&r](auto tag) {
    using T = decltype(tag);
    constexpr DLDataType t = dtype_of<T>();
    r.add("dx.conv2d", 3, 1, {t, t, t, t}, &conv2d_forward<T>, 0, &conv2d_backward<T>);
  };
  add(double{});
  add(float{});
  add(Half{});
  add(BFloat16{});
  register_pool_kernels(r);
  register_attention_kernels(r);
}

}  // namespace deepx::cpu
