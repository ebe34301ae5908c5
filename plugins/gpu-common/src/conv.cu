// dx.conv2d (NCHW / OIHW; stride, padding, dilation, groups; optional bias) as im2col + the
// portable tiled GEMM (f32-or-better products into an f64 buffer, then + bias rounded once),
// and dx.max_pool2d / dx.avg_pool2d (floor mode, the average excludes padding), forward and
// backward. The backward of conv2d: dW = dY col^T per (batch, group) summed over the batch in
// f64, dcol = W^T dY then a col2im gather, db = dY summed. Bodies in include/deepx/gpu/nn.h;
// semantics are the reference's (reference-kernels/src/conv.cc).
#include <algorithm>
#include <string>
#include <vector>

#include "backward_fns.h"
#include "nn_fns.h"
#include "nn_launch.h"

namespace deepx::gpu {
namespace {

/// Scratch memory per im2col chunk: large batches are processed in chunks of images.
constexpr int64_t kChunkBytes = int64_t{256} << 20;

struct Pair {
  int64_t h = 0, w = 0;
};

/// A 2-D attribute: an i64 (both dims) or 1 or 2 i64 values; `fallback` when unset.
Pair pair_attr(const dx_kernel_call_t* call, int slot, const char* name, Pair fallback, int64_t min_value) {
  Pair p = fallback;
  if (const dx_attr_t* a = attr_at(call, slot)) {
    if (a->type == DX_ATTR_I64) {
      p = {a->value.i64, a->value.i64};
    } else if (a->type == DX_ATTR_I64_ARRAY && a->count >= 0 && (a->count == 0 || a->value.i64s != nullptr)) {
      if (a->count == 1) p = {a->value.i64s[0], a->value.i64s[0]};
      else if (a->count == 2) p = {a->value.i64s[0], a->value.i64s[1]};
      else fail(DX_INVALID_ARGUMENT, std::string(DXG_BACKEND_NAME ": attribute ") + name + " needs 1 or 2 values");
    } else {
      fail(DX_INVALID_ARGUMENT, std::string(DXG_BACKEND_NAME ": attribute ") + name + " must be an i64 array");
    }
  }
  if (p.h < min_value || p.w < min_value) {
    fail(DX_INVALID_ARGUMENT, std::string(DXG_BACKEND_NAME ": attribute ") + name + " must be >= " + std::to_string(min_value));
  }
  return p;
}

int64_t out_extent(int64_t in, int64_t pad, int64_t dilation, int64_t kernel, int64_t stride, const char* op) {
  const int64_t span = in + 2 * pad - dilation * (kernel - 1) - 1;
  if (span < 0) fail(DX_SHAPE_MISMATCH, std::string(DXG_BACKEND_NAME ": ") + op + ": the kernel is larger than the padded input");
  return span / stride + 1;
}

// ---- conv2d -------------------------------------------------------------------------------------

enum { kConvStride = 0, kConvPadding = 1, kConvDilation = 2, kConvGroups = 3 };

struct ConvPlan {
  View x, w;
  std::optional<View> b;
  ConvGeometry g{};
  std::vector<int64_t> out_shape;
};

ConvPlan plan_conv(const dx_kernel_call_t* call, int first) {
  ConvPlan p;
  p.x = make_view(call->inputs[first], "input 0");
  p.w = make_view(call->inputs[first + 1], "input 1");
  p.b = optional_input(call, first + 2, "input 2");
  if (!dtype_is_float(p.x.dtype)) fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": dx.conv2d: F dtypes only");
  expect_dtype(p.w, p.x.dtype, "input 1");
  if (p.b) expect_dtype(*p.b, p.x.dtype, "input 2");
  const Pair stride = pair_attr(call, kConvStride, "stride", {1, 1}, 1);
  const Pair padding = pair_attr(call, kConvPadding, "padding", {0, 0}, 0);
  const Pair dilation = pair_attr(call, kConvDilation, "dilation", {1, 1}, 1);
  const int64_t groups = attr_i64(call, kConvGroups, "groups", 1);
  if (p.x.rank() != 4 || p.w.rank() != 4) fail(DX_SHAPE_MISMATCH, DXG_BACKEND_NAME ": dx.conv2d: x and weight must be rank 4 (NCHW, OIHW)");
  ConvGeometry& g = p.g;
  g.n = p.x.shape[0], g.cin = p.x.shape[1], g.h = p.x.shape[2], g.w = p.x.shape[3];
  g.cout = p.w.shape[0], g.kh = p.w.shape[2], g.kw = p.w.shape[3], g.groups = groups;
  if (groups < 1 || g.cin % groups != 0 || g.cout % groups != 0 || p.w.shape[1] != g.cin / groups) {
    fail(DX_SHAPE_MISMATCH, DXG_BACKEND_NAME ": dx.conv2d: x, weight and groups disagree");
  }
  if (p.b && (p.b->rank() != 1 || p.b->shape[0] != g.cout)) fail(DX_SHAPE_MISMATCH, DXG_BACKEND_NAME ": dx.conv2d: bias must be (C_out,)");
  g.stride_h = stride.h, g.stride_w = stride.w, g.pad_h = padding.h, g.pad_w = padding.w;
  g.dil_h = dilation.h, g.dil_w = dilation.w;
  g.ho = out_extent(g.h, g.pad_h, g.dil_h, g.kh, g.stride_h, "dx.conv2d");
  g.wo = out_extent(g.w, g.pad_w, g.dil_w, g.kw, g.stride_w, "dx.conv2d");
  p.out_shape = {g.n, g.cout, g.ho, g.wo};
  return p;
}

/// Images per im2col chunk.
int64_t chunk_images(const ConvGeometry& g) {
  if (g.groups > 65535) fail(DX_UNSUPPORTED, DXG_BACKEND_NAME ": dx.conv2d: more than 65535 groups");
  const int64_t per_image = std::max<int64_t>(1, g.groups * g.k() * g.p() * 8);
  // A GEMM grid holds at most 65535 (image, group) batches.
  const int64_t limit = std::min<int64_t>(kChunkBytes / per_image, 65535 / g.groups);
  return std::max<int64_t>(1, std::min<int64_t>(g.n, limit));
}

/// im2col of images [n0, n0 + count) into `col` (compact (count, G, K, P) of T).
void im2col(Exec& exec, const ConvPlan& p, int64_t n0, int64_t count, void* col) {
  const ConvGeometry& g = p.g;
  dispatch_float(p.x.dtype, [&](auto tag) {
    using T = tag_t<decltype(tag)>;
    Im2colFn<T> fn{g, n0, p.x.data<T>(), {p.x.strides[0], p.x.strides[1], p.x.strides[2], p.x.strides[3]},
                   static_cast<T*>(col)};
    // The body indexes col from 0 for image n0.
    launch_for_each(exec, fn, count * g.groups * g.k() * g.p());
  });
}

/// A batched GEMM over (images, groups) into or from compact buffers; strides in elements.
GemmShape conv_gemm(int64_t images, int64_t groups, int64_t m, int64_t n, int64_t k, int64_t a_rs, int64_t a_cs,
                    int64_t a_image, int64_t a_group, int64_t b_rs, int64_t b_cs, int64_t b_image, int64_t b_group,
                    int64_t c_image, int64_t c_group) {
  GemmShape s;
  s.m = m;
  s.n = n;
  s.k = k;
  s.a_rs = a_rs;
  s.a_cs = a_cs;
  s.b_rs = b_rs;
  s.b_cs = b_cs;
  s.c_rs = n;
  s.c_cs = 1;
  const std::vector<int64_t> shape{images, groups};
  s.batch = make_layout(shape, {OperandShape{shape, {c_image, c_group}}, OperandShape{shape, {a_image, a_group}},
                                OperandShape{shape, {b_image, b_group}}});
  return s;
}

template <class T>
void run_gemm_f64(Exec& exec, const GemmShape& s, const void* a, const void* b, double* c) {
  launch_gemm(exec, GemmTile<T, double>{s, static_cast<const T*>(a), static_cast<const T*>(b), c});
}

dx_error_t* conv2d_forward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    expect_arity(call, 3, 1);
    const ConvPlan p = plan_conv(call, 0);
    const View y = make_view(call->outputs[0], "output 0");
    expect_dtype(y, p.x.dtype, "output 0");
    expect_shape(y, p.out_shape, "output 0");
    expect_one_device({&p.x, &p.w, &y});
    Exec exec(call, y.device);
    const ConvGeometry& g = p.g;
    if (y.count() == 0) return exec.finish();
    ScratchPtr w_holder;
    const View wc = compact_copy(exec, p.w, w_holder);  // (Cout, K) row-major
    ScratchPtr acc = scratch(exec, y.count(), 8);      // (N, Cout, P) f64
    const int64_t chunk = chunk_images(g);
    ScratchPtr col = scratch(exec, chunk * g.groups * g.k() * g.p(), dtype_size(p.x.dtype));
    const int64_t K = g.k(), P = g.p(), cg = g.cout_g();
    for (int64_t n0 = 0; n0 < g.n; n0 += chunk) {
      const int64_t count = std::min(chunk, g.n - n0);
      im2col(exec, p, n0, count, col->get());
      // y[n, g] (Cout_g x P) = W[g] (Cout_g x K) col[n, g] (K x P)
      const GemmShape s = conv_gemm(count, g.groups, cg, P, K, K, 1, 0, cg * K, P, 1, g.groups * K * P, K * P,
                                    g.cout * P, cg * P);
      double* out = static_cast<double*>(acc->get()) + n0 * g.cout * P;
      dispatch_float(p.x.dtype, [&](auto tag) {
        using T = tag_t<decltype(tag)>;
        run_gemm_f64<T>(exec, s, wc.base, col->get(), out);
      });
    }
    round_with_bias(exec, y, acc, OperandShape{{g.cout, 1, 1}, {p.b ? p.b->strides[0] : 0, 0, 0}}, p.b);
    exec.finish();
  });
}

