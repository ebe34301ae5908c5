// dx.scaled_dot_product_attention: q (B..., L, E), k (B..., S, E), v (B..., S, Ev) with equal
// batch dims, an optional mask broadcastable to (B..., L, S) (bool: true = attend; or an
// additive float mask of q's dtype), attrs `causal` (query i attends keys j <= i, PyTorch's
// top-left alignment) and `scale` (unset = 1 / sqrt(E)). out = softmax(scale q k^T + mask) v,
// everything in f64, rounded once; a row with every key masked is NaN (as PyTorch). Backward
// gives dq, dk, dv and, for an additive float mask, dmask (a bool mask: zero-filled).
#include <cmath>
#include <limits>
#include <string>

#include "deepx/reference/kernels.hpp"

namespace deepx::ref {
namespace {

struct AttentionPlan {
  Tensor q, k, v;
  std::optional<Tensor> mask;  // broadcast to (B..., L, S)
  std::vector<std::int64_t> batch, out_shape;
  std::int64_t l = 0, s = 0, e = 0, ev = 0;
  bool causal = false;
  double scale = 1;
};

AttentionPlan plan_attention(const Call& call, std::size_t first) {
  AttentionPlan p;
  p.q = view(call.inputs[first], "input 0");
  p.k = view(call.inputs[first + 1], "input 1");
  p.v = view(call.inputs[first + 2], "input 2");
  if (p.q.rank() < 2 || p.k.rank() != p.q.rank() || p.v.rank() != p.q.rank()) {
    fail(DX_SHAPE_MISMATCH, "dx.scaled_dot_product_attention: q, k, v must share a rank >= 2");
  }
  const std::size_t r = p.q.rank();
  p.batch.assign(p.q.shape.begin(), p.q.shape.end() - 2);
  for (std::size_t d = 0; d + 2 < r; ++d) {
    if (p.k.shape[d] != p.q.shape[d] || p.v.shape[d] != p.q.shape[d]) {
      fail(DX_SHAPE_MISMATCH, "dx.scaled_dot_product_attention: batch dims of q, k, v differ");
    }
  }
  p.l = p.q.shape[r - 2], p.e = p.q.shape[r - 1];
  p.s = p.k.shape[r - 2], p.ev = p.v.shape[r - 1];
  if (p.k.shape[r - 1] != p.e || p.v.shape[r - 2] != p.s) {
    fail(DX_SHAPE_MISMATCH, "dx.scaled_dot_product_attention: q " + shape_string(p.q.shape) + ", k " +
                                shape_string(p.k.shape) + ", v " + shape_string(p.v.shape) + " disagree");
  }
  p.out_shape = p.batch;
  p.out_shape.push_back(p.l);
  p.out_shape.push_back(p.ev);
  if (first + 3 < call.inputs.size() && call.inputs[first + 3] != nullptr) {
    const Tensor m = view(call.inputs[first + 3], "input 3");
    std::vector<std::int64_t> scores = p.batch;
    scores.push_back(p.l);
    scores.push_back(p.s);
    if (m.rank() > scores.size() || broadcast_shapes(m.shape, scores) != scores) {
      fail(DX_SHAPE_MISMATCH, "dx.scaled_dot_product_attention: mask " + shape_string(m.shape) +
                                  " does not broadcast to " + shape_string(scores));
    }
    p.mask = broadcast_to(m, scores);
  }
  p.causal = attr_bool(call, 0, "causal", false);
  p.scale = attr_f64(call, 1, "scale").value_or(p.e > 0 ? 1.0 / std::sqrt(static_cast<double>(p.e)) : 1.0);
  return p;
}

// Row i of batch b: the attention probabilities over the keys (masked keys get exactly 0).
void probabilities(const AttentionPlan& p, std::span<const std::int64_t> b, std::int64_t i, std::vector<double>& prob) {
  std::vector<std::int64_t> qi(b.begin(), b.end()), ki(b.begin(), b.end()), mi(b.begin(), b.end());
  qi.push_back(i), qi.push_back(0);
  ki.push_back(0), ki.push_back(0);
  mi.push_back(i), mi.push_back(0);
  const std::size_t r = p.q.rank();
  prob.assign(static_cast<std::size_t>(p.s), 0.0);
  std::vector<bool> live(static_cast<std::size_t>(p.s), true);
  double row_max = -std::numeric_limits<double>::infinity();
  bool has_nan = false;
  for (std::int64_t j = 0; j < p.s; ++j) {
    ki[r - 2] = j;
    mi[r - 1] = j;
    double score = 0;
    for (std::int64_t d = 0; d < p.e; ++d) {
      qi[r - 1] = d;
      ki[r - 1] = d;
      score += load_float(p.q.dtype, p.q.at(qi)) * load_float(p.k.dtype, p.k.at(ki));
    }
    score *= p.scale;
    if (p.causal && j > i) live[j] = false;
    if (p.mask) {
      if (p.mask->dtype == DType::kBool) {
        if (load_int(DType::kBool, p.mask->at(mi)) == 0) live[j] = false;
      } else {
        score += load_float(p.mask->dtype, p.mask->at(mi));
      }
    }
    if (std::isnan(score)) has_nan = true;
    if (live[j] && score > row_max) row_max = score;
    prob[j] = score;
  }
  double total = 0;
  for (std::int64_t j = 0; j < p.s; ++j) {
    prob[j] = live[j] ? std::exp(prob[j] - row_max) : 0.0;
    total += prob[j];
  }
  for (std::int64_t j = 0; j < p.s; ++j) {
    // No live key (or all -Inf scores): 0 / 0 = NaN, as PyTorch.
    prob[j] = has_nan ? std::numeric_limits<double>::quiet_NaN() : prob[j] / total;
  }
}

}  // namespace

void scaled_dot_product_attention(const Call& call) {
  const AttentionPlan p = plan_attention(call, 0);
  const Tensor out = view(call.outputs[0], "output 0");
  expect_output_shape(out, p.out_shape);
  GradBuffer acc(p.out_shape);  // written at the end: out may alias q or v
  const std::size_t r = p.q.rank();
  std::vector<double> prob;
  for_each_index(p.batch, [&](std::span<const std::int64_t> b) {
    std::vector<std::int64_t> vi(b.begin(), b.end()), oi(b.begin(), b.end());
    vi.push_back(0), vi.push_back(0);
    oi.push_back(0), oi.push_back(0);
    for (std::int64_t i = 0; i < p.l; ++i) {
      probabilities(p, b, i, prob);
      oi[r - 2] = i;
      for (std::int64_t d = 0; d < p.ev; ++d) {
        oi[r - 1] = d;
        vi[r - 1] = d;
        double sum = 0;
        for (std::int64_t j = 0; j < p.s; ++j) {
          vi[r - 2] = j;
          if (prob[j] != 0 || std::isnan(prob[j])) sum += prob[j] * load_float(p.v.dtype, p.v.at(vi));
        }
        GradBuffer::add(acc.view.at(oi), sum);
      }
    }
  });
  acc.store(out);
}

void scaled_dot_product_attention_backward(const Call& call) {
  // inputs: dout, q, k, v, mask (may be null), out; outputs: dq, dk, dv, dmask (zeros).
  const AttentionPlan p = plan_attention(call, 1);
  const Tensor dout = view(call.inputs[0], "output gradient 0");
  expect_output_shape(dout, p.out_shape);
  const std::optional<Tensor> dq = grad_output(call, 0, p.q.shape);
  const std::optional<Tensor> dk = grad_output(call, 1, p.k.shape);
  const std::optional<Tensor> dv = grad_output(call, 2, p.v.shape);
  GradBuffer gq(p.q.shape), gk(p.k.shape), gv(p.v.shape);
  // An additive float mask is differentiable (d score / d mask = 1); a bool mask is not.
  const Tensor* mask_in = nullptr;
  std::optional<Tensor> mask_view;
  if (call.inputs[4] != nullptr) {
    mask_view = view(call.inputs[4], "forward input 3");
    mask_in = &*mask_view;
  }
  const std::optional<Tensor> dmask = mask_in ? grad_output(call, 3, mask_in->shape) : std::nullopt;
  GradBuffer gm(mask_in ? mask_in->shape : std::vector<std::int64_t>{});
  std::vector<std::int64_t> score_shape = p.batch;
  score_shape.push_back(p.l);
  score_shape.push_back(p.s);
  const Tensor gm_view = broadcast_to(gm.view, mask_in ? score_shape : std::vector<std::int64_t>{});
  const bool float_mask = mask_in != nullptr && mask_in->dtype != DType::kBool;
  const std::size_t r = p.q.rank();
  std::vector<double> prob, dprob;
  for_each_index(p.batch, [&](std::span<const std::int64_t> b) {
    std::vector<std::int64_t> oi(b.begin(), b.end()), vi(b.begin(), b.end()), qi(b.begin(), b.end()), ki(b.begin(), b.end());
    for (auto* idx : {&oi, &vi, &qi, &ki}) idx->resize(r, 0);
    for (std::int64_t i = 0; i < p.l; ++i) {
      probabilities(p, b, i, prob);
      oi[r - 2] = i;
      qi[r - 2] = i;
      // dv_j += p_j do_i; dp_j = <do_i, v_j>.
      dprob.assign(static_cast<std::size_t>(p.s), 0.0);
      for (std::int64_t j = 0; j < p.s; ++j) {
        vi[r - 2] = j;
        for (std::int64_t d = 0; d < p.ev; ++d) {
          oi[r - 1] = d;
          vi[r - 1] = d;
          const double g = load_float(dout.dtype, dout.at(oi));
          GradBuffer::add(gv.view.at(vi), prob[j] * g);
          dprob[j] += g * load_float(p.v.dtype, p.v.at(vi));
        }
      }
      double dot = 0;
      for (std::int64_t j = 0; j < p.s; ++j) dot += prob[j] * dprob[j];
      // ds_j = p_j (dp_j - sum p dp); dq_i += scale ds_j k_j; dk_j += scale ds_j q_i.
      for (std::int64_t j = 0; j < p.s; ++j) {
        const double ds_unscaled = prob[j] * (dprob[j] - dot);
        if (float_mask && dmask) {
          std::vector<std::int64_t> mi(b.begin(), b.end());
          mi.push_back(i);
          mi.push_back(j);
          GradBuffer::add(gm_view.at(mi), ds_unscaled);
        }
        const double ds = ds_unscaled * p.scale;
        if (ds == 0) continue;
        ki[r - 2] = j;
        for (std::int64_t d = 0; d < p.e; ++d) {
          qi[r - 1] = d;
          ki[r - 1] = d;
          GradBuffer::add(gq.view.at(qi), ds * load_float(p.k.dtype, p.k.at(ki)));
          GradBuffer::add(gk.view.at(ki), ds * load_float(p.q.dtype, p.q.at(qi)));
        }
      }
    }
  });
  if (dq) gq.store(*dq);
  if (dk) gk.store(*dk);
  if (dv) gv.store(*dv);
  if (dmask) {
    if (float_mask) gm.store(*dmask);
    else zero_fill(*dmask);
  }
}

}  // namespace deepx::ref
