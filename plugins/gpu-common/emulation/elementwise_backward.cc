// The elementwise_backward.cu source of the GPU plugins, compiled by g++ against the emulated
// runtime (../include/deepx/gpu/emulated_runtime.h) for libdeepx-plugin-gpuemu.so.
#include "../src/elementwise_backward.cu"