/// inputs: dy, x, w, b (may be null), y; outputs: dx, dw, db (db of an absent bias: not written).
dx_error_t* conv2d_backward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    expect_arity(call, 5, 3);
    const ConvPlan p = plan_conv(call, 1);
    const View dy = output_gradient(call, p.x.dtype, p.out_shape);
    const auto dx = grad_output(call, 0, p.x, "input gradient 0");
    const auto dw = grad_output(call, 1, p.w, "input gradient 1");
    const auto db = p.b ? grad_output(call, 2, *p.b, "input gradient 2") : std::nullopt;
    if (!dx && !dw && !db) return;
    Exec exec(call, dy.device);
    const ConvGeometry& g = p.g;
    const int64_t K = g.k(), P = g.p(), cg = g.cout_g();
    ScratchPtr dy_holder, w_holder;
    const View dyc = compact_copy(exec, dy, dy_holder);  // (N, Cout, P)
    const View wc = compact_copy(exec, p.w, w_holder);    // (Cout, K)
    ScratchPtr gx = dx ? zeroed_f64(exec, p.x.count()) : nullptr;
    ScratchPtr gw = dw ? zeroed_f64(exec, g.n * g.cout * K) : nullptr;  // per image, summed after
    ScratchPtr gb;
    const int64_t chunk = chunk_images(g);
    const bool work = g.n > 0 && P > 0 && K > 0 && g.cout > 0;
    ScratchPtr col = dw && work ? scratch(exec, chunk * g.groups * K * P, dtype_size(p.x.dtype)) : nullptr;
    ScratchPtr dcol = dx && work ? scratch(exec, chunk * g.groups * K * P, 8) : nullptr;
    for (int64_t n0 = 0; work && n0 < g.n; n0 += chunk) {
      const int64_t count = std::min(chunk, g.n - n0);
      const char* dy_chunk = dyc.base + n0 * g.cout * P * dtype_size(dy.dtype);
      if (dw) {
        im2col(exec, p, n0, count, col->get());
        // dW[n, g] (Cout_g x K) = dY[n, g] (Cout_g x P) col[n, g]^T (P x K)
        const GemmShape s = conv_gemm(count, g.groups, cg, K, P, P, 1, g.cout * P, cg * P, 1, P, g.groups * K * P,
                                      K * P, g.cout * K, cg * K);
        double* out = static_cast<double*>(gw->get()) + n0 * g.cout * K;
        dispatch_float(p.x.dtype, [&](auto tag) {
          using T = tag_t<decltype(tag)>;
          run_gemm_f64<T>(exec, s, dy_chunk, col->get(), out);
        });
      }
      if (dx) {
        // dcol[n, g] (K x P) = W[g]^T (K x Cout_g) dY[n, g] (Cout_g x P), then the col2im gather.
        const GemmShape s = conv_gemm(count, g.groups, K, P, cg, 1, K, 0, cg * K, P, 1, g.cout * P, cg * P,
                                      g.groups * K * P, K * P);
        dispatch_float(p.x.dtype, [&](auto tag) {
          using T = tag_t<decltype(tag)>;
          run_gemm_f64<T>(exec, s, wc.base, dy_chunk, static_cast<double*>(dcol->get()));
        });
        launch_for_each(exec, Col2imFn{g, n0, static_cast<const double*>(dcol->get()), static_cast<double*>(gx->get())},
                        count * g.cin * g.h * g.w);
      }
    }
    if (db) {
      gb = scratch(exec, g.cout, 8);
      const std::vector<int64_t> outs{g.cout}, inner_shape{g.n, g.ho, g.wo};
      const Layout outer = make_layout(outs, {OperandShape{outs, {1}}, OperandShape{outs, {dy.strides[1]}}});
      const Layout inner = make_layout(inner_shape, {OperandShape{inner_shape, {dy.strides[0], dy.strides[2], dy.strides[3]}}});
      dispatch_float(dy.dtype, [&](auto tag) {
        using T = tag_t<decltype(tag)>;
        launch_reduce(exec, ReduceFn<T>{outer, inner, dy.data<T>(), static_cast<char*>(gb->get()), DType::F64, ReduceOp::Sum},
                      g.cout);
      });
    }
    if (dx) reduce_gradient(exec, static_cast<const double*>(gx->get()), p.x.shape, *dx);
    if (dw) reduce_gradient(exec, static_cast<const double*>(gw->get()), {g.n, g.cout, p.w.shape[1], g.kh, g.kw}, *dw);
    if (db) reduce_gradient(exec, static_cast<const double*>(gb->get()), {g.cout}, *db);
    exec.finish();
  });
}

