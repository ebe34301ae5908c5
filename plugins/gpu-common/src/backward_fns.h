// The backward kernels of elementwise_backward.cu (the elementwise ops, copy, transpose and cast)
// for the registration functions of their families, and the helpers the other backward kernels
// share.
#ifndef DEEPX_PLUGINS_GPU_COMMON_BACKWARD_FNS_H_
#define DEEPX_PLUGINS_GPU_COMMON_BACKWARD_FNS_H_

#include <optional>
#include <vector>

#include "deepx/gpu/elementwise.h"
#include "runtime.h"

namespace deepx::gpu {

/// Null for the ops without a gradient (floor, ceil, round).
dx_kernel_fn unary_backward_fn(UnaryOp op);
dx_kernel_fn binary_backward_fn(BinaryOp op);
dx_kernel_fn copy_backward_fn();
dx_kernel_fn transpose_backward_fn();
dx_kernel_fn cast_backward_fn();
dx_kernel_fn where_backward_fn();
dx_kernel_fn gelu_backward_fn();
dx_kernel_fn clamp_backward_fn();

/// The prologue of a backward call of a one-input op (inputs dy, x, y; one output): checks the
/// arity and that dy has x's dtype.
struct GradOperands {
  View dy, x;
};
GradOperands grad_operands(const dx_kernel_call_t* call);
/// Input 0 of a backward call, the output gradient, checked to have `dtype` and `shape`.
View output_gradient(const dx_kernel_call_t* call, DType dtype, const std::vector<int64_t>& shape);

/// dx = scale * dy through f64, rounded once to dx's dtype, with dy's strides given in dx's
/// dimension order (copy, transpose, cast, sum and mean gradients); through a scratch copy when
/// dx aliases dy with another layout.
void scaled_copy(Exec& exec, const View& dx, const std::vector<int64_t>& dy_strides_in_dx_order, const View& dy,
                 double scale);

/// transpose's `perm` for a rank-`rank` input (unset: the axes reversed; negative entries count
/// from the end), else DX_INVALID_ARGUMENT (movement.cu; the backward reads it too).
std::vector<int64_t> transpose_perm(const dx_kernel_call_t* call, int rank);
/// gelu's `approximate` attribute: false for unset/"none", true for "tanh", else
/// DX_INVALID_ARGUMENT (elementwise.cu; the backward reads it too).
bool gelu_uses_tanh(const dx_kernel_call_t* call);
/// clamp's bounds on a float tensor (either may be absent).
struct FloatClampBounds {
  bool has_lo = false, has_hi = false;
  double lo = 0, hi = 0;
};
FloatClampBounds float_clamp_bounds(const dx_kernel_call_t* call);

/// Shape ops (movement_shape.cu: reshape, broadcast_to, concat, split, slice, pad, tile) and indexing
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
