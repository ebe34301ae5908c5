// Backward kernels of the elementwise family (the `backward` slots of the F signatures): unary
// math, gelu, clamp, broadcasting binary arithmetic, where and cast (F -> F), and of copy and
// transpose, which are cast's converting copy; the reductions' and softmax's gradients are in
// reduce.cu, dropout's in random.cu, the shape and indexing gradients in movement_shape.cu and
// indexing.cu. Calling convention (plugin.h): inputs = the output gradients, the forward
// inputs, the forward outputs; outputs = the input gradients, a null entry meaning "not
// wanted". Attributes are the forward call's.
#include <string>
#include <vector>

#include "backward_fns.h"
#include "deepx/gpu/backward.h"
#include "deepx/gpu/extra_ops.h"
#include "dispatch.h"
#include "launch.h"

namespace deepx::gpu {
namespace {

/// Broadcast gradients are summed serially per element (bit-identical to the reference) when
/// each gathers at most this many contributions, or when there are this many elements to keep
/// the GPU busy; otherwise with the block tree (deterministic, but in another order).
constexpr int64_t kSerialSumLimit = 65536;
constexpr int64_t kSerialSumOutputs = 1024;

template <UnaryOp op>
dx_error_t* unary_backward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    const GradOperands operands = grad_operands(call);
    const View &dy = operands.dy, &x = operands.x;
    expect_same_shape(dy, x, "output gradient 0");
    const auto dx = grad_output(call, 0, x, "input gradient 0");
    if (!dx) return;
    expect_one_device({&dy, &x, &*dx});
    Exec exec(call, dx->device);
    const Layout l = make_layout(x.shape, {dx->operand(), dy.operand(), x.operand()});
    dispatch_float(x.dtype, [&](auto tag) {
      using T = tag_t<decltype(tag)>;
      launch_for_each(exec, UnaryGradFn<T>{l, dx->data<T>(), dy.data<T>(), x.data<T>(), op}, l.count);
    });
    exec.finish();
  });
}

}  // namespace

GradOperands grad_operands(const dx_kernel_call_t* call) {
  expect_arity(call, 3, 1);
  GradOperands g{make_view(call->inputs[0], "output gradient 0"), make_view(call->inputs[1], "forward input 0")};
  expect_dtype(g.dy, g.x.dtype, "output gradient 0");
  return g;
}

void scaled_copy(Exec& exec, const View& dx, const std::vector<int64_t>& dy_strides_in_dx_order, const View& dy,
                 double scale) {
  const Layout l = make_layout(dx.shape, {dx.operand(), OperandShape{dx.shape, dy_strides_in_dx_order}});
  const bool exact_alias = dx.base == dy.base && dx.strides == dy_strides_in_dx_order && dx.dtype == dy.dtype;
  if (dx.base == dy.base && !exact_alias && l.count > 0) {
    const uint64_t bytes = static_cast<uint64_t>(l.count) * 8;
    Exec::Scratch tmp(exec, bytes);
    const OperandShape compact{dx.shape, compact_strides(dx.shape)};
    launch_for_each(exec, ScaleFn{make_layout(dx.shape, {compact, OperandShape{dx.shape, dy_strides_in_dx_order}}),
                                  static_cast<char*>(tmp.get()), dy.base, DType::F64, dy.dtype, scale}, l.count);
    launch_for_each(exec, ScaleFn{make_layout(dx.shape, {dx.operand(), compact}), dx.base,
                                  static_cast<const char*>(tmp.get()), dx.dtype, DType::F64, 1.0}, l.count);
    return;
  }
  launch_for_each(exec, ScaleFn{l, dx.base, dy.base, dx.dtype, dy.dtype, scale}, l.count);
}

View output_gradient(const dx_kernel_call_t* call, DType dtype, const std::vector<int64_t>& shape) {
  View dy = make_view(call->inputs[0], "output gradient 0");
  expect_dtype(dy, dtype, "output gradient 0");
  expect_shape(dy, shape, "output gradient 0");
  return dy;
}

