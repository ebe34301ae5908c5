// Reductions dx.sum, dx.mean, dx.prod, dx.max, dx.min over a set of axes (attrs `axes`,
// `keepdims`), dx.argmax / dx.argmin over one axis (attr `axis`, unset = the flattened tensor),
// and the gradients of sum, mean, prod, max and min.
// Floating sums and products accumulate in f64 and round once; integer sums and products
// accumulate in i64 with wrap and produce i64; the integer mean sums exactly (128-bit) and
// produces f64. Max/min propagate NaN; the max/min/argmax/argmin of an empty set is an error;
// the empty sum is 0, product 1, mean NaN. argmax/argmin return the first index of the extreme
// (a NaN counts as the extreme, as PyTorch).
// dx.softmax along one axis (attr `axis`, default -1), numerically stable: each line is shifted
// by its maximum before exponentiation. Computed in f64 and rounded once; a NaN anywhere in a
// line makes the whole line NaN. A rank-0 tensor is one line of one element (PyTorch accepts
// axis 0 and -1 there). Its gradient recomputes the softmax from x.
#include <cmath>
#include <limits>
#include <string>

#include "deepx/ops.h"
#include "deepx/reference/kernels.hpp"

namespace deepx::ref {
namespace {

__extension__ typedef __int128 Int128;  // exact integer mean accumulation

// Which axes of a rank-`rank` tensor a reduction covers.
// `arg`: argmax / argmin, whose first schema slot is one "axis" rather than "axes".
std::vector<bool> reduced_axes(const Call& call, std::size_t rank, bool arg) {
  if (arg) {
    // argmax / argmin: one axis, or every axis (flattened) when unset.
    const dx_attr_t* a = call.attr(DX_ARGREDUCE_AXIS, "axis");
    if (a == nullptr) return std::vector<bool>(rank, true);
    const std::int64_t axis = attr_i64(call, DX_ARGREDUCE_AXIS, "axis", 0);
    const auto r = static_cast<std::int64_t>(rank);
    const std::int64_t limit = r == 0 ? 1 : r;  // rank 0 accepts axis 0 / -1, as PyTorch
    const std::int64_t normal = axis < 0 ? axis + limit : axis;
    if (normal < 0 || normal >= limit) {
      fail(DX_OUT_OF_RANGE, "axis " + std::to_string(axis) + " is out of range for rank " +
                                std::to_string(rank));
    }
    std::vector<bool> reduced(rank, false);
    if (r > 0) reduced[normal] = true;
    return reduced;
  }
  const std::optional<std::vector<std::int64_t>> axes =
      attr_i64_list(call, DX_REDUCE_AXES, "axes");
  std::vector<bool> reduced(rank, false);
  if (!axes || axes->empty()) {
    reduced.assign(rank, true);  // unset or empty: every axis
    return reduced;
  }
  const auto r = static_cast<std::int64_t>(rank);
  for (std::int64_t axis : *axes) {
    const std::int64_t normal = axis < 0 ? axis + r : axis;
    if (normal < 0 || normal >= r) {
      fail(DX_OUT_OF_RANGE, "axis " + std::to_string(axis) + " is out of range for rank " +
                                std::to_string(rank));
    }
    if (reduced[normal]) fail(DX_OUT_OF_RANGE, "axis " + std::to_string(axis) + " is repeated");
    reduced[normal] = true;
  }
  return reduced;
}

// The reduction's iteration plan: every input index is (outer index + inner index), both of
// full rank, with `outer` covering the kept dims (reduced dims fixed at 0) and `inner` the
// reduced dims (kept dims fixed at 0). `out_aligned` views the output at full rank, so
// out_aligned.at(outer_index) is the output element of that group.
struct Plan {
  Tensor in;
  Tensor out_aligned;
  std::vector<std::int64_t> outer_shape;
  std::vector<std::int64_t> inner_shape;
  std::int64_t group_size = 1;
};

// `in` is the reduced tensor and `out` a tensor of the reduction's output shape (the output, or
// the output gradient in a backward call).
Plan plan_reduction(const Call& call, const DLTensor* in, const DLTensor* out_dl,
                    const char* out_role = "output 0", bool arg = false) {
  Plan p;
  p.in = view(in, "input 0");
  const Tensor out = view(out_dl, out_role);
  const bool keepdims = attr_bool(call, DX_REDUCE_KEEPDIMS, "keepdims", false);
  const std::vector<bool> reduced = reduced_axes(call, p.in.rank(), arg);

  std::vector<std::int64_t> expected;
  for (std::size_t k = 0; k < p.in.rank(); ++k) {
    if (!reduced[k]) {
      expected.push_back(p.in.shape[k]);
    } else if (keepdims) {
      expected.push_back(1);
    }
  }
  expect_output_shape(out, expected);

  p.out_aligned = out;
  p.out_aligned.shape = p.in.shape;
  p.out_aligned.strides.assign(p.in.rank(), 0);
  std::size_t out_axis = 0;
  for (std::size_t k = 0; k < p.in.rank(); ++k) {
    if (!reduced[k]) {
      p.out_aligned.strides[k] = out.strides[out_axis++];
      p.outer_shape.push_back(p.in.shape[k]);
      p.inner_shape.push_back(1);
    } else {
      if (keepdims) ++out_axis;
      p.outer_shape.push_back(1);
      p.inner_shape.push_back(p.in.shape[k]);
      p.group_size *= p.in.shape[k];
    }
  }
  return p;
}

// Visits each group: start(), then element(address) for each of its input elements (in
// row-major order of the reduced dims), then finish(address of its output element).
template <typename StartFn, typename ElementFn, typename FinishFn>
void for_each_group(const Plan& p, StartFn start, ElementFn element, FinishFn finish) {
  std::vector<std::int64_t> full(p.in.rank());
  for_each_index(p.outer_shape, [&](std::span<const std::int64_t> outer) {
    start();
    for_each_index(p.inner_shape, [&](std::span<const std::int64_t> inner) {
      for (std::size_t k = 0; k < full.size(); ++k) full[k] = outer[k] + inner[k];
      element(p.in.at(full));
    });
    finish(p.out_aligned.at(outer));
  });
}

// For backward kernels: calls fn(output address, input indices of the group) for each group.
template <typename Fn>
void for_each_group_indices(const Plan& p, Fn fn) {
  std::vector<std::vector<std::int64_t>> members;
  for_each_index(p.outer_shape, [&](std::span<const std::int64_t> outer) {
    members.clear();
    for_each_index(p.inner_shape, [&](std::span<const std::int64_t> inner) {
      std::vector<std::int64_t> full(p.in.rank());
      for (std::size_t k = 0; k < full.size(); ++k) full[k] = outer[k] + inner[k];
      members.push_back(std::move(full));
    });
    fn(static_cast<const std::byte*>(p.out_aligned.at(outer)), members);
  });
}

// max (sign +1) or min (sign -1) of the float values: NaN wins (the first NaN), then the first
// extreme. Returns the position in `values`; `values` is non-empty.
std::size_t extreme_position(const std::vector<double>& values, int sign) {
  std::size_t best = 0;
  for (std::size_t k = 1; k < values.size(); ++k) {
    if (std::isnan(values[best])) break;
    if (std::isnan(values[k]) || (sign > 0 ? values[k] > values[best] : values[k] < values[best])) best = k;
  }
  return best;
}

void extreme(const Call& call, int sign, const char* op) {
  const Plan p = plan_reduction(call, call.inputs[0], call.outputs[0]);
  if (p.group_size == 0) {
    fail(DX_INVALID_ARGUMENT, std::string(op) + " over an empty set (input shape " +
                                  shape_string(p.in.shape) + ") has no identity");
  }
  const DType type = p.in.dtype;
  bool first = true;
  if (is_float(type)) {
    double best = 0;
    for_each_group(
        p, [&] { first = true; },
        [&](const std::byte* x) {
          const double v = load_float(type, x);
          if (first || (!std::isnan(best) && (std::isnan(v) || (sign > 0 ? v > best : v < best)))) best = v;
          first = false;
        },
        [&](std::byte* o) { store_float(type, o, best); });
  } else {
    std::int64_t best = 0;
    for_each_group(
        p, [&] { first = true; },
        [&](const std::byte* x) {
          const std::int64_t v = load_int(type, x);
          if (first || (sign > 0 ? v > best : v < best)) best = v;
          first = false;
        },
        [&](std::byte* o) { store_int_wrapping(type, o, best); });
  }
}

void arg_extreme(const Call& call, int sign, const char* op) {
  const Plan p = plan_reduction(call, call.inputs[0], call.outputs[0], "output 0", true);
  if (p.group_size == 0) {
    fail(DX_INVALID_ARGUMENT, std::string(op) + " over an empty set (input shape " +
                                  shape_string(p.in.shape) + ")");
  }
  const DType type = p.in.dtype;
  std::int64_t position = 0, best_position = 0;
  double best_f = 0;
  std::int64_t best_i = 0;
  for_each_group(
      p, [&] { position = 0; best_position = 0; },
      [&](const std::byte* x) {
        if (is_float(type)) {
          const double v = load_float(type, x);
          if (position == 0 || (!std::isnan(best_f) && (std::isnan(v) || (sign > 0 ? v > best_f : v < best_f)))) {
            best_f = v;
            best_position = position;
          }
        } else {
          const std::int64_t v = load_int(type, x);
          if (position == 0 || (sign > 0 ? v > best_i : v < best_i)) {
            best_i = v;
            best_position = position;
          }
        }
        ++position;
      },
      [&](std::byte* o) { store_int_wrapping(DType::kI64, o, best_position); });
}

// The backward plan: x = inputs[1], dy = inputs[0] (output-shaped), y = inputs[2].
Plan plan_backward(const Call& call) {
  const Plan p = plan_reduction(call, call.inputs[1], call.inputs[0], "output gradient 0");
  const Tensor y = view(call.inputs[2], "forward output 0");
  expect_output_shape(y, view(call.inputs[0], "output gradient 0").shape);
  return p;
}

// Shared backward: per group, weights(values) gives d out / d x_k for each member.
template <typename Weights>
void reduction_backward(const Call& call, Weights weights) {
  const Plan p = plan_backward(call);
  const std::optional<Tensor> dx = grad_output(call, 0, p.in.shape);
  if (!dx) return;
  GradBuffer buf(p.in.shape);
  std::vector<double> values, w;
  for_each_group_indices(p, [&](const std::byte* dy_at, const std::vector<std::vector<std::int64_t>>& members) {
    const double g = load_float(p.out_aligned.dtype, dy_at);
    values.clear();
    for (const auto& m : members) values.push_back(load_float(p.in.dtype, p.in.at(m)));
    w.assign(values.size(), 0.0);
    weights(values, w);
    for (std::size_t k = 0; k < members.size(); ++k) GradBuffer::add(buf.view.at(members[k]), g * w[k]);
  });
  buf.store(*dx);
}

}  // namespace

void sum(const Call& call) {
  const Plan p = plan_reduction(call, call.inputs[0], call.outputs[0]);
  const DType in_type = p.in.dtype;
  const DType out_type = p.out_aligned.dtype;
  if (is_float(in_type)) {
    double acc = 0;
    for_each_group(
        p, [&] { acc = 0; }, [&](const std::byte* x) { acc += load_float(in_type, x); },
        [&](std::byte* o) { store_float(out_type, o, acc); });
  } else {
    std::uint64_t acc = 0;  // unsigned: wraps without UB
    for_each_group(
        p, [&] { acc = 0; },
        [&](const std::byte* x) { acc += static_cast<std::uint64_t>(load_int(in_type, x)); },
        [&](std::byte* o) { store_int_wrapping(out_type, o, static_cast<std::int64_t>(acc)); });
  }
}

void max(const Call& call) { extreme(call, +1, "dx.max"); }
void min(const Call& call) { extreme(call, -1, "dx.min"); }
void argmax(const Call& call) { arg_extreme(call, +1, "dx.argmax"); }
void argmin(const Call& call) { arg_extreme(call, -1, "dx.argmin"); }

void mean(const Call& call) {
  const Plan p = plan_reduction(call, call.inputs[0], call.outputs[0]);
  const DType in_type = p.in.dtype;
  const DType out_type = p.out_aligned.dtype;
  const auto n = static_cast<double>(p.group_size);  // 0 gives 0 / 0 = NaN
  if (is_float(in_type)) {
    double acc = 0;
    for_each_group(
        p, [&] { acc = 0; }, [&](const std::byte* x) { acc += load_float(in_type, x); },
        [&](std::byte* o) { store_float(out_type, o, acc / n); });
  } else {
    Int128 acc = 0;  // exact for any tensor that fits in memory
    for_each_group(
        p, [&] { acc = 0; }, [&](const std::byte* x) { acc += load_int(in_type, x); },
        [&](std::byte* o) { store_float(out_type, o, static_cast<double>(acc) / n); });
  }
}

void prod(const Call& call) {
  const Plan p = plan_reduction(call, call.inputs[0], call.outputs[0]);
  const DType in_type = p.in.dtype;
  const DType out_type = p.out_aligned.dtype;
  if (is_float(in_type)) {
    double acc = 1;
    for_each_group(
        p, [&] { acc = 1; }, [&](const std::byte* x) { acc *= load_float(in_type, x); },
        [&](std::byte* o) { store_float(out_type, o, acc); });
  } else {
    std::uint64_t acc = 1;  // unsigned: wraps without UB
    for_each_group(
        p, [&] { acc = 1; },
        [&](const std::byte* x) { acc *= static_cast<std::uint64_t>(load_int(in_type, x)); },
        [&](std::byte* o) { store_int_wrapping(out_type, o, static_cast<std::int64_t>(acc)); });
  }
}

void sum_backward(const Call& call) {
  reduction_backward(call, [](const std::vector<double>&, std::vector<double>& w) {
    w.assign(w.size(), 1.0);
  });
}

void mean_backward(const Call& call) {
  reduction_backward(call, [](const std::vector<double>&, std::vector<double>& w) {
    w.assign(w.size(), 1.0 / static_cast<double>(w.size()));
  });
}

void prod_backward(const Call& call) {
  // d/dx_k = product of the others, from prefix and suffix products (correct with zeros).
  reduction_backward(call, [](const std::vector<double>& v, std::vector<double>& w) {
    std::vector<double> suffix(v.size() + 1, 1.0);
    for (std::size_t k = v.size(); k-- > 0;) suffix[k] = suffix[k + 1] * v[k];
    double prefix = 1.0;
    for (std::size_t k = 0; k < v.size(); ++k) {
      w[k] = prefix * suffix[k + 1];
      prefix *= v[k];
    }
  });
}

void max_backward(const Call& call) {
  // The whole gradient goes to the first maximal element (the first NaN if any).
  reduction_backward(call, [](const std::vector<double>& v, std::vector<double>& w) {
    if (!v.empty()) w[extreme_position(v, +1)] = 1.0;
  });
}

void min_backward(const Call& call) {
  reduction_backward(call, [](const std::vector<double>& v, std::vector<double>& w) {
    if (!v.empty()) w[extreme_position(v, -1)] = 1.0;
  });
}

// ---- softmax ----

std::int64_t softmax_axis(const Call& call, std::size_t rank_u) {
  const std::int64_t axis_attr = attr_i64(call, DX_SOFTMAX_AXIS, "axis", -1);
  const auto rank = static_cast<std::int64_t>(rank_u);
  const std::int64_t axis_limit = rank == 0 ? 1 : rank;  // rank 0 acts as rank 1 here
  const std::int64_t axis = axis_attr < 0 ? axis_attr + axis_limit : axis_attr;
  if (axis < 0 || axis >= axis_limit) {
    fail(DX_OUT_OF_RANGE, "softmax axis " + std::to_string(axis_attr) +
                              " is out of range for rank " + std::to_string(rank));
  }
  return axis;
}

void softmax_line(std::vector<double>& line) {
  double line_max = -std::numeric_limits<double>::infinity();
  bool has_nan = false;
  for (double v : line) {
    if (std::isnan(v)) has_nan = true;
    else if (v > line_max) line_max = v;
  }
  double total = 0;
  for (double& v : line) {
    v = std::exp(v - line_max);
    total += v;
  }
  for (double& v : line) v = has_nan ? std::numeric_limits<double>::quiet_NaN() : v / total;
}

void softmax(const Call& call) {
  const Tensor in = view(call.inputs[0], "input 0");
  const Tensor out = view(call.outputs[0], "output 0");
  expect_output_shape(out, in.shape);
  const auto rank = static_cast<std::int64_t>(in.rank());
  const std::int64_t axis = softmax_axis(call, in.rank());
  if (rank == 0) {
    const double x = load_float(in.dtype, in.base);
    // exp(x - x) / exp(x - x): 1, or NaN for NaN and +-Inf (Inf - Inf), as in the general case.
    store_float(out.dtype, out.base, std::isnan(x - x) ? x - x : 1.0);
    return;
  }

  const std::int64_t length = in.shape[axis];
  std::vector<double> line(length);
  for_each_line(in.shape, axis, [&](std::vector<std::int64_t>& index) {
    // Read the whole line first, so an output that aliases the input is safe.
    for (std::int64_t i = 0; i < length; ++i) {
      index[axis] = i;
      line[i] = load_float(in.dtype, in.at(index));
    }
    softmax_line(line);
    for (std::int64_t i = 0; i < length; ++i) {
      index[axis] = i;
      store_float(out.dtype, out.at(index), line[i]);
    }
  });
}

void softmax_family_backward(const Call& call,
                             void (*line_grad)(const std::vector<double>& s, const std::vector<double>& g,
                                               std::vector<double>& dx_line)) {
  const Tensor dy = view(call.inputs[0], "output gradient 0");
  const Tensor x = view(call.inputs[1], "forward input 0");
  expect_output_shape(dy, x.shape);
  expect_output_shape(view(call.inputs[2], "forward output 0"), x.shape);
  const std::int64_t axis = softmax_axis(call, x.rank());
  const std::optional<Tensor> dx = grad_output(call, 0, x.shape);
  if (!dx) return;
  GradBuffer buf(x.shape);
  if (x.rank() == 0) {
    buf.store(*dx);  // a constant of one element: gradient 0
    return;
  }
  const std::int64_t length = x.shape[axis];
  std::vector<double> s(length), g(length), d(length);
  for_each_line(x.shape, axis, [&](std::vector<std::int64_t>& index) {
    for (std::int64_t i = 0; i < length; ++i) {
      index[axis] = i;
      s[i] = load_float(x.dtype, x.at(index));
      g[i] = load_float(dy.dtype, dy.at(index));
    }
    softmax_line(s);
    line_grad(s, g, d);
    for (std::int64_t i = 0; i < length; ++i) {
      index[axis] = i;
      GradBuffer::add(buf.view.at(index), d[i]);
    }
  });
  buf.store(*dx);
}

void softmax_backward(const Call& call) {
  // dx = s * (dy - sum(dy * s)) along the axis, with s the softmax recomputed in f64 from x
  // (not the rounded y).
  softmax_family_backward(call, [](const std::vector<double>& s, const std::vector<double>& g, std::vector<double>& d) {
    double dot = 0;
    for (std::size_t i = 0; i < s.size(); ++i) dot += g[i] * s[i];
    for (std::size_t i = 0; i < s.size(); ++i) d[i] = s[i] * (g[i] - dot);
  });
}

}  // namespace deepx::ref
