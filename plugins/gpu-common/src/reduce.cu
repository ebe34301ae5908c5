// Reductions (sum, mean, max, min, prod over `axes`, with `keepdims`; argmax, argmin over one
// `axis` or the flattened tensor) and softmax. Bodies in include/deepx/gpu/reduce.h and
// extra_ops.h; one block per output element or softmax row.
#include <string>
#include <vector>

#include "backward_fns.h"
#include "deepx/gpu/extra_ops.h"
#include "deepx/gpu/reduce.h"
#include "dispatch.h"
#include "launch.h"

namespace deepx::gpu {
namespace {

/// Output dtype of a reduction: F keeps its dtype; I sums to i64, means to f64.
DType reduce_out_type(ReduceOp op, DType in) {
  if (dtype_is_float(in)) return in;
  if (op == ReduceOp::Sum) return DType::I64;
  if (op == ReduceOp::Mean) return DType::F64;
  return in;
}

template <ReduceOp op>
dx_error_t* reduce_forward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    expect_arity(call, 1, 1);
    const View in = make_view(call->inputs[0], "input 0");
    const View out = make_view(call->outputs[0], "output 0");
    expect_dtype(out, reduce_out_type(op, in.dtype), "output 0");
    expect_one_device({&in, &out});
    const int rank = in.rank();
    const std::vector<bool> reduced = reduce_axes_attr(call, rank);
    const bool keepdims = attr_bool(call, DX_REDUCE_KEEPDIMS, "keepdims", false);
    std::vector<int64_t> expected, kept_shape, kept_in_strides, kept_out_strides;
    std::vector<int64_t> inner_shape, inner_strides;
    for (int d = 0; d < rank; ++d) {
      const auto u = static_cast<size_t>(d);
      if (reduced[u]) {
        if (keepdims) expected.push_back(1);
        inner_shape.push_back(in.shape[u]);
        inner_strides.push_back(in.strides[u]);
      } else {
        expected.push_back(in.shape[u]);
        kept_shape.push_back(in.shape[u]);
        kept_in_strides.push_back(in.strides[u]);
      }
    }
    if (expected != out.shape) {
      fail(DX_SHAPE_MISMATCH, std::string(DXG_BACKEND_NAME ": reduction: output shape ") +
                                  shape_string(out.shape) + ", expected " + shape_string(expected));
    }
    for (int d = 0, k = 0; d < rank; ++d) {
      if (!reduced[static_cast<size_t>(d)]) kept_out_strides.push_back(out.strides[static_cast<size_t>(keepdims ? d : k++)]);
    }
    int64_t inner_count = 1;
    for (int64_t e : inner_shape) inner_count *= e;
    const int64_t outputs = out.count();
    if ((op == ReduceOp::Max || op == ReduceOp::Min) && inner_count == 0 && outputs > 0) {
      fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": max/min of an empty set");
    }
    Exec exec(call, out.device);
    const Layout outer = make_layout(kept_shape, {OperandShape{kept_shape, kept_out_strides},
                                                  OperandShape{kept_shape, kept_in_strides}});
    const Layout inner = make_layout(inner_shape, {OperandShape{inner_shape, inner_strides}});
    auto run = [&](auto tag) {
      using T = tag_t<decltype(tag)>;
      ReduceFn<T> fn{outer, inner, in.data<T>(), out.base, out.dtype, op};
      launch_reduce_split(exec, fn, outputs, inner_count);
    };
    if (dtype_is_float(in.dtype)) dispatch_float(in.dtype, run);
    else dispatch_int(in.dtype, run);
    exec.finish();
  });
}

/// The reduction plan of prod and argmax/argmin: the output's expected shape checked, layouts
/// over the kept (outer: operand 0 = out, 1 = in) and reduced (inner: operand 0 = in) dims.
struct ReducePlan {
  Layout outer, inner;
};

ReducePlan plan_reduce(const View& in, const View& out, const std::vector<bool>& reduced, bool keepdims) {
  const int rank = in.rank();
  std::vector<int64_t> expected, kept_shape, kept_in, kept_out, inner_shape, inner_in;
  for (int d = 0, k = 0; d < rank; ++d) {
    const auto u = static_cast<size_t>(d);
    if (reduced[u]) {
      if (keepdims) {
        expected.push_back(1);
        ++k;
      }
      inner_shape.push_back(in.shape[u]);
      inner_in.push_back(in.strides[u]);
    } else {
      expected.push_back(in.shape[u]);
      kept_shape.push_back(in.shape[u]);
      kept_in.push_back(in.strides[u]);
      kept_out.push_back(static_cast<size_t>(k) < out.strides.size() ? out.strides[static_cast<size_t>(k)] : 0);
      ++k;
    }
  }
  if (expected != out.shape) {
    fail(DX_SHAPE_MISMATCH, std::string(DXG_BACKEND_NAME ": reduction: output shape ") + shape_string(out.shape) +
                                ", expected " + shape_string(expected));
  }
  ReducePlan p;
  p.outer = make_layout(kept_shape, {OperandShape{kept_shape, kept_out}, OperandShape{kept_shape, kept_in}});
  p.inner = make_layout(inner_shape, {OperandShape{inner_shape, inner_in}});
  return p;
}