/// Sums a compact f64 buffer of `full` shape into `grad` (whose shape broadcasts to `full`),
/// rounding once to grad's dtype.
void reduce_gradient(Exec& exec, const double* buffer, const std::vector<int64_t>& full, const View& grad) {
  const size_t rank = full.size(), grank = grad.shape.size();
  const std::vector<int64_t> buffer_strides = compact_strides(full);
  std::vector<int64_t> kept_shape, kept_grad, kept_buffer, inner_shape, inner_buffer;
  for (size_t d = 0; d < rank; ++d) {
    const bool present = d >= rank - grank;
    const int64_t extent = present ? grad.shape[d - (rank - grank)] : 1;
    if (extent == full[d]) {
      kept_shape.push_back(full[d]);
      kept_grad.push_back(present ? grad.strides[d - (rank - grank)] : 0);
      kept_buffer.push_back(buffer_strides[d]);
    } else {
      inner_shape.push_back(full[d]);
      inner_buffer.push_back(buffer_strides[d]);
    }
  }
  if (inner_shape.empty()) {  // no broadcast: an elementwise rounding copy of the buffer
    const Layout l = make_layout(full, {grad.operand(), OperandShape{full, buffer_strides}});
    launch_for_each(exec, ScaleFn{l, grad.base, reinterpret_cast<const char*>(buffer), grad.dtype, DType::F64, 1.0},
                    l.count);
    return;
  }
  const Layout outer = make_layout(kept_shape, {OperandShape{kept_shape, kept_grad}, OperandShape{kept_shape, kept_buffer}});
  const Layout inner = make_layout(inner_shape, {OperandShape{inner_shape, inner_buffer}});
  // Serial sums in the reference's order (bit-identical) unless a few gradient elements each
  // gather very many contributions, where the block tree reduction is far faster.
  if (inner.count <= kSerialSumLimit || outer.count >= kSerialSumOutputs) {
    launch_for_each(exec, SerialSumFn{outer, inner, buffer, grad.base, grad.dtype}, outer.count);
    return;
  }
  ReduceFn<double> fn{};
  fn.outer = outer;
  fn.inner = inner;
  fn.in = buffer;
  fn.out = grad.base;
  fn.out_type = grad.dtype;
  fn.op = ReduceOp::Sum;
  launch_reduce(exec, fn, fn.outer.count);
}

namespace {

template <BinaryOp op>
dx_error_t* binary_backward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    expect_arity(call, 4, 2);
    const View dy = make_view(call->inputs[0], "output gradient 0");
    const View a = make_view(call->inputs[1], "forward input 0");
    const View b = make_view(call->inputs[2], "forward input 1");
    expect_dtype(dy, a.dtype, "output gradient 0");
    expect_dtype(b, a.dtype, "forward input 1");
    const auto shape = broadcast_shapes({a.shape, b.shape});
    if (!shape || *shape != dy.shape) {
      fail(DX_SHAPE_MISMATCH, DXG_BACKEND_NAME ": backward: the output gradient does not have the broadcast shape");
    }
    const auto da = grad_output(call, 0, a, "input gradient 0");
    const auto db = grad_output(call, 1, b, "input gradient 1");
    if (!da && !db) return;
    Exec exec(call, dy.device);
    int64_t count = 1;
    for (int64_t e : *shape) count *= e;
    // Both gradients go through f64 buffers of the output's shape, computed before any
    // gradient is stored (a gradient may alias dy, a or b), then summed to their shapes.
    // At least one element: an empty broadcast shape still offsets into the buffer (by 0
    // elements' worth of strides) and pointer arithmetic on null is undefined.
    Exec::Scratch buffer_a(exec, da ? static_cast<uint64_t>(count > 0 ? count : 1) * 8 : 0);
    Exec::Scratch buffer_b(exec, db ? static_cast<uint64_t>(count > 0 ? count : 1) * 8 : 0);
    const OperandShape compact{*shape, compact_strides(*shape)};
    const Layout l = make_layout(*shape, {compact, dy.operand(), a.operand(), b.operand()});
    dispatch_float(a.dtype, [&](auto tag) {
      using T = tag_t<decltype(tag)>;
      if (da) {
        launch_for_each(exec, BinaryGradFn<T>{l, static_cast<double*>(buffer_a.get()), dy.data<T>(), a.data<T>(),
                                              b.data<T>(), op, false}, count);
      }
      if (db) {
        launch_for_each(exec, BinaryGradFn<T>{l, static_cast<double*>(buffer_b.get()), dy.data<T>(), a.data<T>(),
                                              b.data<T>(), op, true}, count);
      }
    });
    if (da) reduce_gradient(exec, static_cast<const double*>(buffer_a.get()), *shape, *da);
    if (db) reduce_gradient(exec, static_cast<const double*>(buffer_b.get()), *shape, *db);
    exec.finish();
  });
}

