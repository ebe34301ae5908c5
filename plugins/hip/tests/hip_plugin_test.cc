// The shared GPU plugin tests (../../gpu-common/tests/gpu_plugin_tests.inc) on the HIP plugin.
#define DEEPX_GPU_TEST_DEVICE "hip:0"
#define DEEPX_GPU_TEST_PINNED "hip_host"
#define DEEPX_GPU_TEST_SUITE HipPlugin
#include "gpu_plugin_tests.inc"
