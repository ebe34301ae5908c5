// Shape ops of the movement family (bit-exact: element bytes are moved unchanged) and their
// gradients (F dtypes; accumulated in f64 and rounded once): dx.reshape, dx.broadcast_to,
// dx.concat (variadic), dx.split (1 to 8 outputs), dx.slice, dx.pad, dx.tile, and the creation
// op dx.arange (dx.copy, dx.transpose and dx.fill are in movement.cc).
#include <cmath>
#include <cstring>
#include <string>

#include "deepx/reference/kernels.hpp"

namespace deepx::ref {
namespace {

// Row-major multi-index of flat position `flat` in `shape`.
void unflatten(std::int64_t flat, std::span<const std::int64_t> shape, std::vector<std::int64_t>& index) {
  index.resize(shape.size());
  for (std::size_t k = shape.size(); k-- > 0;) {
    index[k] = flat % shape[k];
    flat /= shape[k];
  }
}

// ---- slice ----
struct SlicePlan {
  std::vector<std::int64_t> start, step, out_shape;
};
SlicePlan plan_slice(const Call& call, const Tensor& x) {
  const std::size_t r = x.rank();
  const auto starts = attr_i64_list(call, 0, "starts").value_or(std::vector<std::int64_t>{});
  const auto stops = attr_i64_list(call, 1, "stops").value_or(std::vector<std::int64_t>{});
  const auto steps = attr_i64_list(call, 2, "steps").value_or(std::vector<std::int64_t>{});
  if (starts.size() > r || stops.size() > r || steps.size() > r) {
    fail(DX_INVALID_ARGUMENT, "dx.slice: more starts/stops/steps than axes (rank " + std::to_string(r) + ")");
  }
  SlicePlan p;
  for (std::size_t k = 0; k < r; ++k) {
    const std::int64_t n = x.shape[k];
    const std::int64_t step = k < steps.size() ? steps[k] : 1;
    if (step <= 0) fail(DX_INVALID_ARGUMENT, "dx.slice: steps must be positive");
    // Python slicing: negative counts from the end, then clamped to [0, n].
    const auto clamp_bound = [n](std::int64_t v) {
      if (v < 0) v += n;
      return v < 0 ? 0 : (v > n ? n : v);
    };
    const std::int64_t start = k < starts.size() ? clamp_bound(starts[k]) : 0;
    const std::int64_t stop = k < stops.size() ? clamp_bound(stops[k]) : n;
    p.start.push_back(start);
    p.step.push_back(step);
    p.out_shape.push_back(stop > start ? (stop - start + step - 1) / step : 0);
  }
  return p;
}

// The x index that output index i of a slice reads: start + i * step per dim.
void slice_source(const SlicePlan& p, std::span<const std::int64_t> i, std::vector<std::int64_t>& xi) {
  for (std::size_t k = 0; k < xi.size(); ++k) xi[k] = p.start[k] + i[k] * p.step[k];
}

// ---- pad ----
struct PadPlan {
  std::vector<std::int64_t> before, out_shape;
};
PadPlan plan_pad(const Call& call, const Tensor& x) {
  const auto pads = attr_i64_list(call, 0, "pads").value_or(std::vector<std::int64_t>{});
  const std::size_t r = x.rank();
  if (pads.size() != 2 * r && !pads.empty()) {
    fail(DX_INVALID_ARGUMENT, "dx.pad: pads needs 2 entries (before, after) per axis, got " + std::to_string(pads.size()));
  }
  PadPlan p;
  for (std::size_t k = 0; k < r; ++k) {
    const std::int64_t b = pads.empty() ? 0 : pads[2 * k], a = pads.empty() ? 0 : pads[2 * k + 1];
    if (b < 0 || a < 0) fail(DX_INVALID_ARGUMENT, "dx.pad: pads must be non-negative");
    p.before.push_back(b);
    p.out_shape.push_back(x.shape[k] + b + a);
  }
  return p;
}

// ---- tile ----
struct TilePlan {
  Tensor x;  // viewed with leading 1-dims to the output rank
  std::vector<std::int64_t> out_shape;
  std::size_t lead = 0;  // dims prepended to x
};
TilePlan plan_tile(const Call& call, const Tensor& x) {
  std::vector<std::int64_t> reps = attr_i64_list(call, 0, "repeats").value_or(std::vector<std::int64_t>{});
  for (std::int64_t v : reps) {
    if (v < 0) fail(DX_INVALID_ARGUMENT, "dx.tile: repeats must be non-negative");
  }
  TilePlan p;
  const std::size_t r = std::max(reps.size(), x.rank());
  reps.insert(reps.begin(), r - reps.size(), 1);
  p.lead = r - x.rank();
  p.x = x;
  p.x.shape.insert(p.x.shape.begin(), p.lead, 1);
  p.x.strides.insert(p.x.strides.begin(), p.lead, 0);
  for (std::size_t k = 0; k < r; ++k) p.out_shape.push_back(p.x.shape[k] * reps[k]);
  return p;
}

// The x index that output index i of a pad reads, into xi; false when i lies in the border.
bool pad_source(const PadPlan& p, const Tensor& x, std::span<const std::int64_t> i, std::vector<std::int64_t>& xi) {
  for (std::size_t k = 0; k < xi.size(); ++k) {
    xi[k] = i[k] - p.before[k];
    if (xi[k] < 0 || xi[k] >= x.shape[k]) return false;
  }
  return true;
}

}  // namespace

void reshape(const Call& call) {
  // Elements in row-major order, into the output's shape (same element count).
  const Tensor x = view(call.inputs[0], "input 0");
  const Tensor y = view(call.outputs[0], "output 0");
  if (x.numel != y.numel) {
    fail(DX_SHAPE_MISMATCH, "dx.reshape: " + shape_string(x.shape) + " and " + shape_string(y.shape) + " differ in size");
  }
  std::vector<std::int64_t> xi;
  std::int64_t flat = 0;
  for_each_index(y.shape, [&](std::span<const std::int64_t> yi) {
    unflatten(flat++, x.shape, xi);
    move_bytes(y, yi, x, xi);
  });
}

void reshape_backward(const Call& call) {
  const Tensor dy = view(call.inputs[0], "output gradient 0");
  const Tensor x = view(call.inputs[1], "forward input 0");
  if (dy.numel != x.numel) fail(DX_SHAPE_MISMATCH, "dx.reshape backward: sizes differ");
  std::int64_t flat = 0;
  movement_backward(dy, x, grad_output(call, 0, x.shape), [&](std::span<const std::int64_t>, std::vector<std::int64_t>& xi) {
    unflatten(flat++, x.shape, xi);
    return true;
  });
}

void broadcast_to_op(const Call& call) {
  const Tensor x = view(call.inputs[0], "input 0");
  const Tensor y = view(call.outputs[0], "output 0");
  if (const auto shape = attr_i64_list(call, 0, "shape")) expect_output_shape(y, *shape);
  if (y.rank() < x.rank() || broadcast_shapes(x.shape, y.shape) != y.shape) {
    fail(DX_SHAPE_MISMATCH, "dx.broadcast_to: " + shape_string(x.shape) + " does not broadcast to " + shape_string(y.shape));
  }
  const Tensor xb = broadcast_to(x, y.shape);
  for_each_index(y.shape, [&](std::span<const std::int64_t> i) { move_bytes(y, i, xb, i); });
}

void broadcast_to_backward(const Call& call) {
  const Tensor dy = view(call.inputs[0], "output gradient 0");
  const Tensor x = view(call.inputs[1], "forward input 0");
  if (dy.rank() < x.rank() || broadcast_shapes(x.shape, dy.shape) != dy.shape) {
    fail(DX_SHAPE_MISMATCH, "dx.broadcast_to backward: shapes do not broadcast");
  }
  const std::size_t lead = dy.rank() - x.rank();
  movement_backward(dy, x, grad_output(call, 0, x.shape), [&](std::span<const std::int64_t> i, std::vector<std::int64_t>& xi) {
    for (std::size_t k = 0; k < x.rank(); ++k) xi[k] = x.shape[k] == 1 ? 0 : i[lead + k];
    return true;
  });
}

void concat(const Call& call) {
  const Tensor first = view(call.inputs[0], "input 0");
  const Tensor y = view(call.outputs[0], "output 0");
  const std::size_t axis = axis_attr(call, first.rank(), 0, "dx.concat");
  std::vector<Tensor> xs;
  std::vector<std::int64_t> expected = first.shape;
  expected[axis] = 0;
  for (std::size_t i = 0; i < call.inputs.size(); ++i) {
    xs.push_back(view(call.inputs[i], "input " + std::to_string(i)));
    const Tensor& x = xs.back();
    for (std::size_t d = 0; d < first.rank(); ++d) {
      if (x.rank() != first.rank() || (d != axis && x.shape[d] != first.shape[d])) {
        fail(DX_SHAPE_MISMATCH, "dx.concat: input " + std::to_string(i) + " " + shape_string(x.shape) +
                                    " does not match " + shape_string(first.shape) + " off the axis");
      }
    }
    expected[axis] += x.shape[axis];
  }
  expect_output_shape(y, expected);
  std::int64_t base = 0;
  std::vector<std::int64_t> yi;
  for (const Tensor& x : xs) {
    for_each_index(x.shape, [&](std::span<const std::int64_t> i) {
      yi.assign(i.begin(), i.end());
      yi[axis] += base;
      move_bytes(y, yi, x, i);
    });
    base += x.shape[axis];
  }
}

void concat_backward(const Call& call) {
  // inputs: dy, x_0 .. x_{n-1}, y; outputs: dx_0 .. dx_{n-1}.
  const std::size_t n = call.inputs.size() - 2;
  const Tensor dy = view(call.inputs[0], "output gradient 0");
  const Tensor first = view(call.inputs[1], "forward input 0");
  const std::size_t axis = axis_attr(call, first.rank(), 0, "dx.concat");
  std::int64_t base = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const Tensor x = view(call.inputs[1 + i], "forward input " + std::to_string(i));
    if (x.rank() != dy.rank()) fail(DX_SHAPE_MISMATCH, "dx.concat backward: rank mismatch");
    const std::int64_t offset = base;
    movement_backward(dy, x, grad_output(call, i, x.shape), [&](std::span<const std::int64_t> yi, std::vector<std::int64_t>& xi) {
      if (yi[axis] < offset || yi[axis] >= offset + x.shape[axis]) return false;
      xi.assign(yi.begin(), yi.end());
      xi[axis] -= offset;
      for (std::size_t d = 0; d < xi.size(); ++d) {
        if (xi[d] >= x.shape[d]) return false;
      }
      return true;
    });
    base += x.shape[axis];
  }
  if (base != dy.shape[axis]) fail(DX_SHAPE_MISMATCH, "dx.concat backward: gradient shape disagrees with the inputs");
}

