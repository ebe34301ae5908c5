// Indexing ops: index_select, gather, scatter_add, and their gradients. Indices are checked on
// the device before anything is written (out of range = DX_OUT_OF_RANGE, as the reference).
// Sums (scatter_add, the gradients of index_select and gather) run one thread per line along
// the axis into an f64 (I: u64) buffer, in the reference's order: deterministic, no atomics, F
// results rounded once.
#include <string>
#include <vector>

#include "backward_fns.h"
#include "deepx/gpu/movement.h"
#include "dispatch.h"
#include "launch.h"
#include "shape_helpers.h"

namespace deepx::gpu {
namespace {

/// An AxisSpace over `shape` split at `axis`, with one operand per entry of `strides` (each a
/// full-rank stride vector; its axis entry is not used).
AxisSpace make_axis_space(const std::vector<int64_t>& shape, int64_t axis,
                          const std::vector<std::vector<int64_t>>& strides) {
  const auto ax = static_cast<size_t>(axis);
  const std::vector<int64_t> outer_shape(shape.begin(), shape.begin() + static_cast<std::ptrdiff_t>(ax));
  const std::vector<int64_t> inner_shape(shape.begin() + static_cast<std::ptrdiff_t>(ax) + 1, shape.end());
  std::vector<OperandShape> outer, inner;
  for (const auto& s : strides) {
    outer.push_back(OperandShape{outer_shape, std::vector<int64_t>(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(ax))});
    inner.push_back(OperandShape{inner_shape, std::vector<int64_t>(s.begin() + static_cast<std::ptrdiff_t>(ax) + 1, s.end())});
  }
  AxisSpace space;
  space.outer = make_layout(outer_shape, outer);
  space.inner = make_layout(inner_shape, inner);
  space.extent = shape[ax];
  return space;
}

int64_t count_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t e : shape) n *= e;
  return n;
}

/// Fails with DX_OUT_OF_RANGE when an index lies outside [0, limit); runs before any write.
void check_indices(Exec& exec, const View& idx, int64_t limit, const char* op) {
  const Layout l = make_layout(idx.shape, {idx.operand()});
  if (l.count <= 0) return;
  Exec::Scratch flag(exec, sizeof(int));
  check(gpuMemsetAsync(flag.get(), 0, sizeof(int), exec.stream()), "memset");
  launch_for_each(exec, IndexRangeFn{l, idx.base, idx.dtype, limit, static_cast<int*>(flag.get())}, l.count);
  int found = 0;
  check(gpuMemcpyAsync(&found, flag.get(), sizeof(int), gpuMemcpyDeviceToHost, exec.stream()), "copy flag");
  exec.synchronize();
  if (found != 0) {
    fail(DX_OUT_OF_RANGE, std::string(DXG_BACKEND_NAME ": ") + op + ": an index is outside [0, " +
                              std::to_string(limit) + ")");
  }
}

/// torch.gather / scatter_add shape rule: same rank; idx.shape[d] <= x.shape[d] off the axis.
void check_gather_shapes(const View& x, const View& idx, int64_t axis, const char* op) {
  if (idx.rank() != x.rank()) fail(DX_SHAPE_MISMATCH, std::string(DXG_BACKEND_NAME ": ") + op + ": index rank differs from the input's");
  for (int d = 0; d < x.rank(); ++d) {
    if (d != axis && idx.shape[static_cast<size_t>(d)] > x.shape[static_cast<size_t>(d)]) {
      fail(DX_SHAPE_MISMATCH, std::string(DXG_BACKEND_NAME ": ") + op + ": index shape " + shape_string(idx.shape) +
                                  " exceeds input " + shape_string(x.shape));
    }
  }
}

