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
    int64_t axis = attr_i64(call, DX_SOFTMAX_AXIS, "axis", -1);
    const int effective_rank = rank == 0 ? 1 : rank;
    if (axis < 0) axis += effective_rank;
    if (axis < 0 || axis >= effective_rank) {
      fail(DX_OUT_OF_RANGE, DXG_BACKEND_NAME ": softmax: axis out of range");
    }
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

}  // namespace

void register_reduction_kernels(Registrar& r) {
  const std::pair<const char*, dx_kernel_fn> ops[] = {
      {"dx.sum", &reduce_forward<ReduceOp::Sum>},
      {"dx.mean", &reduce_forward<ReduceOp::Mean>},
      {"dx.max", &reduce_forward<ReduceOp::Max>},
      {"dx.min", &reduce_forward<ReduceOp::Min>},
  };
  const ReduceOp codes[] = {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min};
  const dx_kernel_fn backward[] = {sum_backward_fn(), mean_backward_fn(), max_backward_fn(), min_backward_fn()};
  for (int i = 0; i < 4; ++i) {
    for (DType d : float_types()) r.add(ops[i].first, 1, 1, {d, d}, ops[i].second, kDeterministic, backward[i]);
    for (DType d : int_types()) {
      r.add(ops[i].first, 1, 1, {d, reduce_out_type(codes[i], d)}, ops[i].second, kDeterministic);
    }
  }
  for (DType d : float_types()) {
    r.add("dx.prod", 1, 1, {d, d}, &prod_forward, kDeterministic, prod_backward_fn());
    r.add("dx.argmax", 1, 1, {d, DType::I64}, &arg_forward<1>, kDeterministic);
    r.add("dx.argmin", 1, 1, {d, DType::I64}, &arg_forward<-1>, kDeterministic);
  }
  for (DType d : int_types()) {
    r.add("dx.prod", 1, 1, {d, DType::I64}, &prod_forward, kDeterministic);
    r.add("dx.argmax", 1, 1, {d, DType::I64}, &arg_forward<1>, kDeterministic);
    r.add("dx.argmin", 1, 1, {d, DType::I64}, &arg_forward<-1>, kDeterministic);
  }
  for (DType d : float_types()) {
    r.add("dx.softmax", 1, 1, {d, d}, &softmax_forward, kDeterministic, softmax_backward_fn());
  }
}

}  // namespace deepx::gpu
