// Neural-network kernels, forward and backward: dx.linear (the matmul GEMM engines: cuBLAS on
// CUDA, else the portable tiled GEMM into an f64 buffer with a once-rounding bias epilogue),
// dx.log_softmax, dx.layer_norm, dx.rms_norm, dx.batch_norm, dx.embedding, dx.cross_entropy.
// Bodies in include/deepx/gpu/nn.h. Semantics, signatures and the backward contracts are the
// reference's (reference-kernels/src/nn.cc).
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "backward_fns.h"
#include "nn_fns.h"
#include "nn_launch.h"

namespace deepx::gpu {
namespace {

// ---- linear -------------------------------------------------------------------------------------

/// x (..., in) as a matrix of M rows: its row stride, or a compact copy when its batch dims do
/// not collapse into one stride.
struct Rows {
  View v;
  int64_t m = 0, rs = 0, cs = 0;
  ScratchPtr holder;
};

Rows as_rows(Exec& exec, const View& t) {
  Rows r;
  r.v = t;
  const std::vector<int64_t> batch(t.shape.begin(), t.shape.end() - 1);
  const std::vector<int64_t> batch_strides(t.strides.begin(), t.strides.end() - 1);
  const Layout l = make_layout(batch, {OperandShape{batch, batch_strides}});
  r.m = count_of(batch);
  if (l.rank > 1) {
    r.v = compact_copy(exec, t, r.holder);
    r.rs = t.shape.back();
    r.cs = 1;
    return r;
  }
  r.rs = l.rank == 1 ? l.strides[0][0] : 0;
  r.cs = t.strides.back();
  return r;
}

GemmShape plain_gemm(int64_t m, int64_t n, int64_t k, int64_t a_rs, int64_t a_cs, int64_t b_rs, int64_t b_cs,
                     int64_t c_rs, int64_t c_cs) {
  GemmShape s;
  s.m = m;
  s.n = n;
  s.k = k;
  s.a_rs = a_rs;
  s.a_cs = a_cs;
  s.b_rs = b_rs;
  s.b_cs = b_cs;
  s.c_rs = c_rs;
  s.c_cs = c_cs;
  const OperandShape none{{}, {}};
  s.batch = make_layout({}, {none, none, none});
  return s;
}

/// The portable GEMM of storage type T into a compact f64 (m x n) buffer.
ScratchPtr gemm_to_f64(Exec& exec, DType dtype, GemmShape s, const char* a, const char* b) {
  ScratchPtr out = scratch(exec, s.m * s.n, 8);
  s.c_rs = s.n;
  s.c_cs = 1;
  dispatch_float(dtype, [&](auto tag) {
    using T = tag_t<decltype(tag)>;
    launch_gemm(exec, GemmTile<T, double>{s, reinterpret_cast<const T*>(a), reinterpret_cast<const T*>(b),
                                          static_cast<double*>(out->get())});
  });
  return out;
}

struct LinearPlan {
  View x, w;
  std::optional<View> b;
  std::vector<int64_t> out_shape;
  int64_t in = 0, out = 0;
};

LinearPlan plan_linear(const dx_kernel_call_t* call, int first) {
  LinearPlan p;
  p.x = make_view(call->inputs[first], "input 0");
  p.w = make_view(call->inputs[first + 1], "input 1");
  p.b = optional_input(call, first + 2, "input 2");
  if (!dtype_is_float(p.x.dtype)) fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": dx.linear: F dtypes only");
  expect_dtype(p.w, p.x.dtype, "input 1");
  if (p.b) expect_dtype(*p.b, p.x.dtype, "input 2");
  if (p.x.rank() < 1 || p.w.rank() != 2) {
    fail(DX_SHAPE_MISMATCH, DXG_BACKEND_NAME ": dx.linear needs x of rank >= 1 and a rank-2 weight");
  }
  p.in = p.w.shape[1];
  p.out = p.w.shape[0];
  if (p.x.shape.back() != p.in) fail(DX_SHAPE_MISMATCH, DXG_BACKEND_NAME ": dx.linear: x and weight disagree on the input features");
  if (p.b && (p.b->rank() != 1 || p.b->shape[0] != p.out)) fail(DX_SHAPE_MISMATCH, DXG_BACKEND_NAME ": dx.linear: bias must be (out,)");
  p.out_shape.assign(p.x.shape.begin(), p.x.shape.end() - 1);
  p.out_shape.push_back(p.out);
  return p;
}

dx_error_t* linear_forward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    expect_arity(call, 3, 1);
    const LinearPlan p = plan_linear(call, 0);
    const View y = make_view(call->outputs[0], "output 0");
    expect_dtype(y, p.x.dtype, "output 0");
    if (y.shape != p.out_shape) fail(DX_SHAPE_MISMATCH, DXG_BACKEND_NAME ": dx.linear: output shape " + shape_string(y.shape));
    expect_one_device({&p.x, &p.w, &y});
    Exec exec(call, y.device);
    if (y.count() == 0) return exec.finish();
    Rows xr = as_rows(exec, p.x);
    // cuBLAS (as dx.matmul): y rows collapsible, no aliasing; the bias seeds y, beta = 1.
    const Rows yr = [&] {
      Rows r;
      const std::vector<int64_t> batch(y.shape.begin(), y.shape.end() - 1);
      const Layout l = make_layout(batch, {OperandShape{batch, std::vector<int64_t>(y.strides.begin(), y.strides.end() - 1)}});
      r.m = l.rank;  // rank after collapsing (1 or less: a matrix)
      r.rs = l.rank == 1 ? l.strides[0][0] : 0;
      r.cs = y.strides.back();
      return r;
    }();
    const bool alias = y.base == p.x.base || y.base == p.w.base || (p.b && y.base == p.b->base);
    const GemmShape direct = plain_gemm(xr.m, p.out, p.in, xr.rs, xr.cs, p.w.strides[1], p.w.strides[0], yr.rs, yr.cs);
#if defined(DXG_BACKEND_CUDA)
    if (yr.m <= 1 && !alias && !exec.state().portable_gemm) {
      if (p.b) {
        const Layout l = make_layout(y.shape, {y.operand(), p.b->operand()});
        dispatch_size(y.dtype, [&](auto tag) {
          using W = tag_t<decltype(tag)>;
          launch_for_each(exec, CopyWordsFn<W>{l, y.data<W>(), p.b->data<W>()}, l.count);
        });
      }
      if (gemm_on_blas(exec, y.dtype, direct, xr.v.base, p.w.base, y.base, p.b.has_value())) return exec.finish();
    }
#else
    (void)alias;
#endif
    // Portable: f32-or-better products into an f64 buffer, then + bias, rounded once.
    ScratchPtr acc = gemm_to_f64(exec, y.dtype, direct, xr.v.base, p.w.base);
    round_with_bias(exec, y, acc, p.b ? p.b->operand() : OperandShape{{p.out}, {0}}, p.b);
    exec.finish();
  });
}

