// Shape ops: reshape, broadcast_to, concat (variadic), split (1..8 outputs), slice, pad, tile,
// and their gradients. Forward kernels move element bytes unchanged (bit-exact for every
// dtype); most are strided copies between sub-views, so they need no kernel of their own.
// Gradients (F) go through f64 and round once; where several output elements feed one input
// element (broadcast_to, tile) they are summed in the reference's order (reduce_gradient).
#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "backward_fns.h"
#include "deepx/gpu/elementwise.h"
#include "deepx/gpu/movement.h"
#include "dispatch.h"
#include "launch.h"
#include "shape_helpers.h"

namespace deepx::gpu {

View sub_view(const View& v, int64_t offset, std::vector<int64_t> shape, std::vector<int64_t> strides) {
  View s = v;
  s.base = v.base + offset * dtype_size(v.dtype);
  s.shape = std::move(shape);
  s.strides = std::move(strides);
  return s;
}

void move_view(Exec& exec, const View& dst, const View& src, bool convert) {
  const Layout l = make_layout(dst.shape, {dst.operand(), src.operand()});
  if (l.count <= 0) return;
  if (!convert && dst.base == src.base && dst.strides == src.strides && dst.dtype == src.dtype &&
      dst.shape == src.shape) {
    return;  // in place: already there
  }
  if (!convert && l.rank == 1 && l.strides[0][0] == 1 && l.strides[1][0] == 1) {
    check(gpuMemcpyAsync(dst.base, src.base, static_cast<size_t>(l.count) * dtype_size(dst.dtype),
                         gpuMemcpyDeviceToDevice, exec.stream()),
          "copy");
    return;
  }
  launch_for_each(exec, StridedMoveFn{l, dst.base, src.base, dst.dtype, src.dtype, convert}, l.count);
}

void fill_view(Exec& exec, const View& v, uint64_t bits) {
  const Layout l = make_layout(v.shape, {v.operand()});
  if (l.count <= 0) return;
  dispatch_size(v.dtype, [&](auto tag) {
    using W = tag_t<decltype(tag)>;
    W value;
    std::memcpy(&value, &bits, sizeof value);
    launch_for_each(exec, FillFn<W>{l, v.data<W>(), value}, l.count);
  });
}

int64_t normal_axis(const dx_kernel_call_t* call, int slot, int rank, const char* op) {
  const int64_t axis = attr_i64(call, slot, "axis", 0);
  const int64_t normal = axis < 0 ? axis + rank : axis;
  if (normal < 0 || normal >= rank) {
    fail(DX_OUT_OF_RANGE, std::string(DXG_BACKEND_NAME ": ") + op + ": axis " + std::to_string(axis) +
                              " is out of range for rank " + std::to_string(rank));
  }
  return normal;
}

namespace {

std::vector<int64_t> i64_list(const dx_kernel_call_t* call, int slot, const char* op, const char* name) {
  const dx_attr_t* a = attr_at(call, slot);
  if (a == nullptr) return {};
  if (a->type != DX_ATTR_I64_ARRAY) {
    fail(DX_INVALID_ARGUMENT, std::string(DXG_BACKEND_NAME ": ") + op + ": " + name + " must be an i64 array");
  }
  return std::vector<int64_t>(a->value.i64s, a->value.i64s + a->count);
}

// ---- reshape -----------------------------------------------------------------------------------

void remap(Exec& exec, const View& dst, const View& src, bool convert) {
  const int64_t count = dst.count();
  if (count <= 0) return;
  const Layout dl = make_layout(dst.shape, {dst.operand()});
  const Layout sl = make_layout(src.shape, {src.operand()});
  if (!convert && dl.rank == 1 && sl.rank == 1 && dl.strides[0][0] == 1 && sl.strides[0][0] == 1) {
    if (dst.base != src.base) {
      check(gpuMemcpyAsync(dst.base, src.base, static_cast<size_t>(count) * dtype_size(dst.dtype),
                           gpuMemcpyDeviceToDevice, exec.stream()),
            "reshape");
    }
    return;
  }
  launch_for_each(exec, RemapFn{dl, sl, dst.base, src.base, dst.dtype, src.dtype, convert}, count);
}

dx_error_t* reshape_forward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    expect_arity(call, 1, 1);
    const View in = make_view(call->inputs[0], "input 0");
    const View out = make_view(call->outputs[0], "output 0");
    expect_dtype(out, in.dtype, "output 0");
    expect_one_device({&in, &out});
    if (in.count() != out.count()) {
      fail(DX_SHAPE_MISMATCH, std::string(DXG_BACKEND_NAME ": reshape: ") + shape_string(in.shape) + " and " +
                                  shape_string(out.shape) + " differ in size");
    }
    Exec exec(call, out.device);
    remap(exec, out, in, false);
    exec.finish();
  });
}

