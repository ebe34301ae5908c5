// The shared GPU plugin tests (../../gpu-common/tests/gpu_plugin_tests.inc) on the CUDA plugin.
#define DEEPX_GPU_TEST_DEVICE "cuda:0"
#define DEEPX_GPU_TEST_PINNED "cuda_host"
#define DEEPX_GPU_TEST_SUITE CudaPlugin
#include "gpu_plugin_tests.inc"