void split(const Call& call) {
  // attrs: axis (default 0), sizes (one per output; unset = equal parts).
  const Tensor x = view(call.inputs[0], "input 0");
  const std::size_t axis = axis_attr(call, x.rank(), 0, "dx.split");
  const std::size_t n = call.outputs.size();
  std::vector<std::int64_t> sizes = attr_i64_list(call, 1, "sizes").value_or(std::vector<std::int64_t>{});
  if (sizes.empty()) {
    if (x.shape[axis] % static_cast<std::int64_t>(n) != 0) {
      fail(DX_SHAPE_MISMATCH, "dx.split: axis of size " + std::to_string(x.shape[axis]) + " does not split into " + std::to_string(n) + " equal parts");
    }
    sizes.assign(n, x.shape[axis] / static_cast<std::int64_t>(n));
  }
  std::int64_t total = 0;
  for (std::int64_t s : sizes) {
    if (s < 0) fail(DX_INVALID_ARGUMENT, "dx.split: negative size");
    total += s;
  }
  if (sizes.size() != n || total != x.shape[axis]) {
    fail(DX_SHAPE_MISMATCH, "dx.split: sizes " + shape_string(sizes) + " do not split axis " + std::to_string(axis) + " of " + shape_string(x.shape) + " into " + std::to_string(n) + " outputs");
  }
  std::int64_t base = 0;
  std::vector<std::int64_t> xi;
  for (std::size_t o = 0; o < n; ++o) {
    const Tensor y = view(call.outputs[o], "output " + std::to_string(o));
    std::vector<std::int64_t> expected = x.shape;
    expected[axis] = sizes[o];
    expect_output_shape(y, expected);
    for_each_index(y.shape, [&](std::span<const std::int64_t> i) {
      xi.assign(i.begin(), i.end());
      xi[axis] += base;
      move_bytes(y, i, x, xi);
    });
    base += sizes[o];
  }
}

