// Entry point of libdeepx-plugin-cuda.so and libdeepx-plugin-hip.so (the same source, built by
// nvcc or hipcc): descriptor, init (devices, streams, pools, registration), shutdown.
//
// Without a usable GPU (no device, no driver) init succeeds and registers nothing, with an INFO
// log line saying why: a machine without GPUs can load every bundled plugin.
#include <cstdlib>
#include <cstring>
#include <string>

#include "nn_fns.h"
#include "runtime.h"

#ifndef DEEPX_GPU_PLUGIN_VERSION
#define DEEPX_GPU_PLUGIN_VERSION "0.0.0"
#endif
#ifndef DEEPX_GPU_BUILD_ID
#define DEEPX_GPU_BUILD_ID "unknown"
#endif

namespace deepx::gpu {
namespace {

bool env_is(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v != nullptr && std::strcmp(v, value) == 0;
}

/// Sets up one device: its synchronous-call stream and its memory pool.
void open_device(PluginState& state, int index) {
  auto d = std::make_unique<DeviceState>();
  d->index = index;
  d->space_name = std::string(kPluginName) + ":" + std::to_string(index);
  DeviceGuard guard(index);
  size_t free_bytes = 0, total_bytes = 0;
  if (gpuMemGetInfo(&free_bytes, &total_bytes) == gpuSuccess) d->capacity = total_bytes;
  (void)gpuGetLastError();
  check(gpuStreamCreateWithFlags(&d->sync_stream, gpuStreamNonBlocking), "create stream");
  int pools = 0;
  if (gpuDeviceGetAttribute(&pools, gpuDevAttrMemoryPoolsSupported, index) == gpuSuccess && pools) {
    gpuMemPoolProps props{};
    props.allocType = gpuMemAllocationTypePinned;
    props.handleTypes = gpuMemHandleTypeNone;
    props.location.type = gpuMemLocationTypeDevice;
    props.location.id = index;
    if (gpuMemPoolCreate(&d->pool, &props) == gpuSuccess) {
      // Keep freed memory in the pool (like PyTorch's caching allocator): returning it to the
      // driver at every synchronisation would make each allocation a driver call.
      uint64_t threshold = UINT64_MAX;
      (void)gpuMemPoolSetAttribute(d->pool, gpuMemPoolAttrReleaseThreshold, &threshold);
      d->pools_supported = true;
    } else {
      d->pool = nullptr;
    }
  }
  (void)gpuGetLastError();
  if (!d->pools_supported) {
    state.log(DX_LOG_INFO, d->space_name + ": no stream-ordered memory pools; using " +
                               DXG_BACKEND_NAME "Malloc (synchronous)");
  }
  state.devices.push_back(std::move(d));
}

/// Vendor op "<backend>.pool_stats": 0 inputs, one i64 output of shape (4,) on a GPU, filled
/// with that device's pool statistics (reserved, reserved high-water, used, used high-water
/// bytes). The memory-space ABI has no statistics slot; this makes them reachable through
/// dx_invoke_by_name().
dx_error_t* pool_stats_forward(const dx_kernel_call_t* call) {
  return kernel_entry(call, [&] {
    expect_arity(call, 0, 1);
    const View out = make_view(call->outputs[0], "output 0");
    expect_dtype(out, DType::I64, "output 0");
    if (out.shape != std::vector<int64_t>{4} || out.strides[0] != 1) {
      fail(DX_SHAPE_MISMATCH, DXG_BACKEND_NAME ".pool_stats: the output must be a compact (4,) tensor");
    }
    Exec exec(call, out.device);
    const PoolStats s = pool_stats(exec.device());
    const int64_t values[4] = {static_cast<int64_t>(s.reserved), static_cast<int64_t>(s.reserved_high),
                               static_cast<int64_t>(s.used), static_cast<int64_t>(s.used_high)};
    check(gpuMemcpyAsync(out.base, values, sizeof values, gpuMemcpyHostToDevice, exec.stream()), "pool_stats");
    exec.synchronize();  // `values` lives on this stack frame
  });
}

void plugin_shutdown(void* state) {
  auto* s = static_cast<PluginState*>(state);
  if (s == nullptr) return;
  try {
    release_devices(s);
  } catch (...) {
  }
  delete s;
}

dx_error_t* plugin_init(const dx_host_t* host, dx_host_context_t* context, void** out_state) {
  if (host == nullptr || host->error_create == nullptr) return nullptr;
  PluginState* state = nullptr;
  dx_error_t* host_error = nullptr;
  dx_error_t* error = guard(host, [&] {
    if (host->register_kernel == nullptr || host->register_memory_space == nullptr) {
      fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": the host services table lacks the registration slots");
    }
    state = new PluginState{};
    state->host = host;
    state->context = context;
    state->pinned_name = std::string(kPluginName) + "_host";
    state->use_pool = !env_is("DEEPX_GPU_ALLOCATOR", "device");
#if defined(DXG_BACKEND_CUDA)
    state->portable_gemm = env_is("DEEPX_CUDA_GEMM", "portable");
#else
    state->portable_gemm = true;
#endif
    int count = 0;
    const gpuError_t status = gpuGetDeviceCount(&count);
    if (status != gpuSuccess || count <= 0) {
      (void)gpuGetLastError();
      state->log(DX_LOG_INFO, std::string("no usable GPU (") +
                                  (status != gpuSuccess ? gpuGetErrorString(status) : "0 devices") +
                                  "): registering no kernels and no memory spaces");
      return;
    }
    for (int i = 0; i < count; ++i) open_device(*state, i);
    Registrar registrar(state);
    register_elementwise_kernels(registrar);
    register_movement_kernels(registrar);
    register_reduction_kernels(registrar);
    register_matmul_kernels(registrar);
    register_random_kernels(registrar);
    register_nn_kernels(registrar);
    register_conv_kernels(registrar);
    register_attention_kernels(registrar);
    registrar.add(DXG_BACKEND_NAME ".pool_stats", 0, 1, {DType::I64}, &pool_stats_forward, 0);
    host_error = registrar.take_error();
    if (host_error == nullptr) host_error = register_memory_spaces(state);
  });
  if (error == nullptr) error = host_error;
  if (error != nullptr) {
    plugin_shutdown(state);
    return error;
  }
  if (out_state != nullptr) *out_state = state;
  return nullptr;
}

constexpr dx_plugin_t kPlugin = {
    DX_PLUGIN_SIZE_1_0,
    DX_ABI_VERSION,
    0,
    DXG_BACKEND_NAME,
    "deepx",
    DEEPX_GPU_PLUGIN_VERSION,
    DEEPX_GPU_BUILD_ID,
    DX_PLUGIN_CAP_KERNELS | DX_PLUGIN_CAP_MEMORY | DX_PLUGIN_CAP_CONCURRENT_KERNELS,
    &plugin_init,
    &plugin_shutdown,
    nullptr,  // get_extension: no extensions
};

}  // namespace
}  // namespace deepx::gpu

extern "C" DX_EXPORT const dx_plugin_t* dx_plugin_entry(uint32_t host_abi_min,
                                                        uint32_t host_abi_max) {
  const unsigned ours = DX_ABI_VERSION_MAJOR;
  if (DX_VERSION_MAJOR(host_abi_min) > ours || DX_VERSION_MAJOR(host_abi_max) < ours) {
    return nullptr;
  }
  return &deepx::gpu::kPlugin;
}