/// inputs: dy, x, w, b (may be null), y; outputs: dx, dw, db.
dx_error_t* linear_backward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    expect_arity(call, 5, 3);
    const LinearPlan p = plan_linear(call, 1);
    const View dy = make_view(call->inputs[0], "output gradient 0");
    expect_dtype(dy, p.x.dtype, "output gradient 0");
    if (dy.shape != p.out_shape) fail(DX_SHAPE_MISMATCH, DXG_BACKEND_NAME ": dx.linear backward: output gradient shape");
    if (!p.b && call->outputs[2] != nullptr) {
      fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": dx.linear backward: a bias gradient was requested without a bias");
    }
    const auto dx = grad_output(call, 0, p.x, "input gradient 0");
    const auto dw = grad_output(call, 1, p.w, "input gradient 1");
    const auto db = p.b ? grad_output(call, 2, *p.b, "input gradient 2") : std::nullopt;
    if (!dx && !dw && !db) return;
    Exec exec(call, dy.device);
    Rows xr = as_rows(exec, p.x);
    Rows gr = as_rows(exec, dy);
    ScratchPtr gx, gw, gb;
    if (dx) {  // dx = dy W: (M x out) (out x in)
      gx = gemm_to_f64(exec, dy.dtype, plain_gemm(xr.m, p.in, p.out, gr.rs, gr.cs, p.w.strides[0], p.w.strides[1], 0, 0),
                       gr.v.base, p.w.base);
    }
    if (dw) {  // dw = dy^T x: (out x M) (M x in)
      gw = gemm_to_f64(exec, dy.dtype, plain_gemm(p.out, p.in, xr.m, gr.cs, gr.rs, xr.rs, xr.cs, 0, 0), gr.v.base,
                       xr.v.base);
    }
    if (db) {  // db = dy summed over the rows, in f64
      gb = scratch(exec, p.out, 8);
      const View& g = gr.v;
      const std::vector<int64_t> rows{xr.m}, outs{p.out};
      const Layout outer = make_layout(outs, {OperandShape{outs, {1}}, OperandShape{outs, {g.strides.back()}}});
      const Layout inner = make_layout(rows, {OperandShape{rows, {xr.m > 1 ? gr.rs : 0}}});
      dispatch_float(dy.dtype, [&](auto tag) {
        using T = tag_t<decltype(tag)>;
        ReduceFn<T> fn{outer, inner, g.data<T>(), static_cast<char*>(gb->get()), DType::F64, ReduceOp::Sum};
        launch_reduce(exec, fn, p.out);
      });
    }
    if (dx) reduce_gradient(exec, static_cast<const double*>(gx->get()), p.x.shape, *dx);
    if (dw) reduce_gradient(exec, static_cast<const double*>(gw->get()), p.w.shape, *dw);
    if (db) reduce_gradient(exec, static_cast<const double*>(gb->get()), p.b->shape, *db);
    exec.finish();
  });
}

// ---- log_softmax ------------------------------------------------------------------------------

/// Splits views along `axis` into rows: the outer layout (one operand per view), the line's
/// length and each view's stride along it.
struct Lines {
  Layout outer;
  int64_t length = 1;
  std::vector<int64_t> strides;
};

Lines lines_of(const std::vector<const View*>& views, int64_t axis) {
  Lines r;
  const View& first = *views.front();
  std::vector<int64_t> outer_shape;
  std::vector<std::vector<int64_t>> outer_strides(views.size());
  r.strides.assign(views.size(), 0);
  for (int d = 0; d < first.rank(); ++d) {
    const auto u = static_cast<size_t>(d);
    if (d == axis) {
      r.length = first.shape[u];
      for (size_t k = 0; k < views.size(); ++k) r.strides[k] = views[k]->strides[u];
    } else {
      outer_shape.push_back(first.shape[u]);
      for (size_t k = 0; k < views.size(); ++k) outer_strides[k].push_back(views[k]->strides[u]);
    }
  }
  std::vector<OperandShape> ops;
  for (size_t k = 0; k < views.size(); ++k) ops.push_back(OperandShape{outer_shape, outer_strides[k]});
  r.outer = make_layout(outer_shape, ops);
  return r;
}