void split_backward(const Call& call) {
  // inputs: dy_0 .. dy_{m-1}, x, y_0 .. y_{m-1}; output dx (the dy's concatenated).
  const std::size_t m = (call.inputs.size() - 1) / 2;
  const Tensor x = view(call.inputs[m], "forward input 0");
  const std::size_t axis = axis_attr(call, x.rank(), 0, "dx.split");
  const std::optional<Tensor> dx = grad_output(call, 0, x.shape);
  if (!dx) return;
  GradBuffer buf(x.shape);
  std::int64_t base = 0;
  std::vector<std::int64_t> xi;
  for (std::size_t o = 0; o < m; ++o) {
    const Tensor dy = view(call.inputs[o], "output gradient " + std::to_string(o));
    if (dy.rank() != x.rank()) fail(DX_SHAPE_MISMATCH, "dx.split backward: rank mismatch");
    for_each_index(dy.shape, [&](std::span<const std::int64_t> i) {
      xi.assign(i.begin(), i.end());
      xi[axis] += base;
      if (xi[axis] < x.shape[axis]) GradBuffer::add(buf.view.at(xi), load_float(dy.dtype, dy.at(i)));
    });
    base += dy.shape[axis];
  }
  if (base != x.shape[axis]) fail(DX_SHAPE_MISMATCH, "dx.split backward: gradients do not cover the input");
  buf.store(*dx);
}

