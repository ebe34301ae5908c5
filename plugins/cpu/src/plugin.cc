// Entry point of libdeepx-plugin-cpu.so: the plugin descriptor, init and shutdown.
#include <vector>

#include "kernels.h"

#ifndef DEEPX_CPU_PLUGIN_VERSION
#define DEEPX_CPU_PLUGIN_VERSION "0.0.0"
#endif
#ifndef DEEPX_CPU_BUILD_ID
#define DEEPX_CPU_BUILD_ID "unknown"
#endif
// The instruction-set variant this copy of the kernels is compiled for (CMakeLists.txt builds
// the kernel sources once per variant; entry.cc picks one at load time).
#ifndef DEEPX_CPU_ISA_NAME
#define DEEPX_CPU_ISA_NAME "baseline"
#endif

namespace deepx::cpu {

void Registrar::add(const char* op, int num_inputs, int num_outputs,
                    std::initializer_list<DLDataType> dtypes, dx_kernel_fn forward,
                    dx_kernel_flags_t flags, dx_kernel_fn backward) {
  if (error_ != nullptr) return;
  const std::vector<DLDataType> signature(dtypes);
  dx_kernel_desc_t desc{};
  desc.struct_size = DX_KERNEL_DESC_SIZE_1_0;
  desc.op_name = op;
  desc.device_type = kDLCPU;
  desc.num_inputs = num_inputs;
  desc.num_outputs = num_outputs;
  desc.dtypes = signature.data();
  desc.flags = flags;
  desc.forward = forward;
  desc.backward = backward;
  error_ = host_->register_kernel(context_, &desc);
  if (error_ == nullptr) ++registered_;
}

namespace {

void plugin_shutdown(void* state) { delete static_cast<PluginState*>(state); }

dx_error_t* plugin_init(const dx_host_t* host, dx_host_context_t* context, void** out_state) {
  if (host == nullptr || host->error_create == nullptr) return nullptr;  // cannot report
  PluginState* state = nullptr;
  dx_error_t* host_error = nullptr;  // a refusal from the host, passed on as is
  dx_error_t* error = guard(host, [&] {
    if (host->register_kernel == nullptr || host->register_memory_space == nullptr) {
      fail(DX_INVALID_ARGUMENT, "cpu: the host services table lacks the registration slots");
    }
    state = new PluginState{host};
    Registrar registrar(host, context);
    register_elementwise_kernels(registrar);
    register_math_kernels(registrar);
    register_reduction_kernels(registrar);
    register_matmul_kernels(registrar);
    register_nn_kernels(registrar);
    register_conv_attention_kernels(registrar);
    register_movement_kernels(registrar);
    register_random_kernels(registrar);
    host_error = registrar.take_error();
    if (host_error == nullptr) host_error = register_memory_space(host, context, state);
  });
  if (error == nullptr) error = host_error;
  if (error != nullptr) {
    delete state;  // the host calls nothing else after a failed init
    return error;
  }
  if (out_state != nullptr) *out_state = state;
  return nullptr;
}

constexpr dx_plugin_t kPlugin = {
    DX_PLUGIN_SIZE_1_0,
    DX_ABI_VERSION,
    0,
    "cpu",
    "deepx",
    DEEPX_CPU_PLUGIN_VERSION,
    DEEPX_CPU_BUILD_ID "+" DEEPX_CPU_ISA_NAME,  // says which variant serves this process
    DX_PLUGIN_CAP_KERNELS | DX_PLUGIN_CAP_MEMORY | DX_PLUGIN_CAP_CONCURRENT_KERNELS,
    &plugin_init,
    &plugin_shutdown,
    nullptr,  // get_extension: no extensions
};

}  // namespace

const dx_plugin_t* plugin_descriptor() { return &kPlugin; }

}  // namespace deepx::cpu