dx_error_t* log_softmax_forward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    expect_arity(call, 1, 1);
    const View x = make_view(call->inputs[0], "input 0");
    const View y = make_view(call->outputs[0], "output 0");
    expect_dtype(y, x.dtype, "output 0");
    expect_same_shape(y, x, "output 0");
    expect_one_device({&x, &y});
    const int64_t axis = softmax_axis(call, x.rank());
    Exec exec(call, y.device);
    const Lines l = lines_of({&y, &x}, axis);
    if (l.length > 0 && l.outer.count > 0) {
      dispatch_float(x.dtype, [&](auto tag) {
        using T = tag_t<decltype(tag)>;
        launch_rows(exec, LogSoftmaxFn<T>{l.outer, l.length, l.strides[1], l.strides[0], x.data<T>(), y.data<T>()},
                    l.outer.count);
      });
    }
    exec.finish();
  });
}

/// inputs: dy, x, y; outputs: dx.
dx_error_t* log_softmax_backward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    const GradOperands operands = grad_operands(call);
    const View &dy = operands.dy, &x = operands.x;
    expect_same_shape(dy, x, "output gradient 0");
    const int64_t axis = softmax_axis(call, x.rank());
    const auto dx = grad_output(call, 0, x, "input gradient 0");
    if (!dx) return;
    Exec exec(call, dx->device);
    // dx may alias dy or x: through a compact copy of the result.
    const StagedOutput target = stage_if_aliased(exec, dx, {&dy, &x});
    const View& out = target.out;
    const Lines l = lines_of({&out, &x, &dy}, axis);
    if (l.length > 0 && l.outer.count > 0) {
      dispatch_float(x.dtype, [&](auto tag) {
        using T = tag_t<decltype(tag)>;
        launch_rows(exec,
                    LogSoftmaxGradFn<T>{l.outer, l.length, l.strides[1], l.strides[2], l.strides[0], x.data<T>(),
                                        dy.data<T>(), out.data<T>(), x.rank() == 0},
                    l.outer.count);
      });
    }
    unstage(exec, target, dx);
    exec.finish();
  });
}

// ---- layer_norm, rms_norm ---------------------------------------------------------------------

enum { kNormAxis = 0, kNormEps = 1 };

/// The split of x at the normalisation axis: outer (rows) and inner (normalised) dims.
struct NormPlan {
  int64_t axis = 0;
  std::vector<int64_t> outer, inner, stats_shape;
  double eps = 1e-5;
};

NormPlan plan_norm(const dx_kernel_call_t* call, const View& x) {
  NormPlan p;
  if (!dtype_is_float(x.dtype)) fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": normalisation: F dtypes only");
  const int64_t rank = x.rank();
  const int64_t attr = attr_i64(call, kNormAxis, "axis", -1);
  p.axis = attr < 0 ? attr + rank : attr;
  if (p.axis < 0 || p.axis >= rank) {
    fail(DX_OUT_OF_RANGE, DXG_BACKEND_NAME ": normalisation axis " + std::to_string(attr) + " is out of range");
  }
  p.outer.assign(x.shape.begin(), x.shape.begin() + p.axis);
  p.inner.assign(x.shape.begin() + p.axis, x.shape.end());
  p.stats_shape = p.outer;
  p.stats_shape.resize(x.shape.size(), 1);
  p.eps = attr_f64(call, kNormEps, "eps", 1e-5);
  return p;
}

/// Outer strides (first `axis` dims) and inner strides (the rest) of a view of x's shape.
std::vector<int64_t> head(const View& v, int64_t axis) { return {v.strides.begin(), v.strides.begin() + axis}; }
std::vector<int64_t> tail(const View& v, int64_t axis) { return {v.strides.begin() + axis, v.strides.end()}; }

std::optional<View> norm_param(const dx_kernel_call_t* call, int i, const View& x, const NormPlan& p, const char* what) {
  auto t = optional_input(call, i, what);
  if (t) {
    expect_dtype(*t, x.dtype, what);
    if (t->shape != p.inner) {
      fail(DX_SHAPE_MISMATCH, std::string(DXG_BACKEND_NAME ": ") + what + " has shape " + shape_string(t->shape) +
                                  ", the normalised shape is " + shape_string(p.inner));
    }
  }
  return t;
}

OperandShape param_operand(const std::optional<View>& t, const NormPlan& p) {
  return t ? t->operand() : OperandShape{p.inner, std::vector<int64_t>(p.inner.size(), 0)};
}

/// The three tensors shaped like layer_norm's outputs (y, mean, rstd, or their gradients),
/// `t[0..2]` named `role` 0, 1, 2: x's dtype (`role` in that message), then x's shape and the
/// statistics' shape twice.
struct NormTriple {
  View y, mean, rstd;
};
NormTriple norm_triple(const DLTensor* const* t, const View& x, const NormPlan& p, const std::string& role) {
  const std::string name[3] = {role + " 0", role + " 1", role + " 2"};
  NormTriple r{make_view(t[0], name[0].c_str()), make_view(t[1], name[1].c_str()), make_view(t[2], name[2].c_str())};
  for (const View* v : {&r.y, &r.mean, &r.rstd}) expect_dtype(*v, x.dtype, role.c_str());
  expect_shape(r.y, x.shape, name[0].c_str());
  expect_shape(r.mean, p.stats_shape, name[1].c_str());
  expect_shape(r.rstd, p.stats_shape, name[2].c_str());
  return r;
}

