// Registration of the neural-network kernels (nn.cu, conv.cu, attention.cu), and the hook into
// matmul.cu's cuBLAS path that dx.linear shares with dx.matmul.
#ifndef DEEPX_PLUGINS_GPU_COMMON_NN_FNS_H_
#define DEEPX_PLUGINS_GPU_COMMON_NN_FNS_H_

#include "deepx/gpu/gemm.h"
#include "runtime.h"

namespace deepx::gpu {

void register_nn_kernels(Registrar& r);
void register_conv_kernels(Registrar& r);
void register_attention_kernels(Registrar& r);

/// C = A B (+ C when `accumulate`) on cuBLAS, as dx.matmul runs it; false (nothing done) on HIP,
/// in emulation, under DEEPX_CUDA_GEMM=portable, without cuBLAS, or when the operands' layout
/// does not fit a BLAS call: the caller then runs the portable GEMM (matmul.cu).
bool gemm_on_blas(Exec& exec, DType dtype, const GemmShape& shape, const void* a, const void* b, void* c,
                  bool accumulate);

}  // namespace deepx::gpu

#endif  // DEEPX_PLUGINS_GPU_COMMON_NN_FNS_H_