dx_error_t* prod_forward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    expect_arity(call, 1, 1);
    const View in = make_view(call->inputs[0], "input 0");
    const View out = make_view(call->outputs[0], "output 0");
    expect_dtype(out, dtype_is_float(in.dtype) ? in.dtype : DType::I64, "output 0");
    expect_one_device({&in, &out});
    const ReducePlan p = plan_reduce(in, out, reduce_axes_attr(call, in.rank()),
                                     attr_bool(call, DX_REDUCE_KEEPDIMS, "keepdims", false));
    Exec exec(call, out.device);
    auto run = [&](auto tag) {
      using T = tag_t<decltype(tag)>;
      launch_reduce(exec, ProdFn<T>{p.outer, p.inner, in.data<T>(), out.base, out.dtype}, out.count());
    };
    if (dtype_is_float(in.dtype)) dispatch_float(in.dtype, run);
    else dispatch_int(in.dtype, run);
    exec.finish();
  });
}

template <int kSign>
dx_error_t* arg_forward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    expect_arity(call, 1, 1);
    const View in = make_view(call->inputs[0], "input 0");
    const View out = make_view(call->outputs[0], "output 0");
    expect_dtype(out, DType::I64, "output 0");
    expect_one_device({&in, &out});
    const int rank = in.rank();
    // One axis, or the flattened tensor when unset; rank 0 accepts axis 0 / -1 (PyTorch).
    std::vector<bool> reduced(static_cast<size_t>(rank), true);
    if (attr_at(call, DX_ARGREDUCE_AXIS) != nullptr) {
      const int64_t axis = attr_i64(call, DX_ARGREDUCE_AXIS, "axis", 0);
      const int64_t limit = rank == 0 ? 1 : rank;
      const int64_t normal = axis < 0 ? axis + limit : axis;
      if (normal < 0 || normal >= limit) {
        fail(DX_OUT_OF_RANGE, DXG_BACKEND_NAME ": argmax/argmin: axis " + std::to_string(axis) + " is out of range");
      }
      reduced.assign(static_cast<size_t>(rank), false);
      if (rank > 0) reduced[static_cast<size_t>(normal)] = true;
    }
    const ReducePlan p = plan_reduce(in, out, reduced, attr_bool(call, DX_ARGREDUCE_KEEPDIMS, "keepdims", false));
    if (p.inner.count == 0) fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": argmax/argmin over an empty set");
    Exec exec(call, out.device);
    auto run = [&](auto tag) {
      using T = tag_t<decltype(tag)>;
      launch_reduce(exec, ArgReduceFn<T>{p.outer, p.inner, in.data<T>(), out.data<int64_t>(), kSign}, out.count());
    };
    if (dtype_is_float(in.dtype)) dispatch_float(in.dtype, run);
    else dispatch_int(in.dtype, run);
    exec.finish();
  });
}

dx_error_t* softmax_forward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    expect_arity(call, 1, 1);
    const View in = make_view(call->inputs[0], "input 0");
    const View out = make_view(call->outputs[0], "output 0");
    expect_dtype(out, in.dtype, "output 0");
    expect_same_shape(out, in, "output 0");
    expect_one_device({&in, &out});
    const int rank = in.rank();
    const int64_t axis = softmax_axis(call, rank);
    int64_t length = 1, in_stride = 0, out_stride = 0;
    std::vector<int64_t> outer_shape, outer_in, outer_out;
    for (int d = 0; d < rank; ++d) {
      const auto u = static_cast<size_t>(d);
      if (d == axis) {
        length = in.shape[u];
        in_stride = in.strides[u];
        out_stride = out.strides[u];
      } else {
        outer_shape.push_back(in.shape[u]);
        outer_in.push_back(in.strides[u]);
        outer_out.push_back(out.strides[u]);
      }
    }
    Exec exec(call, out.device);
    const Layout outer = make_layout(outer_shape, {OperandShape{outer_shape, outer_out},
                                                   OperandShape{outer_shape, outer_in}});
    if (length > 0 && outer.count > 0) {
      dispatch_float(in.dtype, [&](auto tag) {
        using T = tag_t<decltype(tag)>;
        SoftmaxFn<T> fn{outer, length, in_stride, out_stride, in.data<T>(), out.data<T>()};
        launch_softmax(exec, fn, outer.count);
      });
    }
    exec.finish();
  });
}