dx_error_t* layer_norm_forward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    expect_arity(call, 3, 3);
    const View x = make_view(call->inputs[0], "input 0");
    const NormPlan p = plan_norm(call, x);
    const auto w = norm_param(call, 1, x, p, "weight");
    const auto b = norm_param(call, 2, x, p, "bias");
    const NormTriple outputs = norm_triple(call->outputs, x, p, "output");
    const View &y = outputs.y, &mean = outputs.mean, &rstd = outputs.rstd;
    expect_one_device({&x, &y, &mean, &rstd});
    Exec exec(call, y.device);
    // y may alias x: through a compact buffer then.
    const std::optional<View> yo = y;
    const StagedOutput target = stage_if_aliased(exec, yo, {&x});
    const View& out = target.out;
    const Layout outer = make_layout(p.outer, {OperandShape{p.outer, head(x, p.axis)}, OperandShape{p.outer, head(out, p.axis)},
                                               OperandShape{p.outer, head(mean, p.axis)}, OperandShape{p.outer, head(rstd, p.axis)}});
    const Layout inner = make_layout(p.inner, {OperandShape{p.inner, tail(x, p.axis)}, OperandShape{p.inner, tail(out, p.axis)},
                                               param_operand(w, p), param_operand(b, p)});
    dispatch_float(x.dtype, [&](auto tag) {
      using T = tag_t<decltype(tag)>;
      launch_rows(exec, LayerNormFn<T>{outer, inner, x.data<T>(), out.data<T>(), mean.data<T>(), rstd.data<T>(),
                                       data_or_null<T>(w), data_or_null<T>(b), p.eps},
                  outer.count);
    });
    unstage(exec, target, yo);
    exec.finish();
  });
}

/// Parameter gradients of a norm backward: f64 sums over the rows, rounded into dw / db.
void store_norm_param_grads(Exec& exec, const Layout& outer_x_dy, const NormPlan& p, const View& x, const View& dy,
                            const double* stats, const std::optional<View>& dw, const std::optional<View>& db) {
  if (!dw && !db) return;
  const int64_t n = count_of(p.inner);
  ScratchPtr gw = scratch(exec, n, 8), gb = scratch(exec, n, 8);
  const std::vector<int64_t> cs = compact_strides(p.inner);
  const Layout inner = make_layout(p.inner, {OperandShape{p.inner, tail(x, p.axis)}, OperandShape{p.inner, tail(dy, p.axis)},
                                             OperandShape{p.inner, cs}, OperandShape{p.inner, cs}});
  dispatch_float(x.dtype, [&](auto tag) {
    using T = tag_t<decltype(tag)>;
    launch_for_each(exec,
                    NormParamGradFn<T>{outer_x_dy, inner, x.data<T>(), dy.data<T>(), stats,
                                       static_cast<double*>(gw->get()), static_cast<double*>(gb->get())},
                    inner.count);
  });
  if (dw) reduce_gradient(exec, static_cast<const double*>(gw->get()), p.inner, *dw);
  if (db) reduce_gradient(exec, static_cast<const double*>(gb->get()), p.inner, *db);
}

/// inputs: dy, dmean, drstd, x, w, b, y, mean, rstd; outputs: dx, dw, db.
dx_error_t* layer_norm_backward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    expect_arity(call, 9, 3);
    const View x = make_view(call->inputs[3], "forward input 0");
    const NormPlan p = plan_norm(call, x);
    const auto w = norm_param(call, 4, x, p, "weight");
    const auto b = norm_param(call, 5, x, p, "bias");
    const NormTriple grads = norm_triple(call->inputs, x, p, "output gradient");
    const View &dy = grads.y, &dmean = grads.mean, &drstd = grads.rstd;
    if ((!w && call->outputs[1] != nullptr) || (!b && call->outputs[2] != nullptr)) {
      fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": dx.layer_norm backward: a gradient was requested for an absent input");
    }
    const auto dx = grad_output(call, 0, x, "input gradient 0");
    std::optional<View> dw, db;
    if (w) dw = grad_output(call, 1, *w, "input gradient 1");
    if (b) db = grad_output(call, 2, *b, "input gradient 2");
    if (!dx && !dw && !db) return;
    Exec exec(call, x.device);
    StagedOutput target = stage_if_aliased(exec, dx, {&x, &dy, &dmean, &drstd});
    const View& gx = dx ? target.out : x;  // a layout placeholder when dx is not wanted
    const int64_t rows = count_of(p.outer);
    ScratchPtr stats = scratch(exec, 2 * rows, 8);
    const Layout outer = make_layout(p.outer, {OperandShape{p.outer, head(x, p.axis)}, OperandShape{p.outer, head(gx, p.axis)},
                                               OperandShape{p.outer, head(dy, p.axis)}});
    const Layout stats_outer = make_layout(p.outer, {OperandShape{p.outer, head(dmean, p.axis)},
                                                     OperandShape{p.outer, head(drstd, p.axis)}});
    const Layout inner = make_layout(p.inner, {OperandShape{p.inner, tail(x, p.axis)}, OperandShape{p.inner, tail(gx, p.axis)},
                                               OperandShape{p.inner, tail(dy, p.axis)}, param_operand(w, p)});
    dispatch_float(x.dtype, [&](auto tag) {
      using T = tag_t<decltype(tag)>;
      launch_rows(exec,
                  LayerNormGradFn<T>{outer, stats_outer, inner, x.data<T>(), dy.data<T>(), dmean.data<T>(),
                                     drstd.data<T>(), data_or_null<T>(w), dx ? gx.data<T>() : nullptr,
                                     static_cast<double*>(stats->get()), p.eps},
                  rows);
    });
    const Layout outer_x_dy = make_layout(p.outer, {OperandShape{p.outer, head(x, p.axis)}, OperandShape{p.outer, head(dy, p.axis)}});
    store_norm_param_grads(exec, outer_x_dy, p, x, dy, static_cast<const double*>(stats->get()), dw, db);
    unstage(exec, target, dx);
    exec.finish();
  });
}