void slice(const Call& call) {
  const Tensor x = view(call.inputs[0], "input 0");
  const Tensor y = view(call.outputs[0], "output 0");
  const SlicePlan p = plan_slice(call, x);
  expect_output_shape(y, p.out_shape);
  std::vector<std::int64_t> xi(x.rank());
  for_each_index(y.shape, [&](std::span<const std::int64_t> i) {
    slice_source(p, i, xi);
    move_bytes(y, i, x, xi);
  });
}

void slice_backward(const Call& call) {
  const Tensor dy = view(call.inputs[0], "output gradient 0");
  const Tensor x = view(call.inputs[1], "forward input 0");
  const SlicePlan p = plan_slice(call, x);
  expect_output_shape(dy, p.out_shape);
  movement_backward(dy, x, grad_output(call, 0, x.shape), [&](std::span<const std::int64_t> i, std::vector<std::int64_t>& xi) {
    slice_source(p, i, xi);
    return true;
  });
}

void pad(const Call& call) {
  // pads = (before_0, after_0, before_1, after_1, ...), non-negative; value as dx.fill's.
  const Tensor x = view(call.inputs[0], "input 0");
  const Tensor y = view(call.outputs[0], "output 0");
  const PadPlan p = plan_pad(call, x);
  expect_output_shape(y, p.out_shape);
  std::byte fill_value[8];
  encode_value(call, 1, "value", y.dtype, fill_value);
  std::vector<std::int64_t> xi(x.rank());
  for_each_index(y.shape, [&](std::span<const std::int64_t> i) {
    if (pad_source(p, x, i, xi)) move_bytes(y, i, x, xi);
    else std::memcpy(y.at(i), fill_value, size_of(y.dtype));
  });
}

