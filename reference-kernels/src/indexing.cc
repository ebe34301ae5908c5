// The indexing ops (element bytes are moved unchanged) and their gradients (F dtypes;
// accumulated in f64 and rounded once): dx.index_select (i32/i64 indices), dx.gather and
// dx.scatter_add (i64 indices; F sums in f64 and rounds once, I wraps). Every index is checked
// before anything is written.
#include <cstring>
#include <string>

#include "deepx/reference/kernels.hpp"

namespace deepx::ref {
namespace {

// Checks the index tensors of index_select / gather / scatter_add before anything is written.
void check_indices(const Tensor& idx, std::int64_t limit, const char* op) {
  for_each_index(idx.shape, [&](std::span<const std::int64_t> i) {
    const std::int64_t v = load_int(idx.dtype, idx.at(i));
    if (v < 0 || v >= limit) {
      fail(DX_OUT_OF_RANGE, std::string(op) + ": index " + std::to_string(v) + " at " + shape_string(i) +
                                " is outside [0, " + std::to_string(limit) + ")");
    }
  });
}

// gather / scatter_add shape rule (torch): same rank; idx.shape[d] <= x.shape[d] for d != axis.
void check_gather_shapes(const Tensor& x, const Tensor& idx, std::size_t axis, const char* op) {
  if (idx.rank() != x.rank()) fail(DX_SHAPE_MISMATCH, std::string(op) + ": index rank differs from the input's");
  for (std::size_t d = 0; d < x.rank(); ++d) {
    if (d != axis && idx.shape[d] > x.shape[d]) {
      fail(DX_SHAPE_MISMATCH, std::string(op) + ": index shape " + shape_string(idx.shape) + " exceeds input " + shape_string(x.shape));
    }
  }
}

// The axis of dx.index_select after the checks its forward and backward make, in this order:
// the axis, 1-D indices, `out` (output or output gradient) against x with dim `axis` replaced
// by len(idx), the indices.
std::size_t index_select_axis(const Call& call, const Tensor& x, const Tensor& idx, const Tensor& out) {
  const std::size_t axis = axis_attr(call, x.rank(), 0, "dx.index_select");
  if (idx.rank() != 1) fail(DX_SHAPE_MISMATCH, "dx.index_select: indices must be 1-D");
  std::vector<std::int64_t> expected = x.shape;
  expected[axis] = idx.shape[0];
  expect_output_shape(out, expected);
  check_indices(idx, x.shape[axis], "dx.index_select");
  return axis;
}

// The axis of dx.gather / dx.scatter_add after the checks their backward (and gather's
// forward) make, in this order: the axis, the shape rule, `out` against `out_shape`, the indices.
std::size_t gather_axis(const Call& call, const Tensor& x, const Tensor& idx, const Tensor& out,
                        const std::vector<std::int64_t>& out_shape, const char* op) {
  const std::size_t axis = axis_attr(call, x.rank(), 0, op);
  check_gather_shapes(x, idx, axis, op);
  expect_output_shape(out, out_shape);
  check_indices(idx, x.shape[axis], op);
  return axis;
}

// `to` = i with i[axis] replaced by the index idx holds at `at`.
void replace_axis(std::span<const std::int64_t> i, std::size_t axis, const Tensor& idx,
                  std::span<const std::int64_t> at, std::vector<std::int64_t>& to) {
  to.assign(i.begin(), i.end());
  to[axis] = load_int(idx.dtype, idx.at(at));
}

}  // namespace

void index_select(const Call& call) {
  // x, idx (1-D, i32/i64) -> x with dim `axis` replaced by len(idx).
  const Tensor x = view(call.inputs[0], "input 0");
  const Tensor idx = view(call.inputs[1], "input 1");
  const Tensor y = view(call.outputs[0], "output 0");
  const std::size_t axis = index_select_axis(call, x, idx, y);
  std::vector<std::int64_t> xi, ii(1);
  for_each_index(y.shape, [&](std::span<const std::int64_t> i) {
    ii[0] = i[axis];
    replace_axis(i, axis, idx, ii, xi);
    move_bytes(y, i, x, xi);
  });
}

void index_select_backward(const Call& call) {
  const Tensor dy = view(call.inputs[0], "output gradient 0");
  const Tensor x = view(call.inputs[1], "forward input 0");
  const Tensor idx = view(call.inputs[2], "forward input 1");
  const std::size_t axis = index_select_axis(call, x, idx, dy);
  std::vector<std::int64_t> ii(1);
  movement_backward(dy, x, grad_output(call, 0, x.shape), [&](std::span<const std::int64_t> i, std::vector<std::int64_t>& xi) {
    ii[0] = i[axis];
    replace_axis(i, axis, idx, ii, xi);
    return true;
  });
  if (const auto didx = grad_output(call, 1, idx.shape)) zero_fill(*didx);
}

void gather(const Call& call) {
  // torch.gather: y[i] = x[i with i[axis] replaced by idx[i]]; y has idx's shape.
  const Tensor x = view(call.inputs[0], "input 0");
  const Tensor idx = view(call.inputs[1], "input 1");
  const Tensor y = view(call.outputs[0], "output 0");
  const std::size_t axis = gather_axis(call, x, idx, y, idx.shape, "dx.gather");
  std::vector<std::int64_t> xi;
  for_each_index(y.shape, [&](std::span<const std::int64_t> i) {
    replace_axis(i, axis, idx, i, xi);
    move_bytes(y, i, x, xi);
  });
}

void gather_backward(const Call& call) {
  const Tensor dy = view(call.inputs[0], "output gradient 0");
  const Tensor x = view(call.inputs[1], "forward input 0");
  const Tensor idx = view(call.inputs[2], "forward input 1");
  const std::size_t axis = gather_axis(call, x, idx, dy, idx.shape, "dx.gather");
  movement_backward(dy, x, grad_output(call, 0, x.shape), [&](std::span<const std::int64_t> i, std::vector<std::int64_t>& xi) {
    replace_axis(i, axis, idx, i, xi);
    return true;
  });
  if (const auto didx = grad_output(call, 1, idx.shape)) zero_fill(*didx);
}

void scatter_add(const Call& call) {
  // y = x; y[i with i[axis] = idx[i]] += src[i] for every index i of idx (F: f64 sums rounded
  // once per element; I: wrapping).
  const Tensor x = view(call.inputs[0], "input 0");
  const Tensor idx = view(call.inputs[1], "input 1");
  const Tensor src = view(call.inputs[2], "input 2");
  const Tensor y = view(call.outputs[0], "output 0");
  const std::size_t axis = axis_attr(call, x.rank(), 0, "dx.scatter_add");
  check_gather_shapes(x, idx, axis, "dx.scatter_add");
  if (src.rank() != idx.rank()) fail(DX_SHAPE_MISMATCH, "dx.scatter_add: src rank differs from the index's");
  for (std::size_t d = 0; d < idx.rank(); ++d) {
    if (idx.shape[d] > src.shape[d]) fail(DX_SHAPE_MISMATCH, "dx.scatter_add: index shape exceeds src");
  }
  expect_output_shape(y, x.shape);
  check_indices(idx, x.shape[axis], "dx.scatter_add");
  // Accumulate in a buffer first (y may alias x).
  std::vector<double> fsum(static_cast<std::size_t>(x.numel));
  std::vector<std::uint64_t> isum(static_cast<std::size_t>(x.numel));
  const auto flat_of = [&](std::span<const std::int64_t> i) {
    std::int64_t f = 0;
    for (std::size_t k = 0; k < i.size(); ++k) f = f * x.shape[k] + i[k];
    return static_cast<std::size_t>(f);
  };
  for_each_index(x.shape, [&](std::span<const std::int64_t> i) {
    if (is_float(x.dtype)) fsum[flat_of(i)] = load_float(x.dtype, x.at(i));
    else isum[flat_of(i)] = static_cast<std::uint64_t>(load_int(x.dtype, x.at(i)));
  });
  std::vector<std::int64_t> yi;
  for_each_index(idx.shape, [&](std::span<const std::int64_t> i) {
    replace_axis(i, axis, idx, i, yi);
    if (is_float(x.dtype)) fsum[flat_of(yi)] += load_float(src.dtype, src.at(i));
    else isum[flat_of(yi)] += static_cast<std::uint64_t>(load_int(src.dtype, src.at(i)));
  });
  for_each_index(x.shape, [&](std::span<const std::int64_t> i) {
    if (is_float(x.dtype)) store_float(y.dtype, y.at(i), fsum[flat_of(i)]);
    else store_int_wrapping(y.dtype, y.at(i), static_cast<std::int64_t>(isum[flat_of(i)]));
  });
}

void scatter_add_backward(const Call& call) {
  // inputs: dy, x, idx, src, y; outputs: dx = dy, didx (zeros), dsrc = gather(dy, idx) on idx's
  // extent (0 beyond it).
  const Tensor dy = view(call.inputs[0], "output gradient 0");
  const Tensor x = view(call.inputs[1], "forward input 0");
  const Tensor idx = view(call.inputs[2], "forward input 1");
  const Tensor src = view(call.inputs[3], "forward input 2");
  const std::size_t axis = gather_axis(call, x, idx, dy, x.shape, "dx.scatter_add");
  movement_backward(dy, x, grad_output(call, 0, x.shape), [&](std::span<const std::int64_t> i, std::vector<std::int64_t>& xi) {
    xi.assign(i.begin(), i.end());
    return true;
  });
  if (const auto didx = grad_output(call, 1, idx.shape)) zero_fill(*didx);
  if (const auto dsrc = grad_output(call, 2, src.shape)) {
    GradBuffer buf(src.shape);
    std::vector<std::int64_t> yi;
    for_each_index(idx.shape, [&](std::span<const std::int64_t> i) {
      replace_axis(i, axis, idx, i, yi);
      GradBuffer::add(buf.view.at(i), load_float(dy.dtype, dy.at(yi)));
    });
    buf.store(*dsrc);
  }
}

}  // namespace deepx::ref