/// copy and cast (F -> F): dx = dy through f64, rounded once to dx's dtype (scaled_copy).
dx_error_t* copy_backward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    expect_arity(call, 3, 1);
    const View dy = make_view(call->inputs[0], "output gradient 0");
    const View x = make_view(call->inputs[1], "forward input 0");
    expect_same_shape(dy, x, "output gradient 0");
    if (!dtype_is_float(dy.dtype) || !dtype_is_float(x.dtype)) {
      fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": copy / cast backward: F -> F only");
    }
    const auto dx = grad_output(call, 0, x, "input gradient 0");
    if (!dx) return;
    Exec exec(call, dx->device);
    scaled_copy(exec, *dx, dy.strides, dy, 1.0);
    exec.finish();
  });
}

dx_error_t* transpose_backward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    const GradOperands operands = grad_operands(call);
    const View &dy = operands.dy, &x = operands.x;
    const int rank = x.rank();
    const std::vector<int64_t> perm = transpose_perm(call, rank);
    std::vector<int64_t> expected(static_cast<size_t>(rank)), strides(static_cast<size_t>(rank));
    for (int d = 0; d < rank; ++d) {
      expected[static_cast<size_t>(d)] = x.shape[static_cast<size_t>(perm[static_cast<size_t>(d)])];
      // dy's dim d is x's dim perm[d]: in x's order, dim perm[d] steps by dy.strides[d].
      strides[static_cast<size_t>(perm[static_cast<size_t>(d)])] = dy.strides[static_cast<size_t>(d)];
    }
    if (expected != dy.shape) fail(DX_SHAPE_MISMATCH, DXG_BACKEND_NAME ": transpose backward: wrong gradient shape");
    const auto dx = grad_output(call, 0, x, "input gradient 0");
    if (!dx) return;
    Exec exec(call, dx->device);
    scaled_copy(exec, *dx, strides, dy, 1.0);
    exec.finish();
  });
}

/// where: d cond = zeros, da / db = dy where the condition selects that input, summed to its shape.
dx_error_t* where_backward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    expect_arity(call, 5, 3);
    const View dy = make_view(call->inputs[0], "output gradient 0");
    const View cond = make_view(call->inputs[1], "forward input 0");
    const View a = make_view(call->inputs[2], "forward input 1");
    const View b = make_view(call->inputs[3], "forward input 2");
    expect_dtype(cond, DType::Bool, "forward input 0");
    expect_dtype(a, dy.dtype, "forward input 1");
    expect_dtype(b, dy.dtype, "forward input 2");
    const auto shape = broadcast_shapes({cond.shape, a.shape, b.shape});
    if (!shape || *shape != dy.shape) {
      fail(DX_SHAPE_MISMATCH, DXG_BACKEND_NAME ": where backward: the output gradient does not have the broadcast shape");
    }
    const auto dc = grad_output(call, 0, cond, "input gradient 0");
    const auto da = grad_output(call, 1, a, "input gradient 1");
    const auto db = grad_output(call, 2, b, "input gradient 2");
    if (!dc && !da && !db) return;
    Exec exec(call, dy.device);
    const int64_t count = dy.count();
    // At least one element: an empty broadcast shape still offsets into the buffer (by 0
    // elements' worth of strides) and pointer arithmetic on null is undefined.
    Exec::Scratch buffer_a(exec, da ? static_cast<uint64_t>(count > 0 ? count : 1) * 8 : 0);
    Exec::Scratch buffer_b(exec, db ? static_cast<uint64_t>(count > 0 ? count : 1) * 8 : 0);
    const OperandShape compact{*shape, compact_strides(*shape)};
    const Layout l = make_layout(*shape, {compact, dy.operand(), cond.operand()});
    dispatch_float(dy.dtype, [&](auto tag) {
      using T = tag_t<decltype(tag)>;
      if (da) {
        launch_for_each(exec, WhereGradFn<T>{l, static_cast<double*>(buffer_a.get()), dy.data<T>(),
                                             cond.data<uint8_t>(), true}, count);
      }
      if (db) {
        launch_for_each(exec, WhereGradFn<T>{l, static_cast<double*>(buffer_b.get()), dy.data<T>(),
                                             cond.data<uint8_t>(), false}, count);
      }
    });
    if (da) reduce_gradient(exec, static_cast<const double*>(buffer_a.get()), *shape, *da);
    if (db) reduce_gradient(exec, static_cast<const double*>(buffer_b.get()), *shape, *db);
    if (dc) {
      const Layout lc = make_layout(dc->shape, {dc->operand()});
      launch_for_each(exec, FillFn<uint8_t>{lc, dc->data<uint8_t>(), 0}, lc.count);
    }
    exec.finish();
  });
}

