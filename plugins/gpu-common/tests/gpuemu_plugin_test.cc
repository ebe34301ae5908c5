// The GPU plugin source built against the emulated runtime (libdeepx-plugin-gpuemu.so): the
// shared plugin tests, run for real on any machine.
#define DEEPX_GPU_TEST_PINNED "gpuemu_host"
#define DEEPX_GPU_TEST_SUITE GpuEmulatedPlugin
#include "gpu_plugin_tests.inc"