/// dst(o, j, k) = src(o, idx(o, j, k), k) over `shape` split at `axis`. `idx_strides` are
/// full-rank (index_select: 0 off the axis); `idx_axis_stride` its stride along the axis.
void launch_axis_index(Exec& exec, const std::vector<int64_t>& shape, int64_t axis, const View& dst,
                       const View& idx, const std::vector<int64_t>& idx_strides, int64_t idx_axis_stride,
                       const View& src, bool convert) {
  if (count_of(shape) <= 0) return;
  const auto ax = static_cast<size_t>(axis);
  AxisIndexFn fn{};
  fn.space = make_axis_space(shape, axis, {dst.strides, idx_strides, src.strides});
  fn.dst = dst.base;
  fn.idx = idx.base;
  fn.src = src.base;
  fn.dst_axis_stride = dst.strides[ax];
  fn.idx_axis_stride = idx_axis_stride;
  fn.src_axis_stride = src.strides[ax];
  fn.dst_type = dst.dtype;
  fn.idx_type = idx.dtype;
  fn.src_type = src.dtype;
  fn.convert = convert;
  launch_for_each(exec, fn, count_of(shape));
}

/// dst(o, m, k) = base(o, m, k) (or 0) + sum over j < count with idx(o, j, k) == m of
/// src(o, j, k), over `region` split at `axis` (the three phases of movement.h's AxisSum*).
void launch_axis_sum(Exec& exec, const std::vector<int64_t>& region, int64_t axis, const View& dst,
                     const View& idx, const std::vector<int64_t>& idx_strides, int64_t idx_axis_stride,
                     const View& src, const View* base, int64_t count) {
  const int64_t elements = count_of(region);
  if (elements <= 0) return;
  const auto ax = static_cast<size_t>(axis);
  const AxisSpace space = make_axis_space(region, axis, {dst.strides, idx_strides, src.strides,
                                                         base != nullptr ? base->strides : dst.strides});
  Exec::Scratch buffer(exec, static_cast<uint64_t>(elements) * 8);
  AxisSumEndsFn ends{};
  ends.space = space;
  ends.dst = dst.base;
  ends.base = base != nullptr ? base->base : nullptr;
  ends.buffer = buffer.get();
  ends.dst_axis_stride = dst.strides[ax];
  ends.base_axis_stride = base != nullptr ? base->strides[ax] : 0;
  ends.dst_type = dst.dtype;
  ends.store = false;
  launch_for_each(exec, ends, elements);
  AxisSumLinesFn lines{};
  lines.space = space;
  lines.idx = idx.base;
  lines.src = src.base;
  lines.buffer = buffer.get();
  lines.idx_axis_stride = idx_axis_stride;
  lines.src_axis_stride = src.strides[ax];
  lines.count = count;
  lines.idx_type = idx.dtype;
  lines.src_type = src.dtype;
  lines.is_float = dtype_is_float(dst.dtype);
  launch_for_each(exec, lines, space.outer.count * space.inner.count);
  ends.store = true;
  launch_for_each(exec, ends, elements);
}

// ---- index_select ------------------------------------------------------------------------------

struct IndexSelectArgs {
  int64_t axis;
  std::vector<int64_t> out_shape, idx_strides;  // idx_strides: full rank, 0 everywhere
};

IndexSelectArgs index_select_args(const dx_kernel_call_t* call, const View& x, const View& idx) {
  IndexSelectArgs a;
  a.axis = normal_axis(call, 0, x.rank(), "index_select");
  if (idx.rank() != 1) fail(DX_SHAPE_MISMATCH, DXG_BACKEND_NAME ": index_select: indices must be 1-D");
  if (idx.dtype != DType::I32 && idx.dtype != DType::I64) {
    fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": index_select: indices must be i32 or i64");
  }
  a.out_shape = x.shape;
  a.out_shape[static_cast<size_t>(a.axis)] = idx.shape[0];
  a.idx_strides.assign(x.shape.size(), 0);
  return a;
}