// ---- backward --------------------------------------------------------------------------------

dx_error_t* softmax_backward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    const GradOperands operands = grad_operands(call);
    const View &dy = operands.dy, &x = operands.x;
    expect_same_shape(dy, x, "output gradient 0");
    const auto dx = grad_output(call, 0, x, "input gradient 0");
    if (!dx) return;
    const int rank = x.rank();
    const int64_t axis = softmax_axis(call, rank);
    int64_t length = 1, xs = 0, dys = 0, dxs = 0;
    std::vector<int64_t> outer_shape, o_dx, o_x, o_dy;
    for (int d = 0; d < rank; ++d) {
      const auto u = static_cast<size_t>(d);
      if (d == axis) {
        length = x.shape[u];
        xs = x.strides[u];
        dys = dy.strides[u];
        dxs = dx->strides[u];
      } else {
        outer_shape.push_back(x.shape[u]);
        o_dx.push_back(dx->strides[u]);
        o_x.push_back(x.strides[u]);
        o_dy.push_back(dy.strides[u]);
      }
    }
    Exec exec(call, dx->device);
    const Layout outer = make_layout(outer_shape, {OperandShape{outer_shape, o_dx}, OperandShape{outer_shape, o_x},
                                                   OperandShape{outer_shape, o_dy}});
    if (length > 0 && outer.count > 0) {
      dispatch_float(x.dtype, [&](auto tag) {
        using T = tag_t<decltype(tag)>;
        SoftmaxGradFn<T> fn{outer, length, xs, dys, dxs, x.data<T>(), dy.data<T>(), dx->data<T>()};
        launch_softmax_grad(exec, fn, outer.count);
      });
    }
    exec.finish();
  });
}

/// sum / mean: dx = dy broadcast back over the reduced axes (divided by their size for mean).
template <bool kMean>
dx_error_t* reduction_backward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    const GradOperands operands = grad_operands(call);
    const View &dy = operands.dy, &x = operands.x;
    const int rank = x.rank();
    const std::vector<bool> reduced = reduce_axes_attr(call, rank);
    const bool keepdims = attr_bool(call, DX_REDUCE_KEEPDIMS, "keepdims", false);
    std::vector<int64_t> expected, strides(static_cast<size_t>(rank), 0);
    int64_t count = 1;
    for (int d = 0, k = 0; d < rank; ++d) {
      const auto u = static_cast<size_t>(d);
      if (reduced[u]) {
        count *= x.shape[u];
        if (keepdims) {
          expected.push_back(1);
          ++k;
        }
      } else {
        expected.push_back(x.shape[u]);
        strides[u] = dy.strides[static_cast<size_t>(k++)];
      }
    }
    if (expected != dy.shape) fail(DX_SHAPE_MISMATCH, DXG_BACKEND_NAME ": reduction backward: wrong gradient shape");
    const auto dx = grad_output(call, 0, x, "input gradient 0");
    if (!dx) return;
    Exec exec(call, dx->device);
    scaled_copy(exec, *dx, strides, dy, kMean ? 1.0 / static_cast<double>(count) : 1.0);
    exec.finish();
  });
}