dx_error_t* reshape_backward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    const GradOperands operands = grad_operands(call);
    const View &dy = operands.dy, &x = operands.x;
    if (dy.count() != x.count()) fail(DX_SHAPE_MISMATCH, DXG_BACKEND_NAME ": reshape backward: sizes differ");
    const auto dx = grad_output(call, 0, x, "input gradient 0");
    if (!dx) return;
    Exec exec(call, dx->device);
    remap(exec, *dx, dy, true);
    exec.finish();
  });
}

// ---- broadcast_to ------------------------------------------------------------------------------

void check_broadcast(const View& x, const std::vector<int64_t>& shape) {
  const auto b = broadcast_shapes({x.shape, shape});
  if (shape.size() < x.shape.size() || !b || *b != shape) {
    fail(DX_SHAPE_MISMATCH, std::string(DXG_BACKEND_NAME ": broadcast_to: ") + shape_string(x.shape) +
                                " does not broadcast to " + shape_string(shape));
  }
}

dx_error_t* broadcast_to_forward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    expect_arity(call, 1, 1);
    const View in = make_view(call->inputs[0], "input 0");
    const View out = make_view(call->outputs[0], "output 0");
    expect_dtype(out, in.dtype, "output 0");
    expect_one_device({&in, &out});
    if (attr_at(call, 0) != nullptr) expect_shape(out, i64_list(call, 0, "broadcast_to", "shape"), "broadcast_to");
    check_broadcast(in, out.shape);
    Exec exec(call, out.device);
    move_view(exec, out, in, false);
    exec.finish();
  });
}

dx_error_t* broadcast_to_backward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    const GradOperands operands = grad_operands(call);
    const View &dy = operands.dy, &x = operands.x;
    check_broadcast(x, dy.shape);
    const auto dx = grad_output(call, 0, x, "input gradient 0");
    if (!dx) return;
    Exec exec(call, dx->device);
    const int64_t count = dy.count();
    Exec::Scratch buffer(exec, static_cast<uint64_t>(count > 0 ? count : 1) * 8);  // never null
    View b = dy;
    b.base = static_cast<char*>(buffer.get());
    b.dtype = DType::F64;
    b.strides = compact_strides(dy.shape);
    move_view(exec, b, dy, true);
    reduce_gradient(exec, static_cast<const double*>(buffer.get()), dy.shape, *dx);
    exec.finish();
  });
}

// ---- concat, split -----------------------------------------------------------------------------

dx_error_t* concat_forward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    if (call->num_inputs < 1 || call->num_outputs != 1) {
      fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": concat takes one or more inputs and one output");
    }
    const View out = make_view(call->outputs[0], "output 0");
    std::vector<View> xs;
    for (int i = 0; i < call->num_inputs; ++i) {
      xs.push_back(make_view(call->inputs[i], "input"));
      expect_dtype(xs.back(), out.dtype, "input");
      if (xs.back().device != out.device) fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": concat: inputs on different devices");
    }
    const View& first = xs.front();
    const int64_t axis = normal_axis(call, 0, first.rank(), "concat");
    std::vector<int64_t> expected = first.shape;
    expected[static_cast<size_t>(axis)] = 0;
    for (const View& x : xs) {
      for (int d = 0; d < first.rank(); ++d) {
        if (x.rank() != first.rank() || (d != axis && x.shape[static_cast<size_t>(d)] != first.shape[static_cast<size_t>(d)])) {
          fail(DX_SHAPE_MISMATCH, std::string(DXG_BACKEND_NAME ": concat: input ") + shape_string(x.shape) +
                                      " does not match " + shape_string(first.shape) + " off the axis");
        }
      }
      expected[static_cast<size_t>(axis)] += x.shape[static_cast<size_t>(axis)];
    }
    expect_shape(out, expected, "concat");
    Exec exec(call, out.device);
    int64_t base = 0;
    for (const View& x : xs) {
      move_view(exec, sub_view(out, base * out.strides[static_cast<size_t>(axis)], x.shape, out.strides), x, false);
      base += x.shape[static_cast<size_t>(axis)];
    }
    exec.finish();
  });
}