dx_error_t* rms_norm_forward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    expect_arity(call, 2, 1);
    const View x = make_view(call->inputs[0], "input 0");
    const NormPlan p = plan_norm(call, x);
    const auto w = norm_param(call, 1, x, p, "weight");
    const View y = make_view(call->outputs[0], "output 0");
    expect_dtype(y, x.dtype, "output 0");
    expect_shape(y, x.shape, "output 0");
    expect_one_device({&x, &y});
    Exec exec(call, y.device);
    const std::optional<View> yo = y;
    StagedOutput target = stage_if_aliased(exec, yo, {&x});
    const View& out = target.out;
    const Layout outer = make_layout(p.outer, {OperandShape{p.outer, head(x, p.axis)}, OperandShape{p.outer, head(out, p.axis)}});
    const Layout inner = make_layout(p.inner, {OperandShape{p.inner, tail(x, p.axis)}, OperandShape{p.inner, tail(out, p.axis)},
                                               param_operand(w, p)});
    dispatch_float(x.dtype, [&](auto tag) {
      using T = tag_t<decltype(tag)>;
      launch_rows(exec, RmsNormFn<T>{outer, inner, x.data<T>(), out.data<T>(), data_or_null<T>(w), p.eps}, outer.count);
    });
    unstage(exec, target, yo);
    exec.finish();
  });
}

/// inputs: dy, x, w (may be null), y; outputs: dx, dw.
dx_error_t* rms_norm_backward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    expect_arity(call, 4, 2);
    const View x = make_view(call->inputs[1], "forward input 0");
    const NormPlan p = plan_norm(call, x);
    const auto w = norm_param(call, 2, x, p, "weight");
    const View dy = output_gradient(call, x.dtype, x.shape);
    if (!w && call->outputs[1] != nullptr) {
      fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": dx.rms_norm backward: a weight gradient was requested without a weight");
    }
    const auto dx = grad_output(call, 0, x, "input gradient 0");
    std::optional<View> dw;
    if (w) dw = grad_output(call, 1, *w, "input gradient 1");
    if (!dx && !dw) return;
    Exec exec(call, x.device);
    StagedOutput target = stage_if_aliased(exec, dx, {&x, &dy});
    const View& gx = dx ? target.out : x;
    const int64_t rows = count_of(p.outer);
    ScratchPtr stats = scratch(exec, 2 * rows, 8);
    const Layout outer = make_layout(p.outer, {OperandShape{p.outer, head(x, p.axis)}, OperandShape{p.outer, head(gx, p.axis)},
                                               OperandShape{p.outer, head(dy, p.axis)}});
    const Layout inner = make_layout(p.inner, {OperandShape{p.inner, tail(x, p.axis)}, OperandShape{p.inner, tail(gx, p.axis)},
                                               OperandShape{p.inner, tail(dy, p.axis)}, param_operand(w, p)});
    dispatch_float(x.dtype, [&](auto tag) {
      using T = tag_t<decltype(tag)>;
      launch_rows(exec,
                  RmsNormGradFn<T>{outer, inner, x.data<T>(), dy.data<T>(), data_or_null<T>(w),
                                   dx ? gx.data<T>() : nullptr, static_cast<double*>(stats->get()), p.eps},
                  rows);
    });
    const Layout outer_x_dy = make_layout(p.outer, {OperandShape{p.outer, head(x, p.axis)}, OperandShape{p.outer, head(dy, p.axis)}});
    store_norm_param_grads(exec, outer_x_dy, p, x, dy, static_cast<const double*>(stats->get()), dw, std::nullopt);
    unstage(exec, target, dx);
    exec.finish();
  });
}

// ---- batch_norm -------------------------------------------------------------------------------

enum { kBnTraining = 0, kBnMomentum = 1, kBnEps = 2 };

struct BatchNormPlan {
  View x;
  std::optional<View> w, b, running_mean, running_var;
  bool training = false;
  double momentum = 0.1, eps = 1e-5;
  int64_t channels = 0;
  std::vector<int64_t> member_shape;  // x's shape without dim 1
};

BatchNormPlan plan_batch_norm(const dx_kernel_call_t* call, int first) {
  BatchNormPlan p;
  p.x = make_view(call->inputs[first], "input 0");
  if (!dtype_is_float(p.x.dtype)) fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": dx.batch_norm: F dtypes only");
  p.w = optional_input(call, first + 1, "input 1");
  p.b = optional_input(call, first + 2, "input 2");
  p.running_mean = optional_input(call, first + 3, "input 3");
  p.running_var = optional_input(call, first + 4, "input 4");
  p.training = attr_bool(call, kBnTraining, "training", false);
  p.momentum = attr_f64(call, kBnMomentum, "momentum", 0.1);
  p.eps = attr_f64(call, kBnEps, "eps", 1e-5);
  if (p.x.rank() < 2) fail(DX_SHAPE_MISMATCH, DXG_BACKEND_NAME ": dx.batch_norm: x must be (N, C, ...)");
  p.channels = p.x.shape[1];
  for (const auto* t : {&p.w, &p.b, &p.running_mean, &p.running_var}) {
    if (!*t) continue;
    expect_dtype(**t, p.x.dtype, "per-channel input");
    if ((*t)->rank() != 1 || (*t)->shape[0] != p.channels) {
      fail(DX_SHAPE_MISMATCH, DXG_BACKEND_NAME ": dx.batch_norm: per-channel tensors must be (C,)");
    }
  }
  if (!p.training && (!p.running_mean || !p.running_var)) {
    fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": dx.batch_norm: evaluation mode needs running_mean and running_var");
  }
  p.member_shape = p.x.shape;
  p.member_shape.erase(p.member_shape.begin() + 1);
  return p;
}

std::vector<int64_t> without_channel(const View& v) {
  std::vector<int64_t> s = v.strides;
  s.erase(s.begin() + 1);
  return s;
}