// ---- pooling ------------------------------------------------------------------------------------

enum { kPoolKernel = 0, kPoolStride = 1, kPoolPadding = 2 };

PoolGeometry plan_pool(const dx_kernel_call_t* call, const View& x, const char* op) {
  if (!dtype_is_float(x.dtype)) fail(DX_INVALID_ARGUMENT, std::string(DXG_BACKEND_NAME ": ") + op + ": F dtypes only");
  if (x.rank() != 4) fail(DX_SHAPE_MISMATCH, std::string(DXG_BACKEND_NAME ": ") + op + ": x must be rank 4 (NCHW)");
  if (attr_at(call, kPoolKernel) == nullptr) fail(DX_INVALID_ARGUMENT, std::string(DXG_BACKEND_NAME ": ") + op + ": attribute kernel is required");
  const Pair kernel = pair_attr(call, kPoolKernel, "kernel", {1, 1}, 1);
  const Pair stride = pair_attr(call, kPoolStride, "stride", kernel, 1);
  const Pair padding = pair_attr(call, kPoolPadding, "padding", {0, 0}, 0);
  if (2 * padding.h > kernel.h || 2 * padding.w > kernel.w) {
    fail(DX_INVALID_ARGUMENT, std::string(DXG_BACKEND_NAME ": ") + op + ": padding must be at most half the kernel");
  }
  PoolGeometry g{};
  g.n = x.shape[0], g.c = x.shape[1], g.h = x.shape[2], g.w = x.shape[3];
  g.kh = kernel.h, g.kw = kernel.w, g.sh = stride.h, g.sw = stride.w, g.ph = padding.h, g.pw = padding.w;
  g.ho = out_extent(g.h, g.ph, 1, g.kh, g.sh, op);
  g.wo = out_extent(g.w, g.pw, 1, g.kw, g.sw, op);
  return g;
}