/// max (+1), min (-1): the first extreme element per group (block tree), then one thread per
/// element; prod (0): one thread per reduced group (ProdGradFn).
template <int kSign>
dx_error_t* extreme_or_prod_backward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    const GradOperands operands = grad_operands(call);
    const View &dy = operands.dy, &x = operands.x;
    const View y = make_view(call->inputs[2], "forward output 0");
    expect_same_shape(y, dy, "forward output 0");
    const int rank = x.rank();
    const std::vector<bool> reduced = reduce_axes_attr(call, rank);
    const bool keepdims = attr_bool(call, DX_REDUCE_KEEPDIMS, "keepdims", false);
    std::vector<int64_t> expected;
    for (int d = 0; d < rank; ++d) {
      const auto u = static_cast<size_t>(d);
      if (!reduced[u]) expected.push_back(x.shape[u]);
      else if (keepdims) expected.push_back(1);
    }
    if (expected != dy.shape) fail(DX_SHAPE_MISMATCH, DXG_BACKEND_NAME ": reduction backward: wrong gradient shape");
    const auto dx = grad_output(call, 0, x, "input gradient 0");
    if (!dx) return;
    std::vector<int64_t> outer_shape, o_dy, o_x, o_dx, inner_shape, i_x, i_dx;
    for (int d = 0, k = 0; d < rank; ++d) {
      const auto u = static_cast<size_t>(d);
      if (reduced[u]) {
        inner_shape.push_back(x.shape[u]);
        i_x.push_back(x.strides[u]);
        i_dx.push_back(dx->strides[u]);
        if (keepdims) ++k;
      } else {
        outer_shape.push_back(x.shape[u]);
        o_dy.push_back(dy.strides[static_cast<size_t>(k++)]);
        o_x.push_back(x.strides[u]);
        o_dx.push_back(dx->strides[u]);
      }
    }
    Exec exec(call, dx->device);
    const Layout outer = make_layout(outer_shape, {OperandShape{outer_shape, o_dy}, OperandShape{outer_shape, o_x},
                                                   OperandShape{outer_shape, o_dx}});
    const Layout inner = make_layout(inner_shape, {OperandShape{inner_shape, i_x}, OperandShape{inner_shape, i_dx}});
    if (outer.count > 0 && inner.count > 0 && kSign != 0) {
      // The first extreme element of each group (argmax/argmin's block tree, whose answer is
      // the reference's serial one), then every dx element in parallel.
      Exec::Scratch best(exec, static_cast<uint64_t>(outer.count) * 8);
      const Layout arg_outer = make_layout(outer_shape, {OperandShape{outer_shape, compact_strides(outer_shape)},
                                                         OperandShape{outer_shape, o_x}});
      const Layout arg_inner = make_layout(inner_shape, {OperandShape{inner_shape, i_x}});
      dispatch_float(x.dtype, [&](auto tag) {
        using T = tag_t<decltype(tag)>;
        launch_reduce(exec, ArgReduceFn<T>{arg_outer, arg_inner, x.data<T>(), static_cast<int64_t*>(best.get()), kSign},
                      outer.count);
        launch_for_each(exec, ExtremeGradFn<T>{outer, inner, dy.data<T>(), dx->data<T>(),
                                               static_cast<const int64_t*>(best.get())},
                        outer.count * inner.count);
      });
      exec.finish();
      return;
    }
    if (outer.count > 0 && inner.count > 0) {
      Exec::Scratch scratch(exec, static_cast<uint64_t>(outer.count * inner.count) * 8);
      dispatch_float(x.dtype, [&](auto tag) {
        using T = tag_t<decltype(tag)>;
        launch_for_each(exec, ProdGradFn<T>{outer, inner, dy.data<T>(), x.data<T>(), dx->data<T>(),
                                            static_cast<double*>(scratch.get())}, outer.count);
      });
      exec.finish();
      return;
    }
    exec.finish();
  });
}

}  // namespace

void register_reduction_kernels(Registrar& r) {
  const std::pair<const char*, dx_kernel_fn> ops[] = {
      {"dx.sum", &reduce_forward<ReduceOp::Sum>},
      {"dx.mean", &reduce_forward<ReduceOp::Mean>},
      {"dx.max", &reduce_forward<ReduceOp::Max>},
      {"dx.min", &reduce_forward<ReduceOp::Min>},
  };
  const ReduceOp codes[] = {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min};
  const dx_kernel_fn backward[] = {&reduction_backward<false>, &reduction_backward<true>, &extreme_or_prod_backward<1>,
                                   &extreme_or_prod_backward<-1>};
  for (int i = 0; i < 4; ++i) {
    for (DType d : float_types()) r.add(ops[i].first, 1, 1, {d, d}, ops[i].second, kDeterministic, backward[i]);
    for (DType d : int_types()) {
      r.add(ops[i].first, 1, 1, {d, reduce_out_type(codes[i], d)}, ops[i].second, kDeterministic);
    }
  }
  for (DType d : float_types()) {
    r.add("dx.prod", 1, 1, {d, d}, &prod_forward, kDeterministic, &extreme_or_prod_backward<0>);
    r.add("dx.argmax", 1, 1, {d, DType::I64}, &arg_forward<1>, kDeterministic);
    r.add("dx.argmin", 1, 1, {d, DType::I64}, &arg_forward<-1>, kDeterministic);
  }
  for (DType d : int_types()) {
    r.add("dx.prod", 1, 1, {d, DType::I64}, &prod_forward, kDeterministic);
    r.add("dx.argmax", 1, 1, {d, DType::I64}, &arg_forward<1>, kDeterministic);
    r.add("dx.argmin", 1, 1, {d, DType::I64}, &arg_forward<-1>, kDeterministic);
  }
  for (DType d : float_types()) {
    r.add("dx.softmax", 1, 1, {d, d}, &softmax_forward, kDeterministic, &softmax_backward);
  }
}

}  // namespace deepx::gpu