void pad_backward(const Call& call) {
  const Tensor dy = view(call.inputs[0], "output gradient 0");
  const Tensor x = view(call.inputs[1], "forward input 0");
  const PadPlan p = plan_pad(call, x);
  expect_output_shape(dy, p.out_shape);
  movement_backward(dy, x, grad_output(call, 0, x.shape), [&](std::span<const std::int64_t> i, std::vector<std::int64_t>& xi) {
    return pad_source(p, x, i, xi);
  });
}

void tile(const Call& call) {
  // numpy.tile / torch.tile: repeats shorter than the rank are padded with leading 1s, longer
  // ones prepend dims of size 1 to x.
  const Tensor x = view(call.inputs[0], "input 0");
  const Tensor y = view(call.outputs[0], "output 0");
  const TilePlan p = plan_tile(call, x);
  expect_output_shape(y, p.out_shape);
  std::vector<std::int64_t> xi(p.x.rank());
  for_each_index(y.shape, [&](std::span<const std::int64_t> i) {
    for (std::size_t k = 0; k < xi.size(); ++k) xi[k] = i[k] % p.x.shape[k];
    move_bytes(y, i, p.x, xi);
  });
}

void tile_backward(const Call& call) {
  const Tensor dy = view(call.inputs[0], "output gradient 0");
  const Tensor x = view(call.inputs[1], "forward input 0");
  const TilePlan p = plan_tile(call, x);
  expect_output_shape(dy, p.out_shape);
  movement_backward(dy, x, grad_output(call, 0, x.shape), [&](std::span<const std::int64_t> i, std::vector<std::int64_t>& xi) {
    for (std::size_t k = 0; k < x.rank(); ++k) xi[k] = i[p.lead + k] % x.shape[k];
    return true;
  });
}

void arange(const Call& call) {
  // out[flat i] = start + i * step (the output's shape gives the length; row-major order).
  // F: computed in f64, rounded once. I: with i64 start and step, exact wrapping arithmetic;
  // with an f64 start or step, computed in f64 and converted (truncate, saturate).
  const Tensor y = view(call.outputs[0], "output 0");
  const dx_attr_t* start_attr = call.attr(0, "start");
  const dx_attr_t* step_attr = call.attr(1, "step");
  const bool exact = (start_attr == nullptr || start_attr->type == DX_ATTR_I64) &&
                     (step_attr == nullptr || step_attr->type == DX_ATTR_I64);
  const double start = attr_f64(call, 0, "start").value_or(0.0);
  const double step = attr_f64(call, 1, "step").value_or(1.0);
  const std::int64_t istart = exact && start_attr != nullptr ? start_attr->value.i64 : 0;
  const std::int64_t istep = exact && step_attr != nullptr ? step_attr->value.i64 : 1;
  std::int64_t lo = 0, hi = 0;
  int_range(y.dtype, lo, hi);
  std::int64_t flat = 0;
  for_each_index(y.shape, [&](std::span<const std::int64_t> i) {
    const std::int64_t n = flat++;
    if (is_float(y.dtype)) {
      store_float(y.dtype, y.at(i), start + static_cast<double>(n) * step);
    } else if (exact) {
      const std::uint64_t v = static_cast<std::uint64_t>(istart) + static_cast<std::uint64_t>(n) * static_cast<std::uint64_t>(istep);
      store_int_wrapping(y.dtype, y.at(i), static_cast<std::int64_t>(v));
    } else {
      store_int_wrapping(y.dtype, y.at(i), saturating_int(start + static_cast<double>(n) * step, lo, hi));
    }
  });
}

}  // namespace deepx::ref