template <class T, class V>
ChannelVec<T> channel_vec(const std::optional<V>& v) {
  return v ? ChannelVec<T>{v->template data<std::remove_const_t<T>>(), v->strides[0]} : ChannelVec<T>{nullptr, 0};
}

dx_error_t* batch_norm_forward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    expect_arity(call, 5, 1);
    const BatchNormPlan p = plan_batch_norm(call, 0);
    const View y = make_view(call->outputs[0], "output 0");
    expect_dtype(y, p.x.dtype, "output 0");
    expect_shape(y, p.x.shape, "output 0");
    Exec exec(call, y.device);
    const std::optional<View> yo = y;
    StagedOutput target = stage_if_aliased(exec, yo, {&p.x});
    const View& out = target.out;
    const Layout members = make_layout(p.member_shape, {OperandShape{p.member_shape, without_channel(p.x)},
                                                        OperandShape{p.member_shape, without_channel(out)}});
    dispatch_float(p.x.dtype, [&](auto tag) {
      using T = tag_t<decltype(tag)>;
      BatchNormFn<T> fn{members, p.x.strides[1], out.strides[1], p.x.data<T>(), out.data<T>(),
                        channel_vec<T>(p.w), channel_vec<T>(p.b), channel_vec<T>(p.running_mean),
                        channel_vec<T>(p.running_var), p.training, p.momentum, p.eps};
      launch_rows(exec, fn, p.channels);
    });
    unstage(exec, target, yo);
    exec.finish();
  });
}

/// inputs: dy, x, w, b, running_mean, running_var, y; outputs: dx, dw, db, drunning_mean,
/// drunning_var (a gradient of an absent input is not written, as the reference).
dx_error_t* batch_norm_backward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    expect_arity(call, 7, 5);
    const BatchNormPlan p = plan_batch_norm(call, 1);
    const View dy = output_gradient(call, p.x.dtype, p.x.shape);
    const auto dx = grad_output(call, 0, p.x, "input gradient 0");
    std::optional<View> g[5];
    const std::optional<View>* params[4] = {&p.w, &p.b, &p.running_mean, &p.running_var};
    for (int i = 0; i < 4; ++i) {
      if (*params[i]) g[i + 1] = grad_output(call, i + 1, **params[i], "input gradient");
    }
    if (!dx && !g[1] && !g[2] && !g[3] && !g[4]) return;
    Exec exec(call, dy.device);
    // Per-channel gradients go through an f64 (4, C) buffer; dx through a staging copy when
    // it aliases an input.
    ScratchPtr channel = scratch(exec, 4 * p.channels, 8);
    StagedOutput target = stage_if_aliased(exec, dx, {&p.x, &dy});
    const View& gx = dx ? target.out : p.x;
    const Layout members = make_layout(p.member_shape, {OperandShape{p.member_shape, without_channel(p.x)},
                                                        OperandShape{p.member_shape, without_channel(dy)},
                                                        OperandShape{p.member_shape, without_channel(gx)}});
    double* cbuf = static_cast<double*>(channel->get());
    dispatch_float(p.x.dtype, [&](auto tag) {
      using T = tag_t<decltype(tag)>;
      BatchNormGradFn<T> fn{members, p.x.strides[1], dy.strides[1], gx.strides[1], p.x.data<T>(), dy.data<T>(),
                            dx ? gx.data<T>() : nullptr, channel_vec<const T>(p.w),
                            channel_vec<const T>(p.running_mean), channel_vec<const T>(p.running_var),
                            ChannelVec<double>{cbuf, 1}, ChannelVec<double>{cbuf + p.channels, 1},
                            ChannelVec<double>{cbuf + 2 * p.channels, 1}, ChannelVec<double>{cbuf + 3 * p.channels, 1},
                            p.training, p.eps};
      launch_rows(exec, fn, p.channels);
    });
    for (int i = 1; i <= 4; ++i) {
      if (g[i]) reduce_gradient(exec, cbuf + (i - 1) * p.channels, {p.channels}, *g[i]);
    }
    unstage(exec, target, dx);
    exec.finish();
  });
}

// ---- embedding --------------------------------------------------------------------------------

struct EmbeddingPlan {
  View w, idx;
  std::vector<int64_t> out_shape;
};

EmbeddingPlan plan_embedding(const dx_kernel_call_t* call, int first) {
  EmbeddingPlan p;
  p.w = make_view(call->inputs[first], "input 0");
  p.idx = make_view(call->inputs[first + 1], "input 1");
  if (!dtype_is_float(p.w.dtype)) fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": dx.embedding: F weights only");
  if (p.idx.dtype != DType::I32 && p.idx.dtype != DType::I64) fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": dx.embedding: i32/i64 indices");
  if (p.w.rank() != 2) fail(DX_SHAPE_MISMATCH, DXG_BACKEND_NAME ": dx.embedding: weight must be rank 2");
  p.out_shape = p.idx.shape;
  p.out_shape.push_back(p.w.shape[1]);
  return p;
}

template <class Fn>
void dispatch_index(DType t, Fn&& fn) {
  if (t == DType::I32) fn(static_cast<int32_t*>(nullptr));
  else fn(static_cast<int64_t*>(nullptr));
}

