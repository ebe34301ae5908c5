// dx.scaled_dot_product_attention, forward and backward: q (B..., L, E), k (B..., S, E),
// v (B..., S, Ev) with equal batch dims; an optional mask broadcast to (B..., L, S) (bool: true
// = attend, or an additive float mask of q's dtype); attrs `causal` (key j <= query i) and
// `scale` (unset = 1 / sqrt(E)). Computed in f64 on compact copies of the operands (scores,
// row softmax, P V), rounded once into the outputs; a row with every key masked is NaN (the
// reference's semantics, reference-kernels/src/attention.cc). Bodies in include/deepx/gpu/nn.h.
#include <cmath>
#include <string>
#include <vector>

#include "backward_fns.h"
#include "nn_fns.h"
#include "nn_launch.h"

namespace deepx::gpu {
namespace {

enum { kAttnCausal = 0, kAttnScale = 1 };

struct AttentionPlan {
  View q, k, v;
  std::optional<View> mask;
  std::vector<int64_t> batch, out_shape, scores_shape;
  AttentionGeometry g{};
};

AttentionPlan plan_attention(const dx_kernel_call_t* call, int first) {
  AttentionPlan p;
  p.q = make_view(call->inputs[first], "input 0");
  p.k = make_view(call->inputs[first + 1], "input 1");
  p.v = make_view(call->inputs[first + 2], "input 2");
  if (!dtype_is_float(p.q.dtype)) fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": attention: F dtypes only");
  expect_dtype(p.k, p.q.dtype, "input 1");
  expect_dtype(p.v, p.q.dtype, "input 2");
  if (p.q.rank() < 2 || p.k.rank() != p.q.rank() || p.v.rank() != p.q.rank()) {
    fail(DX_SHAPE_MISMATCH, DXG_BACKEND_NAME ": attention: q, k, v must share a rank >= 2");
  }
  const size_t r = p.q.shape.size();
  p.batch.assign(p.q.shape.begin(), p.q.shape.end() - 2);
  for (size_t d = 0; d + 2 < r; ++d) {
    if (p.k.shape[d] != p.q.shape[d] || p.v.shape[d] != p.q.shape[d]) {
      fail(DX_SHAPE_MISMATCH, DXG_BACKEND_NAME ": attention: batch dims of q, k, v differ");
    }
  }
  AttentionGeometry& g = p.g;
  g.batch = count_of(p.batch);
  g.l = p.q.shape[r - 2], g.e = p.q.shape[r - 1];
  g.s = p.k.shape[r - 2], g.ev = p.v.shape[r - 1];
  if (p.k.shape[r - 1] != g.e || p.v.shape[r - 2] != g.s) {
    fail(DX_SHAPE_MISMATCH, DXG_BACKEND_NAME ": attention: q, k, v disagree");
  }
  p.out_shape = p.batch;
  p.out_shape.push_back(g.l);
  p.out_shape.push_back(g.ev);
  p.scores_shape = p.batch;
  p.scores_shape.push_back(g.l);
  p.scores_shape.push_back(g.s);
  p.mask = optional_input(call, first + 3, "input 3");
  if (p.mask) {
    if (p.mask->dtype != DType::Bool) expect_dtype(*p.mask, p.q.dtype, "input 3");
    const auto b = broadcast_shapes({p.mask->shape, p.scores_shape});
    if (p.mask->shape.size() > p.scores_shape.size() || !b || *b != p.scores_shape) {
      fail(DX_SHAPE_MISMATCH, DXG_BACKEND_NAME ": attention: the mask " + shape_string(p.mask->shape) +
                                  " does not broadcast to " + shape_string(p.scores_shape));
    }
  }
  g.causal = attr_bool(call, kAttnCausal, "causal", false);
  g.scale = attr_f64(call, kAttnScale, "scale", g.e > 0 ? 1.0 / std::sqrt(static_cast<double>(g.e)) : 1.0);
  return p;
}

/// The f64 operands and the probabilities P (B, L, S) of a call.
struct AttentionState {
  ScratchPtr q, k, v, mask, p;
};

AttentionState probabilities(Exec& exec, const AttentionPlan& plan) {
  const AttentionGeometry& g = plan.g;
  AttentionState st;
  st.q = to_f64(exec, plan.q);
  st.k = to_f64(exec, plan.k);
  st.v = to_f64(exec, plan.v);
  if (plan.mask) st.mask = to_f64_broadcast(exec, *plan.mask, plan.scores_shape);
  const int64_t scores = g.batch * g.l * g.s;
  st.p = scratch(exec, scores, 8);
  auto* p = static_cast<double*>(st.p->get());
  launch_for_each(exec,
                  AttentionScoresFn{g, static_cast<const double*>(st.q->get()), static_cast<const double*>(st.k->get()),
                                    st.mask ? static_cast<const double*>(st.mask->get()) : nullptr,
                                    plan.mask && plan.mask->dtype == DType::Bool, p},
                  scores);
  if (g.s > 0) launch_rows(exec, SoftmaxRowsFn{p, g.s}, g.batch * g.l);
  return st;
}

dx_error_t* attention_forward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    expect_arity(call, 4, 1);
    const AttentionPlan plan = plan_attention(call, 0);
    const View out = make_view(call->outputs[0], "output 0");
    expect_dtype(out, plan.q.dtype, "output 0");
    if (out.shape != plan.out_shape) fail(DX_SHAPE_MISMATCH, DXG_BACKEND_NAME ": attention: output shape " + shape_string(out.shape));
    expect_one_device({&plan.q, &plan.k, &plan.v, &out});
    Exec exec(call, out.device);
    const AttentionGeometry& g = plan.g;
    if (out.count() > 0) {
      AttentionState st = probabilities(exec, plan);
      ScratchPtr o = scratch(exec, out.count(), 8);
      launch_for_each(exec,
                      AttentionOutFn{g, static_cast<const double*>(st.p->get()), static_cast<const double*>(st.v->get()),
                                     static_cast<double*>(o->get())},
                      out.count());
      reduce_gradient(exec, static_cast<const double*>(o->get()), out.shape, out);
    }
    exec.finish();
  });
}

