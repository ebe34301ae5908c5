// Registration of the CPU plugin's kernels and memory space.
#ifndef DEEPX_PLUGINS_CPU_KERNELS_H_
#define DEEPX_PLUGINS_CPU_KERNELS_H_

#include <atomic>
#include <initializer_list>

#include "common.h"

namespace deepx::cpu {

/// Registers kernels with the host during init; remembers the first refusal and skips the rest.
class Registrar {
 public:
  Registrar(const dx_host_t* host, dx_host_context_t* context) : host_(host), context_(context) {}

  /// `dtypes`: the inputs' dtypes then the outputs' dtypes (1 + outputs for variadic kernels).
  /// `backward` follows the convention of plugin.h (null = no gradient kernel).
  void add(const char* op, int num_inputs, int num_outputs, std::initializer_list<DLDataType> dtypes,
           dx_kernel_fn forward, dx_kernel_flags_t flags, dx_kernel_fn backward = nullptr);

  /// The first error the host returned (ownership to the caller), or null.
  dx_error_t* take_error() {
    dx_error_t* e = error_;
    error_ = nullptr;
    return e;
  }
  int registered() const { return registered_; }
  const dx_host_t* host() const { return host_; }
  dx_host_context_t* context() const { return context_; }

 private:
  const dx_host_t* host_;
  dx_host_context_t* context_;
  dx_error_t* error_ = nullptr;
  int registered_ = 0;
};

/// add, sub, mul, div, neg, exp, relu (elementwise.cc).
void register_elementwise_kernels(Registrar& r);
/// abs ... round, clamp, pow, maximum/minimum, comparisons, logic, where, cast
/// (elementwise_math.cc).
void register_math_kernels(Registrar& r);
void register_reduction_kernels(Registrar& r);
void register_matmul_kernels(Registrar& r);
/// log_softmax, linear, layer_norm, rms_norm, batch_norm, embedding, cross_entropy (nn.cc).
void register_nn_kernels(Registrar& r);
/// conv2d, max_pool2d, avg_pool2d, scaled_dot_product_attention (conv.cc, conv_pool.cc,
/// attention.cc).
void register_conv_attention_kernels(Registrar& r);
/// copy, transpose, fill, reshape, broadcast_to, concat, split, slice, pad, tile, arange
/// (movement.cc), index_select, gather, scatter_add (indexing.cc); uniform, normal, dropout
/// (random.cc).
void register_movement_kernels(Registrar& r);
void register_random_kernels(Registrar& r);

/// Registers the "cpu" host memory space; `space_data` must outlive the plugin state.
dx_error_t* register_memory_space(const dx_host_t* host, dx_host_context_t* context,
                                  void* space_data);

/// Per-runtime state handed to the memory space slots.
struct PluginState {
  const dx_host_t* host;
  // The "cpu" space's allocation statistics (memory.cc; the space's `stats` slot).
  std::atomic<uint64_t> in_use_bytes{0};
  std::atomic<uint64_t> peak_in_use_bytes{0};
  std::atomic<uint64_t> live_allocations{0};
};

// This variant's plugin descriptor (plugin.cc); entry.cc hands the chosen variant's to the host.
const dx_plugin_t* plugin_descriptor();

}  // namespace deepx::cpu

#endif  // DEEPX_PLUGINS_CPU_KERNELS_H_