dx_error_t* concat_backward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    const int n = call->num_inputs - 2;
    if (n < 1 || call->num_outputs != n) {
      fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": concat backward takes dy, the n inputs and y, and n gradients");
    }
    const View dy = make_view(call->inputs[0], "output gradient 0");
    const View first = make_view(call->inputs[1], "forward input 0");
    const int64_t axis = normal_axis(call, 0, first.rank(), "concat");
    const auto ax = static_cast<size_t>(axis);
    std::vector<View> xs;
    int64_t total = 0;
    for (int i = 0; i < n; ++i) {
      xs.push_back(make_view(call->inputs[1 + i], "forward input"));
      const View& x = xs.back();
      expect_dtype(x, dy.dtype, "forward input");
      if (x.rank() != dy.rank()) fail(DX_SHAPE_MISMATCH, DXG_BACKEND_NAME ": concat backward: rank mismatch");
      for (int d = 0; d < x.rank(); ++d) {
        if (d != axis && x.shape[static_cast<size_t>(d)] > dy.shape[static_cast<size_t>(d)]) {
          fail(DX_SHAPE_MISMATCH, DXG_BACKEND_NAME ": concat backward: gradient shape disagrees with the inputs");
        }
      }
      total += x.shape[ax];
    }
    if (total != dy.shape[ax]) fail(DX_SHAPE_MISMATCH, DXG_BACKEND_NAME ": concat backward: gradient shape disagrees with the inputs");
    Exec exec(call, dy.device);
    int64_t base = 0;
    for (int i = 0; i < n; ++i) {
      const View& x = xs[static_cast<size_t>(i)];
      if (const auto dx = grad_output(call, i, x, "input gradient")) {
        move_view(exec, *dx, sub_view(dy, base * dy.strides[ax], x.shape, dy.strides), true);
      }
      base += x.shape[ax];
    }
    exec.finish();
  });
}

/// The part sizes of split along `axis` (attr `sizes`, unset = equal parts), validated.
std::vector<int64_t> split_sizes(const dx_kernel_call_t* call, const View& x, int64_t axis, int n) {
  std::vector<int64_t> sizes = i64_list(call, 1, "split", "sizes");
  const int64_t extent = x.shape[static_cast<size_t>(axis)];
  if (sizes.empty()) {
    if (extent % n != 0) {
      fail(DX_SHAPE_MISMATCH, std::string(DXG_BACKEND_NAME ": split: axis of size ") + std::to_string(extent) +
                                  " does not split into " + std::to_string(n) + " equal parts");
    }
    sizes.assign(static_cast<size_t>(n), extent / n);
  }
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0) fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": split: negative size");
    total += s;
  }
  if (sizes.size() != static_cast<size_t>(n) || total != extent) {
    fail(DX_SHAPE_MISMATCH, DXG_BACKEND_NAME ": split: sizes do not split the axis into the outputs");
  }
  return sizes;
}

dx_error_t* split_forward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    if (call->num_inputs != 1 || call->num_outputs < 1) fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": split takes one input");
    const View x = make_view(call->inputs[0], "input 0");
    const int n = call->num_outputs;
    const int64_t axis = normal_axis(call, 0, x.rank(), "split");
    const auto ax = static_cast<size_t>(axis);
    const std::vector<int64_t> sizes = split_sizes(call, x, axis, n);
    std::vector<View> ys;
    for (int o = 0; o < n; ++o) {
      ys.push_back(make_view(call->outputs[o], "output"));
      expect_dtype(ys.back(), x.dtype, "output");
      if (ys.back().device != x.device) fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": split: outputs on different devices");
      std::vector<int64_t> expected = x.shape;
      expected[ax] = sizes[static_cast<size_t>(o)];
      expect_shape(ys.back(), expected, "split");
    }
    Exec exec(call, x.device);
    int64_t base = 0;
    for (int o = 0; o < n; ++o) {
      const View& y = ys[static_cast<size_t>(o)];
      move_view(exec, y, sub_view(x, base * x.strides[ax], y.shape, x.strides), false);
      base += sizes[static_cast<size_t>(o)];
    }
    exec.finish();
  });
}

