// The backward kernels of backward.cu, for the registration functions of the op families.
#ifndef DEEPX_PLUGINS_GPU_COMMON_BACKWARD_FNS_H_
#define DEEPX_PLUGINS_GPU_COMMON_BACKWARD_FNS_H_

#include "deepx/gpu/elementwise.h"
#include "runtime.h"

namespace deepx::gpu {

/// Null for the ops without a gradient (floor, ceil, round).
dx_kernel_fn unary_backward_fn(UnaryOp op);
dx_kernel_fn binary_backward_fn(BinaryOp op);
dx_kernel_fn softmax_backward_fn();
dx_kernel_fn copy_backward_fn();
dx_kernel_fn transpose_backward_fn();
dx_kernel_fn cast_backward_fn();
dx_kernel_fn sum_backward_fn();
dx_kernel_fn mean_backward_fn();

dx_kernel_fn where_backward_fn();
dx_kernel_fn dropout_backward_fn();
dx_kernel_fn gelu_backward_fn();
dx_kernel_fn clamp_backward_fn();
dx_kernel_fn max_backward_fn();
dx_kernel_fn min_backward_fn();
dx_kernel_fn prod_backward_fn();

/// gelu's `approximate` attribute: false for unset/"none", true for "tanh", else
/// DX_INVALID_ARGUMENT (elementwise.cu; the backward reads it too).
bool gelu_uses_tanh(const dx_kernel_call_t* call);
/// clamp's bounds on a float tensor (either may be absent).
struct FloatClampBounds {
  bool has_lo = false, has_hi = false;
  double lo = 0, hi = 0;
};
FloatClampBounds float_clamp_bounds(const dx_kernel_call_t* call);

/// Shape ops (shape.cu: reshape, broadcast_to, concat, split, slice, pad, tile) and indexing
/// ops (indexing.cu: index_select, gather, scatter_add), forward and backward; called from
/// register_movement_kernels.
void register_shape_kernels(Registrar& r);
void register_indexing_kernels(Registrar& r);
/// Encodes a value attribute (dx.fill's, dx.pad's) as one element of `type`, as the reference:
/// i64 exactly (wrapping; rounded once to F), f64 converted by the cast rules; unset = 0.
uint64_t encode_value_attr(const dx_kernel_call_t* call, int slot, DType type, const char* op);

/// Sums a compact f64 buffer of shape `full` into `grad` (whose shape broadcasts to `full`),
/// rounded once to grad's dtype: the reduction of every broadcast gradient.
void reduce_gradient(Exec& exec, const double* buffer, const std::vector<int64_t>& full, const View& grad);

}  // namespace deepx::gpu

#endif  // DEEPX_PLUGINS_GPU_COMMON_BACKWARD_FNS_H_