/// gelu and clamp: dx = dy * f'(x).
template <bool kGelu>
dx_error_t* pointwise_backward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    const GradOperands operands = grad_operands(call);
    const View &dy = operands.dy, &x = operands.x;
    expect_same_shape(dy, x, "output gradient 0");
    const bool tanh_form = kGelu && gelu_uses_tanh(call);
    const FloatClampBounds bounds = kGelu ? FloatClampBounds{} : float_clamp_bounds(call);
    const auto dx = grad_output(call, 0, x, "input gradient 0");
    if (!dx) return;
    expect_one_device({&dy, &x, &*dx});
    Exec exec(call, dx->device);
    const Layout l = make_layout(x.shape, {dx->operand(), dy.operand(), x.operand()});
    dispatch_float(x.dtype, [&](auto tag) {
      using T = tag_t<decltype(tag)>;
      launch_for_each(exec, PointwiseGradFn<T>{l, dx->data<T>(), dy.data<T>(), x.data<T>(), kGelu, tanh_form,
                                               bounds.has_lo, bounds.has_hi, bounds.lo, bounds.hi}, l.count);
    });
    exec.finish();
  });
}

}  // namespace

dx_kernel_fn where_backward_fn() { return &where_backward; }
dx_kernel_fn gelu_backward_fn() { return &pointwise_backward<true>; }
dx_kernel_fn clamp_backward_fn() { return &pointwise_backward<false>; }

dx_kernel_fn unary_backward_fn(UnaryOp op) {
  switch (op) {
    case UnaryOp::Abs: return &unary_backward<UnaryOp::Abs>;
    case UnaryOp::Neg: return &unary_backward<UnaryOp::Neg>;
    case UnaryOp::Sign: return &unary_backward<UnaryOp::Sign>;
    case UnaryOp::Reciprocal: return &unary_backward<UnaryOp::Reciprocal>;
    case UnaryOp::Sqrt: return &unary_backward<UnaryOp::Sqrt>;
    case UnaryOp::Rsqrt: return &unary_backward<UnaryOp::Rsqrt>;
    case UnaryOp::Exp: return &unary_backward<UnaryOp::Exp>;
    case UnaryOp::Expm1: return &unary_backward<UnaryOp::Expm1>;
    case UnaryOp::Log: return &unary_backward<UnaryOp::Log>;
    case UnaryOp::Log1p: return &unary_backward<UnaryOp::Log1p>;
    case UnaryOp::Sin: return &unary_backward<UnaryOp::Sin>;
    case UnaryOp::Cos: return &unary_backward<UnaryOp::Cos>;
    case UnaryOp::Tan: return &unary_backward<UnaryOp::Tan>;
    case UnaryOp::Tanh: return &unary_backward<UnaryOp::Tanh>;
    case UnaryOp::Erf: return &unary_backward<UnaryOp::Erf>;
    case UnaryOp::Sigmoid: return &unary_backward<UnaryOp::Sigmoid>;
    case UnaryOp::Relu: return &unary_backward<UnaryOp::Relu>;
    case UnaryOp::Silu: return &unary_backward<UnaryOp::Silu>;
    default: return nullptr;  // floor, ceil, round: not differentiable (no backward slot)
  }
}

dx_kernel_fn binary_backward_fn(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add: return &binary_backward<BinaryOp::Add>;
    case BinaryOp::Sub: return &binary_backward<BinaryOp::Sub>;
    case BinaryOp::Mul: return &binary_backward<BinaryOp::Mul>;
    case BinaryOp::Div: return &binary_backward<BinaryOp::Div>;
    case BinaryOp::Pow: return &binary_backward<BinaryOp::Pow>;
    case BinaryOp::Maximum: return &binary_backward<BinaryOp::Maximum>;
    case BinaryOp::Minimum: return &binary_backward<BinaryOp::Minimum>;
  }
  return nullptr;
}

dx_kernel_fn copy_backward_fn() { return &copy_backward; }
dx_kernel_fn transpose_backward_fn() { return &transpose_backward; }
dx_kernel_fn cast_backward_fn() { return &copy_backward; }

}  // namespace deepx::gpu