dx_error_t* split_backward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    const int m = (call->num_inputs - 1) / 2;
    if (m < 1 || call->num_inputs != 2 * m + 1 || call->num_outputs != 1) {
      fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": split backward takes the m output gradients, x and the m outputs");
    }
    const View x = make_view(call->inputs[m], "forward input 0");
    const int64_t axis = normal_axis(call, 0, x.rank(), "split");
    const auto ax = static_cast<size_t>(axis);
    std::vector<View> dys;
    int64_t total = 0;
    for (int o = 0; o < m; ++o) {
      dys.push_back(make_view(call->inputs[o], "output gradient"));
      const View& dy = dys.back();
      expect_dtype(dy, x.dtype, "output gradient");
      if (dy.rank() != x.rank()) fail(DX_SHAPE_MISMATCH, DXG_BACKEND_NAME ": split backward: rank mismatch");
      for (int d = 0; d < x.rank(); ++d) {
        if (d != axis && dy.shape[static_cast<size_t>(d)] != x.shape[static_cast<size_t>(d)]) {
          fail(DX_SHAPE_MISMATCH, DXG_BACKEND_NAME ": split backward: gradient shape disagrees with the input");
        }
      }
      total += dy.shape[ax];
    }
    if (total != x.shape[ax]) fail(DX_SHAPE_MISMATCH, DXG_BACKEND_NAME ": split backward: gradients do not cover the input");
    const auto dx = grad_output(call, 0, x, "input gradient 0");
    if (!dx) return;
    Exec exec(call, dx->device);
    int64_t base = 0;
    for (const View& dy : dys) {
      move_view(exec, sub_view(*dx, base * dx->strides[ax], dy.shape, dx->strides), dy, true);
      base += dy.shape[ax];
    }
    exec.finish();
  });
}

// ---- slice, pad, tile --------------------------------------------------------------------------

struct SlicePlan {
  std::vector<int64_t> start, step, shape;
};

SlicePlan plan_slice(const dx_kernel_call_t* call, const View& x) {
  const auto r = static_cast<size_t>(x.rank());
  const auto starts = i64_list(call, 0, "slice", "starts");
  const auto stops = i64_list(call, 1, "slice", "stops");
  const auto steps = i64_list(call, 2, "slice", "steps");
  if (starts.size() > r || stops.size() > r || steps.size() > r) {
    fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": slice: more starts/stops/steps than axes");
  }
  SlicePlan p;
  for (size_t k = 0; k < r; ++k) {
    const int64_t n = x.shape[k];
    const int64_t step = k < steps.size() ? steps[k] : 1;
    if (step <= 0) fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": slice: steps must be positive");
    auto clamp_bound = [n](int64_t v) {
      if (v < 0) v += n;
      return v < 0 ? 0 : (v > n ? n : v);
    };
    const int64_t start = k < starts.size() ? clamp_bound(starts[k]) : 0;
    const int64_t stop = k < stops.size() ? clamp_bound(stops[k]) : n;
    p.start.push_back(start);
    p.step.push_back(step);
    p.shape.push_back(stop > start ? (stop - start + step - 1) / step : 0);
  }
  return p;
}

/// The sliced region of `v` (x's layout) as a view.
View slice_region(const View& v, const SlicePlan& p) {
  int64_t offset = 0;
  std::vector<int64_t> strides(v.strides.size());
  for (size_t k = 0; k < v.strides.size(); ++k) {
    if (p.shape[k] > 0) offset += p.start[k] * v.strides[k];
    strides[k] = v.strides[k] * p.step[k];
  }
  return sub_view(v, offset, p.shape, strides);
}

/// The prologue of a one-input, one-output forward (slice, pad, tile): input 0 and output 0,
/// the output of the input's dtype, both on one device.
struct UnaryOperands {
  View x, y;
};
UnaryOperands unary_operands(const dx_kernel_call_t* call) {
  expect_arity(call, 1, 1);
  UnaryOperands o{make_view(call->inputs[0], "input 0"), make_view(call->outputs[0], "output 0")};
  expect_dtype(o.y, o.x.dtype, "output 0");
  expect_one_device({&o.x, &o.y});
  return o;
}