template <bool kMax>
dx_error_t* pool_forward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    const char* op = kMax ? "dx.max_pool2d" : "dx.avg_pool2d";
    expect_arity(call, 1, 1);
    const View x = make_view(call->inputs[0], "input 0");
    const PoolGeometry g = plan_pool(call, x, op);
    const View y = make_view(call->outputs[0], "output 0");
    expect_dtype(y, x.dtype, "output 0");
    expect_shape(y, {g.n, g.c, g.ho, g.wo}, "output 0");
    expect_one_device({&x, &y});
    Exec exec(call, y.device);
    // y may alias x (same buffer): through a compact staging copy then.
    const std::optional<View> yo = y;
    const StagedOutput target = stage_if_aliased(exec, yo, {&x});
    const View& out = target.out;
    dispatch_float(x.dtype, [&](auto tag) {
      using T = tag_t<decltype(tag)>;
      PoolFn<T> fn{g, kMax, x.data<T>(), {x.strides[0], x.strides[1], x.strides[2], x.strides[3]}, out.data<T>(),
                   {out.strides[0], out.strides[1], out.strides[2], out.strides[3]}};
      launch_for_each(exec, fn, y.count());
    });
    unstage(exec, target, yo);
    exec.finish();
  });
}

/// inputs: dy, x, y; outputs: dx.
template <bool kMax>
dx_error_t* pool_backward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    const char* op = kMax ? "dx.max_pool2d" : "dx.avg_pool2d";
    expect_arity(call, 3, 1);
    const View dy = make_view(call->inputs[0], "output gradient 0");
    const View x = make_view(call->inputs[1], "forward input 0");
    const PoolGeometry g = plan_pool(call, x, op);
    expect_dtype(dy, x.dtype, "output gradient 0");
    expect_shape(dy, {g.n, g.c, g.ho, g.wo}, "output gradient 0");
    const auto dx = grad_output(call, 0, x, "input gradient 0");
    if (!dx) return;
    Exec exec(call, dx->device);
    const StagedOutput target = stage_if_aliased(exec, dx, {&x, &dy});
    const View& out = target.out;
    dispatch_float(x.dtype, [&](auto tag) {
      using T = tag_t<decltype(tag)>;
      PoolGradFn<T> fn{g,
                       kMax,
                       x.data<T>(),
                       {x.strides[0], x.strides[1], x.strides[2], x.strides[3]},
                       dy.data<T>(),
                       {dy.strides[0], dy.strides[1], dy.strides[2], dy.strides[3]},
                       out.data<T>(),
                       {out.strides[0], out.strides[1], out.strides[2], out.strides[3]}};
      launch_for_each(exec, fn, x.count());
    });
    unstage(exec, target, dx);
    exec.finish();
  });
}

}  // namespace

void register_conv_kernels(Registrar& r) {
  for (DType d : float_types()) {
    r.add("dx.conv2d", 3, 1, {d, d, d, d}, &conv2d_forward, kDeterministic, &conv2d_backward);
    r.add("dx.max_pool2d", 1, 1, {d, d}, &pool_forward<true>, kDeterministic, &pool_backward<true>);
    r.add("dx.avg_pool2d", 1, 1, {d, d}, &pool_forward<false>, kDeterministic, &pool_backward<false>);
  }
}

}  // namespace deepx::gpu
