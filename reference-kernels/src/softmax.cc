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

void softmax(const Call& call) {
  const Tensor in = view(call.inputs[0], "input 0");
  const Tensor out = view(call.outputs[0], "output 0");
  expect_output_shape(out, in.shape);
  const std::int64_t axis_attr = attr_i64(call, DX_SOFTMAX_AXIS, "axis", -1);
  const auto rank = static_cast<std::int64_t>(in.rank());
  const std::int64_t axis_limit = rank == 0 ? 1 : rank;  // rank 0 acts as rank 1 here
  const std::int64_t axis = axis_attr < 0 ? axis_attr + axis_limit : axis_attr;
  if (axis < 0 || axis >= axis_limit) {
    fail(DX_OUT_OF_RANGE, "softmax axis " + std::to_string(axis_attr) +
                              " is out of range for rank " + std::to_string(rank));
  }
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
    double line_max = -std::numeric_limits<double>::infinity();
    bool has_nan = false;
    for (std::int64_t i = 0; i < length; ++i) {
      index[axis] = i;
      line[i] = load_float(in.dtype, in.at(index));
      if (std::isnan(line[i])) has_nan = true;
      else if (line[i] > line_max) line_max = line[i];
    }
    double total = 0;
    for (std::int64_t i = 0; i < length; ++i) {
      line[i] = std::exp(line[i] - line_max);
      total += line[i];
    }
    for (std::int64_t i = 0; i < length; ++i) {
      index[axis] = i;
      const double y = has_nan ? std::numeric_limits<double>::quiet_NaN() : line[i] / total;
      store_float(out.dtype, out.at(index), y);
    }
  });
}

}  // namespace deepx::ref