/// inputs: dout, q, k, v, mask (may be null), out; outputs: dq, dk, dv, dmask (an additive
/// mask's gradient summed to its shape; zeros for a bool mask; not written without a mask).
dx_error_t* attention_backward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    expect_arity(call, 6, 4);
    const AttentionPlan plan = plan_attention(call, 1);
    const View dout = make_view(call->inputs[0], "output gradient 0");
    expect_dtype(dout, plan.q.dtype, "output gradient 0");
    if (dout.shape != plan.out_shape) fail(DX_SHAPE_MISMATCH, DXG_BACKEND_NAME ": attention backward: gradient shape");
    const auto dq = grad_output(call, 0, plan.q, "input gradient 0");
    const auto dk = grad_output(call, 1, plan.k, "input gradient 1");
    const auto dv = grad_output(call, 2, plan.v, "input gradient 2");
    const auto dmask = plan.mask ? grad_output(call, 3, *plan.mask, "input gradient 3") : std::nullopt;
    if (!dq && !dk && !dv && !dmask) return;
    Exec exec(call, dout.device);
    const AttentionGeometry& g = plan.g;
    const bool float_mask = plan.mask && plan.mask->dtype != DType::Bool;
    AttentionState st = probabilities(exec, plan);
    ScratchPtr go = to_f64(exec, dout);
    const auto* p = static_cast<const double*>(st.p->get());
    const auto* q = static_cast<const double*>(st.q->get());
    const auto* k = static_cast<const double*>(st.k->get());
    const auto* v = static_cast<const double*>(st.v->get());
    const auto* gout = static_cast<const double*>(go->get());
    const int64_t scores = g.batch * g.l * g.s;
    // ds (unscaled) = p (dp - sum(p dp)), dp = dout v^T.
    ScratchPtr ds = scratch(exec, scores, 8);
    auto* dsp = static_cast<double*>(ds->get());
    launch_for_each(exec, AttentionDprobFn{g, gout, v, dsp}, scores);
    launch_for_each(exec, AttentionDscoreFn{g, p, dsp}, g.batch * g.l);
    ScratchPtr gq, gk, gv;
    if (dq) {
      gq = scratch(exec, plan.q.count(), 8);
      launch_for_each(exec, AttentionDqFn{g, dsp, k, static_cast<double*>(gq->get())}, plan.q.count());
    }
    if (dk) {
      gk = scratch(exec, plan.k.count(), 8);
      launch_for_each(exec, AttentionDkvFn{g, dsp, q, nullptr, nullptr, static_cast<double*>(gk->get()), g.e},
                      plan.k.count());
    }
    if (dv) {
      gv = scratch(exec, plan.v.count(), 8);
      launch_for_each(exec, AttentionDkvFn{g, nullptr, nullptr, p, gout, static_cast<double*>(gv->get()), g.ev},
                      plan.v.count());
    }
    // Every buffer is complete before any gradient is stored (a gradient may alias an input).
    if (dq) reduce_gradient(exec, static_cast<const double*>(gq->get()), plan.q.shape, *dq);
    if (dk) reduce_gradient(exec, static_cast<const double*>(gk->get()), plan.k.shape, *dk);
    if (dv) reduce_gradient(exec, static_cast<const double*>(gv->get()), plan.v.shape, *dv);
    if (dmask) {
      if (float_mask) reduce_gradient(exec, dsp, plan.scores_shape, *dmask);
      else zero_fill(exec, *dmask);
    }
    exec.finish();
  });
}

}  // namespace

void register_attention_kernels(Registrar& r) {
  for (DType d : float_types()) {
    for (DType mask : {d, DType::Bool}) {
      r.add("dx.scaled_dot_product_attention", 4, 1, {d, d, d, mask, d}, &attention_forward, kDeterministic,
            &attention_backward);
    }
  }
}

}  // namespace deepx::gpu