dx_error_t* slice_forward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    const UnaryOperands operands = unary_operands(call);
    const View &x = operands.x, &y = operands.y;
    const SlicePlan p = plan_slice(call, x);
    expect_shape(y, p.shape, "slice");
    Exec exec(call, y.device);
    if (y.count() > 0) move_view(exec, y, slice_region(x, p), false);
    exec.finish();
  });
}

dx_error_t* slice_backward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    const GradOperands operands = grad_operands(call);
    const View &dy = operands.dy, &x = operands.x;
    const SlicePlan p = plan_slice(call, x);
    expect_shape(dy, p.shape, "slice backward");
    const auto dx = grad_output(call, 0, x, "input gradient 0");
    if (!dx) return;
    Exec exec(call, dx->device);
    fill_view(exec, *dx, 0);
    if (dy.count() > 0) move_view(exec, slice_region(*dx, p), dy, true);
    exec.finish();
  });
}

std::vector<int64_t> pad_before(const dx_kernel_call_t* call, const View& x, std::vector<int64_t>& out_shape) {
  const auto pads = i64_list(call, 0, "pad", "pads");
  const auto r = static_cast<size_t>(x.rank());
  if (!pads.empty() && pads.size() != 2 * r) {
    fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": pad: pads needs 2 entries (before, after) per axis");
  }
  std::vector<int64_t> before;
  out_shape.clear();
  for (size_t k = 0; k < r; ++k) {
    const int64_t b = pads.empty() ? 0 : pads[2 * k], a = pads.empty() ? 0 : pads[2 * k + 1];
    if (b < 0 || a < 0) fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": pad: pads must be non-negative");
    before.push_back(b);
    out_shape.push_back(x.shape[k] + b + a);
  }
  return before;
}

/// The region of `padded` (the output's layout) that holds x.
View pad_interior(const View& padded, const std::vector<int64_t>& before, const std::vector<int64_t>& x_shape) {
  int64_t offset = 0;
  bool empty = false;
  for (int64_t e : x_shape) empty |= e == 0;
  for (size_t k = 0; k < before.size() && !empty; ++k) offset += before[k] * padded.strides[k];
  return sub_view(padded, offset, x_shape, padded.strides);
}

dx_error_t* pad_forward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    const UnaryOperands operands = unary_operands(call);
    const View &x = operands.x, &y = operands.y;
    std::vector<int64_t> out_shape;
    const std::vector<int64_t> before = pad_before(call, x, out_shape);
    expect_shape(y, out_shape, "pad");
    const uint64_t bits = encode_value_attr(call, 1, y.dtype, "pad");
    Exec exec(call, y.device);
    fill_view(exec, y, bits);
    move_view(exec, pad_interior(y, before, x.shape), x, false);
    exec.finish();
  });
}

dx_error_t* pad_backward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    const GradOperands operands = grad_operands(call);
    const View &dy = operands.dy, &x = operands.x;
    std::vector<int64_t> out_shape;
    const std::vector<int64_t> before = pad_before(call, x, out_shape);
    expect_shape(dy, out_shape, "pad backward");
    const auto dx = grad_output(call, 0, x, "input gradient 0");
    if (!dx) return;
    Exec exec(call, dx->device);
    move_view(exec, *dx, pad_interior(dy, before, x.shape), true);
    exec.finish();
  });
}

/// tile as a copy over 2r dims (repeat_k, x_k): output strides (x_k * s_k, s_k), input
/// strides (0, s_k), with x viewed with leading 1-dims to the output's rank.
struct TilePlan {
  std::vector<int64_t> out_shape, shape2, x_shape, x_strides;  // x padded to the output rank
};

TilePlan plan_tile(const dx_kernel_call_t* call, const View& x) {
  std::vector<int64_t> reps = i64_list(call, 0, "tile", "repeats");
  for (int64_t v : reps) {
    if (v < 0) fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": tile: repeats must be non-negative");
  }
  const size_t r = std::max(reps.size(), static_cast<size_t>(x.rank()));
  reps.insert(reps.begin(), r - reps.size(), 1);
  TilePlan p;
  p.x_shape = x.shape;
  p.x_strides = x.strides;
  const size_t lead = r - x.shape.size();
  p.x_shape.insert(p.x_shape.begin(), lead, 1);
  p.x_strides.insert(p.x_strides.begin(), lead, 0);
  for (size_t k = 0; k < r; ++k) {
    p.out_shape.push_back(p.x_shape[k] * reps[k]);
    p.shape2.push_back(reps[k]);
    p.shape2.push_back(p.x_shape[k]);
  }
  return p;
}