dx_error_t* index_select_forward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    expect_arity(call, 2, 1);
    const View x = make_view(call->inputs[0], "input 0");
    const View idx = make_view(call->inputs[1], "input 1");
    const View y = make_view(call->outputs[0], "output 0");
    expect_dtype(y, x.dtype, "output 0");
    expect_one_device({&x, &idx, &y});
    const IndexSelectArgs a = index_select_args(call, x, idx);
    expect_shape(y, a.out_shape, "index_select");
    Exec exec(call, y.device);
    check_indices(exec, idx, x.shape[static_cast<size_t>(a.axis)], "index_select");
    launch_axis_index(exec, y.shape, a.axis, y, idx, a.idx_strides, idx.strides[0], x, false);
    exec.finish();
  });
}

dx_error_t* index_select_backward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    expect_arity(call, 4, 2);
    const View dy = make_view(call->inputs[0], "output gradient 0");
    const View x = make_view(call->inputs[1], "forward input 0");
    const View idx = make_view(call->inputs[2], "forward input 1");
    expect_dtype(dy, x.dtype, "output gradient 0");
    const IndexSelectArgs a = index_select_args(call, x, idx);
    expect_shape(dy, a.out_shape, "index_select backward");
    const auto dx = grad_output(call, 0, x, "input gradient 0");
    const auto didx = grad_output(call, 1, idx, "input gradient 1");
    Exec exec(call, dy.device);
    check_indices(exec, idx, x.shape[static_cast<size_t>(a.axis)], "index_select");
    if (dx) launch_axis_sum(exec, x.shape, a.axis, *dx, idx, a.idx_strides, idx.strides[0], dy, nullptr, idx.shape[0]);
    if (didx) fill_view(exec, *didx, 0);
    exec.finish();
  });
}

// ---- gather ------------------------------------------------------------------------------------

dx_error_t* gather_forward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    expect_arity(call, 2, 1);
    const View x = make_view(call->inputs[0], "input 0");
    const View idx = make_view(call->inputs[1], "input 1");
    const View y = make_view(call->outputs[0], "output 0");
    expect_dtype(idx, DType::I64, "input 1");
    expect_dtype(y, x.dtype, "output 0");
    expect_one_device({&x, &idx, &y});
    const int64_t axis = normal_axis(call, 0, x.rank(), "gather");
    check_gather_shapes(x, idx, axis, "gather");
    expect_shape(y, idx.shape, "gather");
    Exec exec(call, y.device);
    check_indices(exec, idx, x.shape[static_cast<size_t>(axis)], "gather");
    launch_axis_index(exec, idx.shape, axis, y, idx, idx.strides, idx.strides[static_cast<size_t>(axis)], x, false);
    exec.finish();
  });
}

dx_error_t* gather_backward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    expect_arity(call, 4, 2);
    const View dy = make_view(call->inputs[0], "output gradient 0");
    const View x = make_view(call->inputs[1], "forward input 0");
    const View idx = make_view(call->inputs[2], "forward input 1");
    expect_dtype(dy, x.dtype, "output gradient 0");
    expect_dtype(idx, DType::I64, "forward input 1");
    const int64_t axis = normal_axis(call, 0, x.rank(), "gather");
    const auto ax = static_cast<size_t>(axis);
    check_gather_shapes(x, idx, axis, "gather");
    expect_shape(dy, idx.shape, "gather backward");
    const auto dx = grad_output(call, 0, x, "input gradient 0");
    const auto didx = grad_output(call, 1, idx, "input gradient 1");
    Exec exec(call, dy.device);
    check_indices(exec, idx, x.shape[ax], "gather");
    if (dx) {
      fill_view(exec, *dx, 0);
      std::vector<int64_t> region = idx.shape;
      region[ax] = x.shape[ax];
      launch_axis_sum(exec, region, axis, *dx, idx, idx.strides, idx.strides[ax], dy, nullptr, idx.shape[ax]);
    }
    if (didx) fill_view(exec, *didx, 0);
    exec.finish();
  });
}

// ---- scatter_add -------------------------------------------------------------------------------

