// Neural-network ops and their gradients: dx.linear (x @ W^T + b, b optional), dx.log_softmax,
// dx.layer_norm (outputs y, mean, rstd), dx.rms_norm, dx.batch_norm, dx.embedding,
// dx.cross_entropy. Everything is computed in f64 and rounded once; variances are two-pass (mean
// first), so a large mean offset costs no accuracy.
#include <cmath>
#include <limits>
#include <string>

#include "deepx/ops.h"
#include "deepx/reference/kernels.hpp"

namespace deepx::ref {
namespace {

// An optional input: nullopt when the caller passed a null tensor (or fewer inputs).
std::optional<Tensor> optional_input(const Call& call, std::size_t i, const char* role) {
  if (i >= call.inputs.size() || call.inputs[i] == nullptr) return std::nullopt;
  return view(call.inputs[i], role);
}

std::vector<std::int64_t> concat(std::span<const std::int64_t> a, std::span<const std::int64_t> b) {
  std::vector<std::int64_t> out(a.begin(), a.end());
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

// ---- linear ----

struct LinearShapes {
  Tensor x, w;
  std::optional<Tensor> b;
  std::vector<std::int64_t> batch, out_shape;
  std::int64_t in = 0, out = 0;
};

// x: (..., in), w: (out, in), b: (out) or absent -> y: (..., out). Input positions in `call`
// start at `first`.
LinearShapes plan_linear(const Call& call, std::size_t first) {
  LinearShapes s;
  s.x = view(call.inputs[first], "input 0");
  s.w = view(call.inputs[first + 1], "input 1");
  s.b = optional_input(call, first + 2, "input 2");
  if (s.x.rank() < 1 || s.w.rank() != 2) {
    fail(DX_SHAPE_MISMATCH, "dx.linear needs x of rank >= 1 and a rank-2 weight, got " +
                                shape_string(s.x.shape) + " and " + shape_string(s.w.shape));
  }
  s.in = s.w.shape[1];
  s.out = s.w.shape[0];
  if (s.x.shape.back() != s.in) {
    fail(DX_SHAPE_MISMATCH, "dx.linear: x " + shape_string(s.x.shape) + " and weight " +
                                shape_string(s.w.shape) + " disagree on the input features");
  }
  if (s.b && (s.b->rank() != 1 || s.b->shape[0] != s.out)) {
    fail(DX_SHAPE_MISMATCH, "dx.linear: bias " + shape_string(s.b->shape) + " must be (" +
                                std::to_string(s.out) + ",)");
  }
  s.batch.assign(s.x.shape.begin(), s.x.shape.end() - 1);
  s.out_shape = s.batch;
  s.out_shape.push_back(s.out);
  return s;
}

// ---- normalisations ----

// The split of x's dims at the normalisation `axis` (attr slot 0, default -1): `outer` are the
// leading dims, `inner` the normalised trailing ones.
struct NormPlan {
  Tensor x;
  std::size_t axis = 0;
  std::vector<std::int64_t> outer, inner, stats_shape;  // stats: outer then 1s (PyTorch)
  std::int64_t n = 1;                                    // elements per group
  double eps = 1e-5;
};

NormPlan plan_norm(const Call& call, const DLTensor* x_dl) {
  NormPlan p;
  p.x = view(x_dl, "input 0");
  const auto rank = static_cast<std::int64_t>(p.x.rank());
  const std::int64_t axis = attr_i64(call, 0, "axis", -1);
  const std::int64_t normal = axis < 0 ? axis + rank : axis;
  if (normal < 0 || normal >= rank) {
    fail(DX_OUT_OF_RANGE, "normalisation axis " + std::to_string(axis) + " is out of range for rank " +
                              std::to_string(rank));
  }
  p.axis = static_cast<std::size_t>(normal);
  p.outer.assign(p.x.shape.begin(), p.x.shape.begin() + normal);
  p.inner.assign(p.x.shape.begin() + normal, p.x.shape.end());
  for (std::int64_t d : p.inner) p.n *= d;
  p.stats_shape = p.outer;
  p.stats_shape.resize(p.x.rank(), 1);
  p.eps = attr_f64(call, 1, "eps").value_or(1e-5);
  return p;
}

void expect_param_shape(const std::optional<Tensor>& t, const NormPlan& p, const char* what) {
  if (t && !std::equal(t->shape.begin(), t->shape.end(), p.inner.begin(), p.inner.end())) {
    fail(DX_SHAPE_MISMATCH, std::string(what) + " has shape " + shape_string(t->shape) +
                                ", the normalised shape is " + shape_string(p.inner));
  }
}

// Calls fn(outer index, stats index, member indices) for each normalisation group.
template <typename Fn>
void for_each_norm_group(const NormPlan& p, Fn fn) {
  std::vector<std::vector<std::int64_t>> members;
  std::vector<std::int64_t> stats_index;
  for_each_index(p.outer, [&](std::span<const std::int64_t> outer) {
    members.clear();
    for_each_index(p.inner, [&](std::span<const std::int64_t> inner) {
      members.push_back(concat(outer, inner));
    });
    stats_index.assign(outer.begin(), outer.end());
    stats_index.resize(p.x.rank(), 0);
    fn(stats_index, members);
  });
}

// Inner (parameter) index of a full index.
std::span<const std::int64_t> inner_of(const NormPlan& p, const std::vector<std::int64_t>& full) {
  return std::span<const std::int64_t>(full).subspan(p.axis);
}

double load_or(const std::optional<Tensor>& t, std::span<const std::int64_t> index, double fallback) {
  return t ? load_float(t->dtype, t->at(index)) : fallback;
}

// ---- cross entropy ----

enum class Reduction { kNone, kMean, kSum };

struct CrossEntropyPlan {
  Tensor logits, labels;
  std::int64_t rows = 1, classes = 0;
  bool batched = true;
  Reduction reduction = Reduction::kMean;
  std::int64_t ignore_index = -100;
  std::vector<std::int64_t> out_shape;
};

CrossEntropyPlan plan_cross_entropy(const Call& call, std::size_t first) {
  CrossEntropyPlan p;
  p.logits = view(call.inputs[first], "input 0");
  p.labels = view(call.inputs[first + 1], "input 1");
  const std::optional<std::string> reduction = attr_string(call, 0, "reduction");
  if (!reduction || *reduction == "mean") p.reduction = Reduction::kMean;
  else if (*reduction == "sum") p.reduction = Reduction::kSum;
  else if (*reduction == "none") p.reduction = Reduction::kNone;
  else fail(DX_INVALID_ARGUMENT, "dx.cross_entropy: reduction must be none, mean or sum, got \"" + *reduction + "\"");
  p.ignore_index = attr_i64(call, 1, "ignore_index", -100);
  if (p.logits.rank() == 2 && p.labels.rank() == 1 && p.labels.shape[0] == p.logits.shape[0]) {
    p.rows = p.logits.shape[0];
    p.classes = p.logits.shape[1];
  } else if (p.logits.rank() == 1 && p.labels.rank() == 0) {
    p.batched = false;
    p.classes = p.logits.shape[0];
  } else {
    fail(DX_SHAPE_MISMATCH, "dx.cross_entropy takes logits (N, C) with labels (N,) or (C,) with (), got " +
                                shape_string(p.logits.shape) + " and " + shape_string(p.labels.shape));
  }
  if (p.reduction == Reduction::kNone && p.batched) p.out_shape = {p.rows};
  return p;
}

std::int64_t label_of(const CrossEntropyPlan& p, std::int64_t row) {
  const std::int64_t index[1] = {row};
  const std::int64_t label = load_int(p.labels.dtype, p.batched ? p.labels.at(index) : p.labels.base);
  if (label != p.ignore_index && (label < 0 || label >= p.classes)) {
    fail(DX_OUT_OF_RANGE, "dx.cross_entropy: label " + std::to_string(label) + " of row " +
                              std::to_string(row) + " is outside [0, " + std::to_string(p.classes) + ")");
  }
  return label;
}

double logit(const CrossEntropyPlan& p, std::int64_t row, std::int64_t c) {
  if (!p.batched) {
    const std::int64_t index[1] = {c};
    return load_float(p.logits.dtype, p.logits.at(index));
  }
  const std::int64_t index[2] = {row, c};
  return load_float(p.logits.dtype, p.logits.at(index));
}

// log(sum(exp(line))) split at the line's max m: returns log(sum(exp(line - m))) and sets m, so
// the log-sum-exp is m + the result. Callers subtract x - m from the result rather than x from
// m + result: at huge logits m + log(sum) rounds to m and the difference cancels (1e17 + log 2
// is 1e17). A NaN gives NaN; an infinite m (all -Inf, or a +Inf) gives 0, so m + 0 = m.
double log_sum_exp_shifted(const std::vector<double>& line, double& m) {
  m = -std::numeric_limits<double>::infinity();
  for (double v : line) {
    if (std::isnan(v)) {
      m = v;
      return v;
    }
    m = std::max(m, v);
  }
  if (std::isinf(m)) return 0;
  double total = 0;
  for (double v : line) total += std::exp(v - m);
  return std::log(total);
}

// The loss term log(sum(exp(line))) - x of one row, as (log(sum(exp(line - m)))) - (x - m).
double log_sum_exp_minus(const std::vector<double>& line, double x) {
  double m = 0;
  const double log_sum = log_sum_exp_shifted(line, m);
  if (std::isnan(m) || std::isinf(m)) return m - x;  // NaN; or m - x as m + log(sum) - x gives
  return log_sum - (x - m);
}

// ---- batch norm ----
struct BatchNormPlan {
  Tensor x;
  std::optional<Tensor> w, b, running_mean, running_var;
  bool training = false;
  double momentum = 0.1, eps = 1e-5;
  std::int64_t channels = 0, per_channel = 0;
};

BatchNormPlan plan_batch_norm(const Call& call, std::size_t first) {
  BatchNormPlan p;
  p.x = view(call.inputs[first], "input 0");
  const auto opt = [&](std::size_t i, const char* role) -> std::optional<Tensor> {
    if (first + i >= call.inputs.size() || call.inputs[first + i] == nullptr) return std::nullopt;
    return view(call.inputs[first + i], role);
  };
  p.w = opt(1, "input 1");
  p.b = opt(2, "input 2");
  p.running_mean = opt(3, "input 3");
  p.running_var = opt(4, "input 4");
  p.training = attr_bool(call, 0, "training", false);
  p.momentum = attr_f64(call, 1, "momentum").value_or(0.1);
  p.eps = attr_f64(call, 2, "eps").value_or(1e-5);
  if (p.x.rank() < 2) fail(DX_SHAPE_MISMATCH, "dx.batch_norm: x must be (N, C, ...)");
  p.channels = p.x.shape[1];
  p.per_channel = p.x.numel / (p.channels > 0 ? p.channels : 1);
  for (const auto* t : {&p.w, &p.b, &p.running_mean, &p.running_var}) {
    if (*t && ((*t)->rank() != 1 || (*t)->shape[0] != p.channels)) {
      fail(DX_SHAPE_MISMATCH, "dx.batch_norm: per-channel tensors must be (C,) with C = " + std::to_string(p.channels));
    }
  }
  if (!p.training && (!p.running_mean || !p.running_var)) {
    fail(DX_INVALID_ARGUMENT, "dx.batch_norm: evaluation mode needs running_mean and running_var");
  }
  return p;
}

// Members of channel c, in row-major order.
void channel_members(const Tensor& x, std::int64_t c, std::vector<std::vector<std::int64_t>>& members) {
  members.clear();
  std::vector<std::int64_t> shape = x.shape;
  shape[1] = 1;
  for_each_index(shape, [&](std::span<const std::int64_t> i) {
    members.emplace_back(i.begin(), i.end());
    members.back()[1] = c;
  });
}

// layer_norm's weight and bias: optional inputs `first` and `first + 1`, named `role` 1 and 2,
// checked against the normalised shape.
struct LayerNormParams {
  std::optional<Tensor> w, b;
};
LayerNormParams layer_norm_params(const Call& call, const NormPlan& p, std::size_t first, const std::string& role) {
  LayerNormParams r{optional_input(call, first, (role + " 1").c_str()), optional_input(call, first + 1, (role + " 2").c_str())};
  expect_param_shape(r.w, p, "weight");
  expect_param_shape(r.b, p, "bias");
  return r;
}

// The three tensors shaped like layer_norm's outputs (y, mean, rstd, or their gradients), named
// `role` 0, 1, 2: x's shape, then the statistics' shape twice.
struct LayerNormTriple {
  Tensor y, mean, rstd;
};
LayerNormTriple layer_norm_triple(std::span<const DLTensor* const> t, const NormPlan& p, const std::string& role) {
  LayerNormTriple r{view(t[0], role + " 0"), view(t[1], role + " 1"), view(t[2], role + " 2")};
  expect_output_shape(r.y, p.x.shape);
  expect_output_shape(r.mean, p.stats_shape);
  expect_output_shape(r.rstd, p.stats_shape);
  return r;
}

// The x values of a normalisation group, in member order.
void load_group(const NormPlan& p, const std::vector<std::vector<std::int64_t>>& members, std::vector<double>& v) {
  v.clear();
  for (const auto& m : members) v.push_back(load_float(p.x.dtype, p.x.at(m)));
}

// layer_norm's statistics of a group of n values: the mean and 1 / sqrt(var + eps) with the
// biased variance, two-pass in f64.
void layer_norm_stats(const std::vector<double>& v, double n, double eps, double& mean, double& rstd) {
  mean = 0;
  for (double e : v) mean += e;
  mean /= n;
  double var = 0;
  for (double e : v) var += (e - mean) * (e - mean);
  var /= n;
  rstd = 1.0 / std::sqrt(var + eps);
}

// rms_norm's 1 / sqrt(mean(x^2) + eps) of a group of n values, in f64.
double rms_scale(const std::vector<double>& v, double n, double eps) {
  double ms = 0;
  for (double e : v) ms += e * e;
  return 1.0 / std::sqrt(ms / n + eps);
}

// Statistics used for channel c: batch mean and biased variance in training, else running.
void channel_stats(const BatchNormPlan& p, std::int64_t c, const std::vector<std::vector<std::int64_t>>& members,
                   double& mean, double& var) {
  if (!p.training) {
    mean = channel_value(p.running_mean, c, 0);
    var = channel_value(p.running_var, c, 1);
    return;
  }
  mean = 0;
  for (const auto& m : members) mean += load_float(p.x.dtype, p.x.at(m));
  mean /= static_cast<double>(members.size());
  var = 0;
  for (const auto& m : members) {
    const double d = load_float(p.x.dtype, p.x.at(m)) - mean;
    var += d * d;
  }
  var /= static_cast<double>(members.size());
}

}  // namespace

void linear(const Call& call) {
  const LinearShapes s = plan_linear(call, 0);
  const Tensor y = view(call.outputs[0], "output 0");
  expect_output_shape(y, s.out_shape);
  std::vector<std::int64_t> xi, wi(2), yi;
  for_each_index(s.batch, [&](std::span<const std::int64_t> b) {
    for (std::int64_t o = 0; o < s.out; ++o) {
      double acc = 0;
      xi.assign(b.begin(), b.end());
      xi.push_back(0);
      for (std::int64_t i = 0; i < s.in; ++i) {
        xi.back() = i;
        wi = {o, i};
        acc += load_float(s.x.dtype, s.x.at(xi)) * load_float(s.w.dtype, s.w.at(wi));
      }
      if (s.b) {
        const std::int64_t bi[1] = {o};
        acc += load_float(s.b->dtype, s.b->at(bi));
      }
      yi.assign(b.begin(), b.end());
      yi.push_back(o);
      store_float(y.dtype, y.at(yi), acc);
    }
  });
}

void linear_backward(const Call& call) {
  // inputs: dy, x, w, b (may be null), y; outputs: dx, dw, db.
  const LinearShapes s = plan_linear(call, 1);
  const Tensor dy = view(call.inputs[0], "output gradient 0");
  expect_output_shape(dy, s.out_shape);
  const std::optional<Tensor> dx = grad_output(call, 0, s.x.shape);
  const std::optional<Tensor> dw = grad_output(call, 1, s.w.shape);
  if (!s.b && call.outputs.size() > 2 && call.outputs[2] != nullptr) {
    fail(DX_INVALID_ARGUMENT, "dx.linear backward: a bias gradient was requested without a bias");
  }
  const std::optional<Tensor> db = s.b ? grad_output(call, 2, s.b->shape) : std::nullopt;
  GradBuffer gx(s.x.shape), gw(s.w.shape), gb(std::vector<std::int64_t>{s.out});
  std::vector<std::int64_t> xi, yi, wi(2);
  for_each_index(s.batch, [&](std::span<const std::int64_t> b) {
    for (std::int64_t o = 0; o < s.out; ++o) {
      yi.assign(b.begin(), b.end());
      yi.push_back(o);
      const double g = load_float(dy.dtype, dy.at(yi));
      const std::int64_t oi[1] = {o};
      GradBuffer::add(gb.view.at(oi), g);
      xi.assign(b.begin(), b.end());
      xi.push_back(0);
      for (std::int64_t i = 0; i < s.in; ++i) {
        xi.back() = i;
        wi = {o, i};
        GradBuffer::add(gx.view.at(xi), g * load_float(s.w.dtype, s.w.at(wi)));
        GradBuffer::add(gw.view.at(wi), g * load_float(s.x.dtype, s.x.at(xi)));
      }
    }
  });
  if (dx) gx.store(*dx);
  if (dw) gw.store(*dw);
  if (db) gb.store(*db);
}

void layer_norm(const Call& call) {
  const NormPlan p = plan_norm(call, call.inputs[0]);
  const LayerNormParams params = layer_norm_params(call, p, 1, "input");
  const std::optional<Tensor> &w = params.w, &b = params.b;
  const LayerNormTriple out = layer_norm_triple(call.outputs, p, "output");
  const Tensor &y = out.y, &mean_out = out.mean, &rstd_out = out.rstd;
  std::vector<double> v;
  for_each_norm_group(p, [&](const std::vector<std::int64_t>& si, const std::vector<std::vector<std::int64_t>>& members) {
    load_group(p, members, v);
    double mean = 0, rstd = 0;
    layer_norm_stats(v, static_cast<double>(p.n), p.eps, mean, rstd);
    for (std::size_t k = 0; k < members.size(); ++k) {
      const auto pi = inner_of(p, members[k]);
      store_float(y.dtype, y.at(members[k]), (v[k] - mean) * rstd * load_or(w, pi, 1.0) + load_or(b, pi, 0.0));
    }
    store_float(mean_out.dtype, mean_out.at(si), mean);
    store_float(rstd_out.dtype, rstd_out.at(si), rstd);
  });
}

void layer_norm_backward(const Call& call) {
  // inputs: dy, dmean, drstd, x, w, b, y, mean, rstd; outputs: dx, dw, db. The statistics are
  // recomputed in f64 from x; dmean and drstd contribute too (mean and rstd are outputs).
  const NormPlan p = plan_norm(call, call.inputs[3]);
  const LayerNormParams params = layer_norm_params(call, p, 4, "forward input");
  const std::optional<Tensor> &w = params.w, &b = params.b;
  const LayerNormTriple grads = layer_norm_triple(call.inputs, p, "output gradient");
  const Tensor &dy = grads.y, &dmean = grads.mean, &drstd = grads.rstd;
  for (std::size_t k = 1; k <= 2; ++k) {
    const bool present = k == 1 ? w.has_value() : b.has_value();
    if (!present && call.outputs[k] != nullptr) {
      fail(DX_INVALID_ARGUMENT, "dx.layer_norm backward: gradient " + std::to_string(k) + " requested for an absent input");
    }
  }
  const std::optional<Tensor> dx = grad_output(call, 0, p.x.shape);
  const std::optional<Tensor> dw = w ? grad_output(call, 1, p.inner) : std::nullopt;
  const std::optional<Tensor> db = b ? grad_output(call, 2, p.inner) : std::nullopt;
  GradBuffer gx(p.x.shape), gw(p.inner), gb(p.inner);
  std::vector<double> v, xhat, dxhat;
  const auto n = static_cast<double>(p.n);
  for_each_norm_group(p, [&](const std::vector<std::int64_t>& si, const std::vector<std::vector<std::int64_t>>& members) {
    load_group(p, members, v);
    double mean = 0, rstd = 0;
    layer_norm_stats(v, n, p.eps, mean, rstd);
    const double gm = load_float(dmean.dtype, dmean.at(si));
    const double gr = load_float(drstd.dtype, drstd.at(si));
    xhat.assign(v.size(), 0);
    dxhat.assign(v.size(), 0);
    double mean_dxhat = 0, mean_dxhat_xhat = 0;
    for (std::size_t k = 0; k < members.size(); ++k) {
      const auto pi = inner_of(p, members[k]);
      const double g = load_float(dy.dtype, dy.at(members[k]));
      xhat[k] = (v[k] - mean) * rstd;
      dxhat[k] = g * load_or(w, pi, 1.0);
      mean_dxhat += dxhat[k] / n;
      mean_dxhat_xhat += dxhat[k] * xhat[k] / n;
      GradBuffer::add(gw.view.at(pi), g * xhat[k]);
      GradBuffer::add(gb.view.at(pi), g);
    }
    for (std::size_t k = 0; k < members.size(); ++k) {
      const double through_y = rstd * (dxhat[k] - mean_dxhat - xhat[k] * mean_dxhat_xhat);
      // d mean / dx = 1/n; d rstd / dx = -rstd^3 (x - mean) / n.
      const double through_stats = gm / n - gr * rstd * rstd * rstd * (v[k] - mean) / n;
      GradBuffer::add(gx.view.at(members[k]), through_y + through_stats);
    }
  });
  if (dx) gx.store(*dx);
  if (dw) gw.store(*dw);
  if (db) gb.store(*db);
}

void rms_norm(const Call& call) {
  const NormPlan p = plan_norm(call, call.inputs[0]);
  const std::optional<Tensor> w = optional_input(call, 1, "input 1");
  expect_param_shape(w, p, "weight");
  const Tensor y = view(call.outputs[0], "output 0");
  expect_output_shape(y, p.x.shape);
  std::vector<double> v;
  for_each_norm_group(p, [&](const std::vector<std::int64_t>&, const std::vector<std::vector<std::int64_t>>& members) {
    load_group(p, members, v);
    const double r = rms_scale(v, static_cast<double>(p.n), p.eps);
    for (std::size_t k = 0; k < members.size(); ++k) {
      store_float(y.dtype, y.at(members[k]), v[k] * r * load_or(w, inner_of(p, members[k]), 1.0));
    }
  });
}

void rms_norm_backward(const Call& call) {
  // inputs: dy, x, w (may be null), y; outputs: dx, dw.
  const NormPlan p = plan_norm(call, call.inputs[1]);
  const std::optional<Tensor> w = optional_input(call, 2, "forward input 1");
  expect_param_shape(w, p, "weight");
  const Tensor dy = view(call.inputs[0], "output gradient 0");
  expect_output_shape(dy, p.x.shape);
  if (!w && call.outputs[1] != nullptr) {
    fail(DX_INVALID_ARGUMENT, "dx.rms_norm backward: a weight gradient was requested without a weight");
  }
  const std::optional<Tensor> dx = grad_output(call, 0, p.x.shape);
  const std::optional<Tensor> dw = w ? grad_output(call, 1, p.inner) : std::nullopt;
  GradBuffer gx(p.x.shape), gw(p.inner);
  std::vector<double> v, dxhat;
  const auto n = static_cast<double>(p.n);
  for_each_norm_group(p, [&](const std::vector<std::int64_t>&, const std::vector<std::vector<std::int64_t>>& members) {
    load_group(p, members, v);
    const double r = rms_scale(v, n, p.eps);
    dxhat.assign(v.size(), 0);
    double mean_dxhat_xhat = 0;
    for (std::size_t k = 0; k < members.size(); ++k) {
      const auto pi = inner_of(p, members[k]);
      const double g = load_float(dy.dtype, dy.at(members[k]));
      dxhat[k] = g * load_or(w, pi, 1.0);
      mean_dxhat_xhat += dxhat[k] * v[k] * r / n;
      GradBuffer::add(gw.view.at(pi), g * v[k] * r);
    }
    for (std::size_t k = 0; k < members.size(); ++k) {
      GradBuffer::add(gx.view.at(members[k]), r * (dxhat[k] - v[k] * r * mean_dxhat_xhat));
    }
  });
  if (dx) gx.store(*dx);
  if (dw) gw.store(*dw);
}

void embedding(const Call& call) {
  // weight (V, D), indices (any shape, i32/i64) -> (indices..., D). Every index is checked
  // before anything is written.
  const Tensor w = view(call.inputs[0], "input 0");
  const Tensor idx = view(call.inputs[1], "input 1");
  const Tensor out = view(call.outputs[0], "output 0");
  if (w.rank() != 2) fail(DX_SHAPE_MISMATCH, "dx.embedding: weight must be rank 2, got " + shape_string(w.shape));
  std::vector<std::int64_t> expected = idx.shape;
  expected.push_back(w.shape[1]);
  expect_output_shape(out, expected);
  for_each_index(idx.shape, [&](std::span<const std::int64_t> i) {
    const std::int64_t row = load_int(idx.dtype, idx.at(i));
    if (row < 0 || row >= w.shape[0]) {
      fail(DX_OUT_OF_RANGE, "dx.embedding: index " + std::to_string(row) + " at " + shape_string(i) +
                                " is outside [0, " + std::to_string(w.shape[0]) + ")");
    }
  });
  std::vector<std::int64_t> oi, wi(2);
  for_each_index(idx.shape, [&](std::span<const std::int64_t> i) {
    wi[0] = load_int(idx.dtype, idx.at(i));
    oi.assign(i.begin(), i.end());
    oi.push_back(0);
    for (std::int64_t d = 0; d < w.shape[1]; ++d) {
      wi[1] = d;
      oi.back() = d;
      store_float(out.dtype, out.at(oi), load_float(w.dtype, w.at(wi)));
    }
  });
}

void embedding_backward(const Call& call) {
  // inputs: dy, weight, indices, y; outputs: dweight (rows summed), dindices (zeros).
  const Tensor dy = view(call.inputs[0], "output gradient 0");
  const Tensor w = view(call.inputs[1], "forward input 0");
  const Tensor idx = view(call.inputs[2], "forward input 1");
  if (w.rank() != 2) fail(DX_SHAPE_MISMATCH, "dx.embedding: weight must be rank 2");
  std::vector<std::int64_t> expected = idx.shape;
  expected.push_back(w.shape[1]);
  expect_output_shape(dy, expected);
  const std::optional<Tensor> dw = grad_output(call, 0, w.shape);
  const std::optional<Tensor> didx = grad_output(call, 1, idx.shape);
  GradBuffer gw(w.shape);
  std::vector<std::int64_t> oi, wi(2);
  for_each_index(idx.shape, [&](std::span<const std::int64_t> i) {
    wi[0] = load_int(idx.dtype, idx.at(i));
    if (wi[0] < 0 || wi[0] >= w.shape[0]) fail(DX_OUT_OF_RANGE, "dx.embedding: index out of range");
    oi.assign(i.begin(), i.end());
    oi.push_back(0);
    for (std::int64_t d = 0; d < w.shape[1]; ++d) {
      wi[1] = d;
      oi.back() = d;
      GradBuffer::add(gw.view.at(wi), load_float(dy.dtype, dy.at(oi)));
    }
  });
  if (dw) gw.store(*dw);
  if (didx) zero_fill(*didx);
}

void cross_entropy(const Call& call) {
  const CrossEntropyPlan p = plan_cross_entropy(call, 0);
  const Tensor out = view(call.outputs[0], "output 0");
  expect_output_shape(out, p.out_shape);
  std::vector<double> losses(static_cast<std::size_t>(p.rows), 0.0), line;
  std::int64_t counted = 0;
  for (std::int64_t r = 0; r < p.rows; ++r) {
    const std::int64_t label = label_of(p, r);
    if (label == p.ignore_index) continue;  // loss 0, not counted in the mean
    line.clear();
    for (std::int64_t c = 0; c < p.classes; ++c) line.push_back(logit(p, r, c));
    losses[r] = log_sum_exp_minus(line, line[label]);
    ++counted;
  }
  if (p.reduction == Reduction::kNone) {
    for (std::int64_t r = 0; r < p.rows; ++r) {
      const std::int64_t index[1] = {r};
      store_float(out.dtype, p.batched ? out.at(index) : out.base, losses[r]);
    }
    return;
  }
  double total = 0;
  for (double l : losses) total += l;
  // mean over the counted rows; none counted gives 0 / 0 = NaN (PyTorch).
  store_float(out.dtype, out.base, p.reduction == Reduction::kSum ? total : total / static_cast<double>(counted));
}

void cross_entropy_backward(const Call& call) {
  // inputs: dy, logits, labels, y; outputs: dlogits = g * (softmax - onehot), dlabels (zeros).
  const CrossEntropyPlan p = plan_cross_entropy(call, 1);
  const Tensor dy = view(call.inputs[0], "output gradient 0");
  expect_output_shape(dy, p.out_shape);
  const std::optional<Tensor> dlogits = grad_output(call, 0, p.logits.shape);
  const std::optional<Tensor> dlabels = grad_output(call, 1, p.labels.shape);
  std::int64_t counted = 0;
  for (std::int64_t r = 0; r < p.rows; ++r) counted += label_of(p, r) != p.ignore_index ? 1 : 0;
  GradBuffer g(p.logits.shape);
  std::vector<double> line;
  for (std::int64_t r = 0; r < p.rows; ++r) {
    const std::int64_t label = label_of(p, r);
    if (label == p.ignore_index) continue;
    double scale = 0;
    if (p.reduction == Reduction::kNone && p.batched) {
      const std::int64_t index[1] = {r};
      scale = load_float(dy.dtype, dy.at(index));
    } else {
      scale = load_float(dy.dtype, dy.base);
      if (p.reduction == Reduction::kMean) scale /= static_cast<double>(counted);
    }
    line.clear();
    for (std::int64_t c = 0; c < p.classes; ++c) line.push_back(logit(p, r, c));
    double m = 0;
    const double log_sum = log_sum_exp_shifted(line, m);
    for (std::int64_t c = 0; c < p.classes; ++c) {
      // exp((x - m) - log(sum)), not exp(x - (m + log(sum))): m + log(sum) rounds to m at huge
      // logits. With an infinite or NaN m, x - m gives the reference's NaN / 0 / Inf pattern.
      const double softmax = std::exp((line[c] - m) - log_sum);
      const std::int64_t i2[2] = {r, c}, i1[1] = {c};
      GradBuffer::add(p.batched ? g.view.at(i2) : g.view.at(i1), scale * (softmax - (c == label ? 1.0 : 0.0)));
    }
  }
  if (dlogits) g.store(*dlogits);
  if (dlabels) zero_fill(*dlabels);
}

// ---- log_softmax (the softmax helpers are reduce.cc's) ----

void log_softmax(const Call& call) {
  // (x - max) - log(sum(exp(x - max))) per line, in f64; a NaN poisons its line.
  const Tensor in = view(call.inputs[0], "input 0");
  const Tensor out = view(call.outputs[0], "output 0");
  expect_output_shape(out, in.shape);
  const std::int64_t axis = softmax_axis(call, in.rank());
  if (in.rank() == 0) {
    const double x = load_float(in.dtype, in.base);
    store_float(out.dtype, out.base, std::isnan(x - x) ? x - x : 0.0);
    return;
  }
  const std::int64_t length = in.shape[axis];
  std::vector<double> line(length);
  for_each_line(in.shape, axis, [&](std::vector<std::int64_t>& index) {
    double line_max = -std::numeric_limits<double>::infinity();
    bool has_nan = false;
    for (std::int64_t i = 0; i < length; ++i) {
      index[axis] = i;
      line[i] = load_float(in.dtype, in.at(index));
      if (std::isnan(line[i])) has_nan = true;
      else if (line[i] > line_max) line_max = line[i];
    }
    double total = 0;
    for (std::int64_t i = 0; i < length; ++i) total += std::exp(line[i] - line_max);
    const double log_sum = std::log(total);
    for (std::int64_t i = 0; i < length; ++i) {
      index[axis] = i;
      // (x - max) - log(sum), not x - (max + log(sum)): max + log(sum) rounds to max at huge
      // logits and the difference cancels. An all -Inf line gives NaN (-Inf - -Inf), as PyTorch.
      store_float(out.dtype, out.at(index),
                  has_nan ? std::numeric_limits<double>::quiet_NaN() : (line[i] - line_max) - log_sum);
    }
  });
}

void log_softmax_backward(const Call& call) {
  // dx = dy - softmax(x) * sum(dy) along the axis, softmax recomputed in f64 from x.
  softmax_family_backward(call, [](const std::vector<double>& s, const std::vector<double>& g, std::vector<double>& d) {
    double total = 0;
    for (double v : g) total += v;
    for (std::size_t i = 0; i < s.size(); ++i) d[i] = g[i] - s[i] * total;
  });
}

// ---- batch_norm (NCHW and any trailing spatial dims) ----

void batch_norm(const Call& call) {
  // inputs: x (N, C, ...), weight, bias, running_mean, running_var (all (C,), all optional but
  // x; the running stats are required in evaluation). Training: batch statistics (biased
  // variance) normalise, and the running stats, when given, are updated in place:
  // r = (1 - momentum) r + momentum s, with the unbiased variance for running_var (PyTorch).
  const BatchNormPlan p = plan_batch_norm(call, 0);
  const Tensor y = view(call.outputs[0], "output 0");
  expect_output_shape(y, p.x.shape);
  std::vector<std::vector<std::int64_t>> members;
  std::vector<double> out;
  for (std::int64_t c = 0; c < p.channels; ++c) {
    channel_members(p.x, c, members);
    double mean = 0, var = 0;
    channel_stats(p, c, members, mean, var);
    const double rstd = 1.0 / std::sqrt(var + p.eps);
    const double w = channel_value(p.w, c, 1), b = channel_value(p.b, c, 0);
    out.clear();
    for (const auto& m : members) out.push_back((load_float(p.x.dtype, p.x.at(m)) - mean) * rstd * w + b);
    for (std::size_t k = 0; k < members.size(); ++k) store_float(y.dtype, y.at(members[k]), out[k]);
    if (p.training && p.running_mean && p.running_var && !members.empty()) {
      const std::int64_t ci[1] = {c};
      const double n = static_cast<double>(members.size());
      const double unbiased = n > 1 ? var * n / (n - 1) : std::numeric_limits<double>::quiet_NaN();
      const double rm = channel_value(p.running_mean, c, 0), rv = channel_value(p.running_var, c, 1);
      store_float(p.running_mean->dtype, p.running_mean->at(ci), (1 - p.momentum) * rm + p.momentum * mean);
      store_float(p.running_var->dtype, p.running_var->at(ci), (1 - p.momentum) * rv + p.momentum * unbiased);
    }
  }
}

void batch_norm_backward(const Call& call) {
  // inputs: dy, x, weight, bias, running_mean, running_var, y; outputs: dx, dweight, dbias,
  // drunning_mean, drunning_var. The running stats are not updated.
  const BatchNormPlan p = plan_batch_norm(call, 1);
  const Tensor dy = view(call.inputs[0], "output gradient 0");
  expect_output_shape(dy, p.x.shape);
  const std::vector<std::int64_t> c_shape = {p.channels};
  const std::optional<Tensor> dx = grad_output(call, 0, p.x.shape);
  const std::optional<Tensor> dw = p.w ? grad_output(call, 1, c_shape) : std::nullopt;
  const std::optional<Tensor> db = p.b ? grad_output(call, 2, c_shape) : std::nullopt;
  GradBuffer gx(p.x.shape), gw(c_shape), gb(c_shape);
  std::vector<std::vector<std::int64_t>> members;
  for (std::int64_t c = 0; c < p.channels; ++c) {
    channel_members(p.x, c, members);
    if (members.empty()) continue;
    double mean = 0, var = 0;
    channel_stats(p, c, members, mean, var);
    const double rstd = 1.0 / std::sqrt(var + p.eps);
    const double w = channel_value(p.w, c, 1);
    const double n = static_cast<double>(members.size());
    double sum_g = 0, sum_g_xhat = 0;
    for (const auto& m : members) {
      const double g = load_float(dy.dtype, dy.at(m));
      const double xhat = (load_float(p.x.dtype, p.x.at(m)) - mean) * rstd;
      sum_g += g;
      sum_g_xhat += g * xhat;
    }
    const std::int64_t ci[1] = {c};
    GradBuffer::add(gw.view.at(ci), sum_g_xhat);
    GradBuffer::add(gb.view.at(ci), sum_g);
    for (const auto& m : members) {
      const double g = load_float(dy.dtype, dy.at(m));
      const double xhat = (load_float(p.x.dtype, p.x.at(m)) - mean) * rstd;
      // Training: the batch statistics depend on x; evaluation: they are constants.
      const double d = p.training ? w * rstd * (g - sum_g / n - xhat * sum_g_xhat / n) : w * rstd * g;
      GradBuffer::add(gx.view.at(m), d);
    }
  }
  if (dx) gx.store(*dx);
  if (dw) gw.store(*dw);
  if (db) gb.store(*db);
  // In evaluation y depends on the running statistics: d y / d rm = -w rstd,
  // d y / d rv = -w (x - rm) rstd^3 / 2. In training they do not affect y (gradient 0).
  const std::optional<Tensor> drm = p.running_mean ? grad_output(call, 3, c_shape) : std::nullopt;
  const std::optional<Tensor> drv = p.running_var ? grad_output(call, 4, c_shape) : std::nullopt;
  GradBuffer grm(c_shape), grv(c_shape);
  if (!p.training && (drm || drv)) {
    for (std::int64_t c = 0; c < p.channels; ++c) {
      channel_members(p.x, c, members);
      const double mean = channel_value(p.running_mean, c, 0), var = channel_value(p.running_var, c, 1);
      const double rstd = 1.0 / std::sqrt(var + p.eps);
      const double w = channel_value(p.w, c, 1);
      const std::int64_t ci[1] = {c};
      for (const auto& m : members) {
        const double g = load_float(dy.dtype, dy.at(m));
        GradBuffer::add(grm.view.at(ci), -g * w * rstd);
        GradBuffer::add(grv.view.at(ci), -0.5 * g * w * (load_float(p.x.dtype, p.x.at(m)) - mean) * rstd * rstd * rstd);
      }
    }
  }
  if (drm) grm.store(*drm);
  if (drv) grv.store(*drv);
}

}  // namespace deepx::ref