/// Every index in [0, rows), checked on the device before anything is written.
void check_indices(Exec& exec, const View& idx, int64_t rows) {
  const Layout l = make_layout(idx.shape, {idx.operand()});
  if (l.count == 0) return;
  Exec::Scratch flag(exec, sizeof(int));
  check(gpuMemsetAsync(flag.get(), 0, sizeof(int), exec.stream()), "memset");
  dispatch_index(idx.dtype, [&](auto tag) {
    using I = tag_t<decltype(tag)>;
    launch_for_each(exec, EmbeddingIndexCheckFn<I>{l, idx.data<I>(), rows, static_cast<int*>(flag.get())}, l.count);
  });
  int found = 0;
  check(gpuMemcpyAsync(&found, flag.get(), sizeof(int), gpuMemcpyDeviceToHost, exec.stream()), "copy flag");
  exec.synchronize();
  if (found != 0) fail(DX_OUT_OF_RANGE, DXG_BACKEND_NAME ": dx.embedding: an index is outside [0, " + std::to_string(rows) + ")");
}

std::vector<int64_t> leading(const View& v) { return {v.strides.begin(), v.strides.end() - 1}; }

dx_error_t* embedding_forward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    expect_arity(call, 2, 1);
    const EmbeddingPlan p = plan_embedding(call, 0);
    const View out = make_view(call->outputs[0], "output 0");
    expect_dtype(out, p.w.dtype, "output 0");
    expect_shape(out, p.out_shape, "output 0");
    expect_one_device({&p.w, &p.idx, &out});
    Exec exec(call, out.device);
    check_indices(exec, p.idx, p.w.shape[0]);
    const Layout positions = make_layout(p.idx.shape, {p.idx.operand(), OperandShape{p.idx.shape, leading(out)}});
    const int64_t dim = p.w.shape[1];
    if (out.count() > 0) {
      dispatch_index(p.idx.dtype, [&](auto itag) {
        using I = tag_t<decltype(itag)>;
        dispatch_size(p.w.dtype, [&](auto tag) {
          using W = tag_t<decltype(tag)>;
          launch_for_each(exec,
                          EmbeddingFn<W, I>{positions, dim, p.w.strides[0], p.w.strides[1], out.strides.back(),
                                            p.idx.data<I>(), p.w.data<W>(), out.data<W>()},
                          positions.count * dim);
        });
      });
    }
    exec.finish();
  });
}

/// inputs: dy, weight, indices, y; outputs: dweight (rows summed), dindices (zeros).
dx_error_t* embedding_backward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    expect_arity(call, 4, 2);
    const EmbeddingPlan p = plan_embedding(call, 1);
    const View dy = output_gradient(call, p.w.dtype, p.out_shape);
    const auto dw = grad_output(call, 0, p.w, "input gradient 0");
    const auto didx = grad_output(call, 1, p.idx, "input gradient 1");
    Exec exec(call, dy.device);
    check_indices(exec, p.idx, p.w.shape[0]);
    if (dw) {
      const int64_t dim = p.w.shape[1];
      ScratchPtr buffer = zeroed_f64(exec, p.w.count());
      const Layout positions = make_layout(p.idx.shape, {p.idx.operand(), OperandShape{p.idx.shape, leading(dy)}});
      dispatch_index(p.idx.dtype, [&](auto itag) {
        using I = tag_t<decltype(itag)>;
        dispatch_float(p.w.dtype, [&](auto tag) {
          using T = tag_t<decltype(tag)>;
          launch_for_each(exec,
                          EmbeddingGradFn<T, I>{positions, dim, dy.strides.back(), p.idx.data<I>(), dy.data<T>(),
                                                static_cast<double*>(buffer->get())},
                          dim);
        });
      });
      reduce_gradient(exec, static_cast<const double*>(buffer->get()), p.w.shape, *dw);
    }
    if (didx) zero_fill(exec, *didx);
    exec.finish();
  });
}

// ---- cross_entropy ------------------------------------------------------------------------------

enum { kCeReduction = 0, kCeIgnoreIndex = 1 };

struct CrossEntropyPlan {
  View logits, labels;
  int64_t rows = 1, classes = 0;
  bool batched = true;
  int mode = 1;  // 0 none, 1 mean, 2 sum
  int64_t ignore_index = -100;
  std::vector<int64_t> out_shape;
};

CrossEntropyPlan plan_cross_entropy(const dx_kernel_call_t* call, int first) {
  CrossEntropyPlan p;
  p.logits = make_view(call->inputs[first], "input 0");
  p.labels = make_view(call->inputs[first + 1], "input 1");
  if (!dtype_is_float(p.logits.dtype)) fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": dx.cross_entropy: F logits only");
  expect_dtype(p.labels, DType::I64, "input 1");
  if (const dx_attr_t* a = attr_at(call, kCeReduction)) {
    if (a->type != DX_ATTR_STRING || a->value.str == nullptr || a->count < 0) {
      fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": dx.cross_entropy: reduction must be a string");
    }
    const std::string r(a->value.str, static_cast<size_t>(a->count));
    if (r == "none") p.mode = 0;
    else if (r == "mean") p.mode = 1;
    else if (r == "sum") p.mode = 2;
    else fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": dx.cross_entropy: reduction must be none, mean or sum");
  }
  p.ignore_index = attr_i64(call, kCeIgnoreIndex, "ignore_index", -100);
  if (p.logits.rank() == 2 && p.labels.rank() == 1 && p.labels.shape[0] == p.logits.shape[0]) {
    p.rows = p.logits.shape[0];
    p.classes = p.logits.shape[1];
  } else if (p.logits.rank() == 1 && p.labels.rank() == 0) {
    p.batched = false;
    p.classes = p.logits.shape[0];
  } else {
    fail(DX_SHAPE_MISMATCH, DXG_BACKEND_NAME ": dx.cross_entropy takes logits (N, C) with labels (N,) or (C,) with ()");
  }
  if (p.mode == 0 && p.batched) p.out_shape = {p.rows};
  return p;
}