int64_t scatter_add_checks(const dx_kernel_call_t* call, const View& x, const View& idx, const View& src) {
  expect_dtype(idx, DType::I64, "index");
  expect_dtype(src, x.dtype, "src");
  const int64_t axis = normal_axis(call, 0, x.rank(), "scatter_add");
  check_gather_shapes(x, idx, axis, "scatter_add");
  if (src.rank() != idx.rank()) fail(DX_SHAPE_MISMATCH, DXG_BACKEND_NAME ": scatter_add: src rank differs from the index's");
  for (int d = 0; d < idx.rank(); ++d) {
    if (idx.shape[static_cast<size_t>(d)] > src.shape[static_cast<size_t>(d)]) {
      fail(DX_SHAPE_MISMATCH, DXG_BACKEND_NAME ": scatter_add: index shape exceeds src");
    }
  }
  return axis;
}

dx_error_t* scatter_add_forward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    expect_arity(call, 3, 1);
    const View x = make_view(call->inputs[0], "input 0");
    const View idx = make_view(call->inputs[1], "input 1");
    const View src = make_view(call->inputs[2], "input 2");
    const View y = make_view(call->outputs[0], "output 0");
    expect_dtype(y, x.dtype, "output 0");
    expect_one_device({&x, &idx, &src, &y});
    const int64_t axis = scatter_add_checks(call, x, idx, src);
    const auto ax = static_cast<size_t>(axis);
    expect_shape(y, x.shape, "scatter_add");
    Exec exec(call, y.device);
    check_indices(exec, idx, x.shape[ax], "scatter_add");
    move_view(exec, y, x, false);
    std::vector<int64_t> region = idx.shape;
    region[ax] = x.shape[ax];
    launch_axis_sum(exec, region, axis, y, idx, idx.strides, idx.strides[ax], src, &x, idx.shape[ax]);
    exec.finish();
  });
}

dx_error_t* scatter_add_backward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    expect_arity(call, 5, 3);
    const View dy = make_view(call->inputs[0], "output gradient 0");
    const View x = make_view(call->inputs[1], "forward input 0");
    const View idx = make_view(call->inputs[2], "forward input 1");
    const View src = make_view(call->inputs[3], "forward input 2");
    expect_dtype(dy, x.dtype, "output gradient 0");
    const int64_t axis = scatter_add_checks(call, x, idx, src);
    const auto ax = static_cast<size_t>(axis);
    expect_shape(dy, x.shape, "scatter_add backward");
    const auto dx = grad_output(call, 0, x, "input gradient 0");
    const auto didx = grad_output(call, 1, idx, "input gradient 1");
    const auto dsrc = grad_output(call, 2, src, "input gradient 2");
    Exec exec(call, dy.device);
    check_indices(exec, idx, x.shape[ax], "scatter_add");
    if (dx) move_view(exec, *dx, dy, true);
    if (didx) fill_view(exec, *didx, 0);
    if (dsrc) {
      fill_view(exec, *dsrc, 0);
      const View region = sub_view(*dsrc, 0, idx.shape, dsrc->strides);
      launch_axis_index(exec, idx.shape, axis, region, idx, idx.strides, idx.strides[ax], dy, true);
    }
    exec.finish();
  });
}

}  // namespace

void register_indexing_kernels(Registrar& r) {
  for (DType d : all_types()) {
    const bool f = dtype_is_float(d);
    for (DType index : {DType::I32, DType::I64}) {
      r.add("dx.index_select", 2, 1, {d, index, d}, &index_select_forward, kDeterministic,
            f ? &index_select_backward : nullptr);
    }
    r.add("dx.gather", 2, 1, {d, DType::I64, d}, &gather_forward, kDeterministic, f ? &gather_backward : nullptr);
    if (d != DType::Bool) {
      r.add("dx.scatter_add", 3, 1, {d, DType::I64, d, d}, &scatter_add_forward, kDeterministic,
            f ? &scatter_add_backward : nullptr);
    }
  }
}

}  // namespace deepx::gpu
