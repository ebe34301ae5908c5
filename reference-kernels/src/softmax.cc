// dx.softmax along one axis (attr `axis`, default -1), numerically stable: each line is shifted
// by its maximum before exponentiation. Computed in f64 and rounded once; a NaN anywhere in a
// line makes the whole line NaN. A rank-0 tensor is one line of one element (PyTorch accepts
// axis 0 and -1 there).
#include <cmath>
#include <limits>
#include <string>

#include "deepx/ops.h"
#include "deepx/reference/kernels.hpp"

namespace deepx::ref {

namespace {

// The normalised softmax axis of a rank-`rank` tensor (rank 0 acts as rank 1).
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

// softmax of one line in f64 (max-shifted; a NaN anywhere makes the line NaN), in place.
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

}  // namespace

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

  std::vector<std::int64_t> outer_shape = in.shape;
  outer_shape[axis] = 1;
  const std::int64_t length = in.shape[axis];
  std::vector<double> line(length);
  std::vector<std::int64_t> index;

  for_each_index(outer_shape, [&](std::span<const std::int64_t> outer) {
    index.assign(outer.begin(), outer.end());
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

void softmax_backward(const Call& call) {
  // inputs: dy, x, y; output dx = s * (dy - sum(dy * s)) along the axis, with s the softmax
  // recomputed in f64 from x (not the rounded y).
  const Tensor dy = view(call.inputs[0], "output gradient 0");
  const Tensor x = view(call.inputs[1], "forward input 0");
  expect_output_shape(dy, x.shape);
  expect_output_shape(view(call.inputs[2], "forward output 0"), x.shape);
  const std::int64_t axis = softmax_axis(call, x.rank());
  const std::optional<Tensor> dx = grad_output(call, 0, x.shape);
  if (!dx) return;
  GradBuffer buf(x.shape);
  if (x.rank() == 0) {
    buf.store(*dx);  // softmax of one element is constant 1: gradient 0
    return;
  }
  std::vector<std::int64_t> outer_shape = x.shape;
  outer_shape[axis] = 1;
  const std::int64_t length = x.shape[axis];
  std::vector<double> s(length), g(length);
  std::vector<std::int64_t> index;
  for_each_index(outer_shape, [&](std::span<const std::int64_t> outer) {
    index.assign(outer.begin(), outer.end());
    for (std::int64_t i = 0; i < length; ++i) {
      index[axis] = i;
      s[i] = load_float(x.dtype, x.at(index));
      g[i] = load_float(dy.dtype, dy.at(index));
    }
    softmax_line(s);
    double dot = 0;
    for (std::int64_t i = 0; i < length; ++i) dot += g[i] * s[i];
    for (std::int64_t i = 0; i < length; ++i) {
      index[axis] = i;
      GradBuffer::add(buf.view.at(index), s[i] * (g[i] - dot));
    }
  });
  buf.store(*dx);
}

void log_softmax(const Call& call) {
  // x - max - log(sum(exp(x - max))) per line, in f64; a NaN poisons its line.
  const Tensor in = view(call.inputs[0], "input 0");
  const Tensor out = view(call.outputs[0], "output 0");
  expect_output_shape(out, in.shape);
  const std::int64_t axis = softmax_axis(call, in.rank());
  if (in.rank() == 0) {
    const double x = load_float(in.dtype, in.base);
    store_float(out.dtype, out.base, std::isnan(x - x) ? x - x : 0.0);
    return;
  }
  std::vector<std::int64_t> outer_shape = in.shape;
  outer_shape[axis] = 1;
  const std::int64_t length = in.shape[axis];
  std::vector<double> line(length);
  std::vector<std::int64_t> index;
  for_each_index(outer_shape, [&](std::span<const std::int64_t> outer) {
    index.assign(outer.begin(), outer.end());
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
    const double shift = line_max + std::log(total);
    for (std::int64_t i = 0; i < length; ++i) {
      index[axis] = i;
      // An all -Inf line gives NaN (-Inf - -Inf), as PyTorch.
      store_float(out.dtype, out.at(index), has_nan ? std::numeric_limits<double>::quiet_NaN() : line[i] - shift);
    }
  });
}

void log_softmax_backward(const Call& call) {
  // dx = dy - softmax(x) * sum(dy) along the axis, softmax recomputed in f64 from x.
  const Tensor dy = view(call.inputs[0], "output gradient 0");
  const Tensor x = view(call.inputs[1], "forward input 0");
  expect_output_shape(dy, x.shape);
  expect_output_shape(view(call.inputs[2], "forward output 0"), x.shape);
  const std::int64_t axis = softmax_axis(call, x.rank());
  const std::optional<Tensor> dx = grad_output(call, 0, x.shape);
  if (!dx) return;
  GradBuffer buf(x.shape);
  if (x.rank() == 0) {
    buf.store(*dx);  // log_softmax of one element is constant 0
    return;
  }
  std::vector<std::int64_t> outer_shape = x.shape;
  outer_shape[axis] = 1;
  const std::int64_t length = x.shape[axis];
  std::vector<double> s(length), g(length);
  std::vector<std::int64_t> index;
  for_each_index(outer_shape, [&](std::span<const std::int64_t> outer) {
    index.assign(outer.begin(), outer.end());
    double total = 0;
    for (std::int64_t i = 0; i < length; ++i) {
      index[axis] = i;
      s[i] = load_float(x.dtype, x.at(index));
      g[i] = load_float(dy.dtype, dy.at(index));
      total += g[i];
    }
    softmax_line(s);
    for (std::int64_t i = 0; i < length; ++i) {
      index[axis] = i;
      GradBuffer::add(buf.view.at(index), g[i] - s[i] * total);
    }
  });
  buf.store(*dx);
}

}  // namespace deepx::ref