/// Row and class strides of the logits-shaped view `v`.
void row_class_strides(const CrossEntropyPlan& p, const View& v, int64_t& rs, int64_t& cs) {
  rs = p.batched ? v.strides[0] : 0;
  cs = p.batched ? v.strides[1] : v.strides[0];
}

/// Checks the labels on the device; returns the number of rows not ignored.
int64_t check_labels(Exec& exec, const CrossEntropyPlan& p) {
  if (p.rows == 0) return 0;
  Exec::Scratch result(exec, 2 * sizeof(int64_t));
  const int64_t stride = p.batched ? p.labels.strides[0] : 0;
  launch_for_each(exec, LabelCheckFn{p.labels.data<int64_t>(), stride, p.rows, p.classes, p.ignore_index,
                                     static_cast<int64_t*>(result.get())}, 1);
  int64_t host[2] = {0, 0};
  check(gpuMemcpyAsync(host, result.get(), sizeof host, gpuMemcpyDeviceToHost, exec.stream()), "copy labels check");
  exec.synchronize();
  if (host[0] != 0) fail(DX_OUT_OF_RANGE, DXG_BACKEND_NAME ": dx.cross_entropy: a label is outside [0, classes)");
  return host[1];
}

dx_error_t* cross_entropy_forward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    expect_arity(call, 2, 1);
    const CrossEntropyPlan p = plan_cross_entropy(call, 0);
    const View out = make_view(call->outputs[0], "output 0");
    expect_dtype(out, p.logits.dtype, "output 0");
    expect_shape(out, p.out_shape, "output 0");
    expect_one_device({&p.logits, &p.labels, &out});
    Exec exec(call, out.device);
    const int64_t counted = check_labels(exec, p);
    ScratchPtr losses = scratch(exec, p.rows, 8);
    int64_t rs = 0, cs = 0;
    row_class_strides(p, p.logits, rs, cs);
    const int64_t label_stride = p.batched ? p.labels.strides[0] : 0;
    dispatch_float(p.logits.dtype, [&](auto tag) {
      using T = tag_t<decltype(tag)>;
      CrossEntropyRowFn<T> fn{p.logits.data<T>(), rs, cs, p.classes, p.labels.data<int64_t>(), label_stride,
                              p.ignore_index, static_cast<double*>(losses->get()), nullptr, 0, 0, nullptr, 0, 1.0};
      launch_rows(exec, fn, p.rows);
      launch_for_each(exec,
                      CrossEntropyReduceFn<T>{static_cast<const double*>(losses->get()), p.rows,
                                              out.rank() == 1 ? out.strides[0] : 0, out.data<T>(), p.mode,
                                              static_cast<double>(counted)},
                      1);
    });
    exec.finish();
  });
}

/// inputs: dy, logits, labels, y; outputs: dlogits = g * (softmax - onehot), dlabels (zeros).
dx_error_t* cross_entropy_backward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    expect_arity(call, 4, 2);
    const CrossEntropyPlan p = plan_cross_entropy(call, 1);
    const View dy = output_gradient(call, p.logits.dtype, p.out_shape);
    const auto dlogits = grad_output(call, 0, p.logits, "input gradient 0");
    const auto dlabels = grad_output(call, 1, p.labels, "input gradient 1");
    Exec exec(call, dy.device);
    const int64_t counted = check_labels(exec, p);
    if (dlogits) {
      StagedOutput target = stage_if_aliased(exec, dlogits, {&p.logits, &dy});
      int64_t rs = 0, cs = 0, grs = 0, gcs = 0;
      row_class_strides(p, p.logits, rs, cs);
      row_class_strides(p, target.out, grs, gcs);
      const int64_t label_stride = p.batched ? p.labels.strides[0] : 0;
      const int64_t dy_stride = p.mode == 0 && p.batched ? dy.strides[0] : 0;
      const double divisor = p.mode == 1 ? static_cast<double>(counted) : 1.0;
      if (p.rows > 0 && p.classes > 0) {
        dispatch_float(p.logits.dtype, [&](auto tag) {
          using T = tag_t<decltype(tag)>;
          CrossEntropyRowFn<T> fn{p.logits.data<T>(), rs, cs, p.classes, p.labels.data<int64_t>(), label_stride,
                                  p.ignore_index, nullptr, target.out.data<T>(), grs, gcs, dy.data<T>(), dy_stride,
                                  divisor};
          launch_rows(exec, fn, p.rows);
        });
      }
      unstage(exec, target, dlogits);
    }
    if (dlabels) zero_fill(exec, *dlabels);
    exec.finish();
  });
}

}  // namespace

void register_nn_kernels(Registrar& r) {
  for (DType d : float_types()) {
    r.add("dx.linear", 3, 1, {d, d, d, d}, &linear_forward, kDeterministic, &linear_backward);
    r.add("dx.log_softmax", 1, 1, {d, d}, &log_softmax_forward, kDeterministic, &log_softmax_backward);
    r.add("dx.layer_norm", 3, 3, {d, d, d, d, d, d}, &layer_norm_forward, kDeterministic, &layer_norm_backward);
    r.add("dx.rms_norm", 2, 1, {d, d, d}, &rms_norm_forward, kDeterministic, &rms_norm_backward);
    for (DType index : {DType::I32, DType::I64}) {
      r.add("dx.embedding", 2, 1, {d, index, d}, &embedding_forward, kDeterministic, &embedding_backward);
    }
    r.add("dx.cross_entropy", 2, 1, {d, DType::I64, d}, &cross_entropy_forward, kDeterministic, &cross_entropy_backward);
    r.add("dx.batch_norm", 5, 1, {d, d, d, d, d, d}, &batch_norm_forward, kDeterministic, &batch_norm_backward);
  }
}

}  // namespace deepx::gpu