/// Strides of a tensor of the tiled shape (output or its gradient) over the 2r dims.
std::vector<int64_t> tiled_strides2(const TilePlan& p, const std::vector<int64_t>& strides) {
  std::vector<int64_t> s;
  for (size_t k = 0; k < strides.size(); ++k) {
    s.push_back(p.x_shape[k] * strides[k]);
    s.push_back(strides[k]);
  }
  return s;
}

std::vector<int64_t> input_strides2(const TilePlan& p) {
  std::vector<int64_t> s;
  for (int64_t st : p.x_strides) {
    s.push_back(0);
    s.push_back(st);
  }
  return s;
}

dx_error_t* tile_forward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    const UnaryOperands operands = unary_operands(call);
    const View &x = operands.x, &y = operands.y;
    const TilePlan p = plan_tile(call, x);
    expect_shape(y, p.out_shape, "tile");
    Exec exec(call, y.device);
    if (y.count() > 0) {
      const Layout l = make_layout(p.shape2, {OperandShape{p.shape2, tiled_strides2(p, y.strides)},
                                              OperandShape{p.shape2, input_strides2(p)}});
      launch_for_each(exec, StridedMoveFn{l, y.base, x.base, y.dtype, x.dtype, false}, l.count);
    }
    exec.finish();
  });
}

dx_error_t* tile_backward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    const GradOperands operands = grad_operands(call);
    const View &dy = operands.dy, &x = operands.x;
    const TilePlan p = plan_tile(call, x);
    expect_shape(dy, p.out_shape, "tile backward");
    const auto dx = grad_output(call, 0, x, "input gradient 0");
    if (!dx) return;
    Exec exec(call, dx->device);
    const int64_t count = dy.count();
    Exec::Scratch buffer(exec, static_cast<uint64_t>(count > 0 ? count : 1) * 8);  // never null
    if (count > 0) {
      const Layout l = make_layout(p.shape2, {OperandShape{p.shape2, compact_strides(p.shape2)},
                                              OperandShape{p.shape2, tiled_strides2(p, dy.strides)}});
      launch_for_each(exec, StridedMoveFn{l, static_cast<char*>(buffer.get()), dy.base, DType::F64, dy.dtype, true},
                      l.count);
    }
    // dx viewed over the 2r dims: extent 1 (stride 0) on the repeat dims.
    View g = *dx;
    g.shape.clear();
    g.strides.clear();
    const size_t lead = p.x_shape.size() - dx->shape.size();
    for (size_t k = 0; k < p.x_shape.size(); ++k) {
      g.shape.push_back(1);
      g.strides.push_back(0);
      g.shape.push_back(p.x_shape[k]);
      g.strides.push_back(k < lead ? 0 : dx->strides[k - lead]);
    }
    reduce_gradient(exec, static_cast<const double*>(buffer.get()), p.shape2, g);
    exec.finish();
  });
}

}  // namespace

void register_shape_kernels(Registrar& r) {
  for (DType d : all_types()) {
    const bool f = dtype_is_float(d);
    r.add("dx.reshape", 1, 1, {d, d}, &reshape_forward, kDeterministic, f ? &reshape_backward : nullptr);
    r.add("dx.broadcast_to", 1, 1, {d, d}, &broadcast_to_forward, kDeterministic, f ? &broadcast_to_backward : nullptr);
    r.add("dx.slice", 1, 1, {d, d}, &slice_forward, kDeterministic, f ? &slice_backward : nullptr);
    r.add("dx.pad", 1, 1, {d, d}, &pad_forward, kDeterministic, f ? &pad_backward : nullptr);
    r.add("dx.tile", 1, 1, {d, d}, &tile_forward, kDeterministic, f ? &tile_backward : nullptr);
    r.add("dx.concat", 1, 1, {d, d}, &concat_forward, kDeterministic | DX_KERNEL_FLAG_VARIADIC,
          f ? &concat_backward : nullptr);
    for (int n = 1; n <= 8; ++n) {
      std::vector<DType> sig(static_cast<size_t>(n) + 1, d);
      r.add("dx.split", 1, n, sig, &split_forward, kDeterministic, f ? &split_backward : nullptr);
    }
  }
}

}  // namespace deepx::gpu
