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

/// Sums a compact f64 buffer of shape `full` into `grad` (whose shape broadcasts to `full`),
/// rounded once to grad's dtype: the reduction of every broadcast gradient.
void reduce_gradient(Exec& exec, const double* buffer, const std::vector<int64_t>& full, const View& grad);

}  // namespace deepx::gpu

#endif  // DEEPX_PLUGINS_GPU_COMMON_BACKWARD_FNS_H_
