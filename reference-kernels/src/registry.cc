// The table of reference kernels, the C trampoline every registered kernel goes through, and
// deepx_reference_register(). The trampoline is the only place where C++ meets the ABI: it
// checks the call, runs the kernel and turns every exception into a dx_error_t.
#include <atomic>
#include <tuple>
#include <new>
#include <string>

#include "deepx/reference/kernels.hpp"
#include "deepx/reference/register.h"

namespace deepx::ref {
namespace {

constexpr dx_kernel_flags_t kDeterministic = DX_KERNEL_FLAG_DETERMINISTIC;
// dx.split is registered for 1..kMaxSplitOutputs outputs (a kernel has a fixed output count).
constexpr int kMaxSplitOutputs = 8;
// Elementwise kernels and copy read element i before writing element i and nothing else, so an
// output that aliases an input exactly is safe.
constexpr dx_kernel_flags_t kInPlace = DX_KERNEL_FLAG_DETERMINISTIC | DX_KERNEL_FLAG_INPLACE;

std::vector<KernelEntry> build_table() {
  using Fn = void (*)(const Call&);
  std::vector<KernelEntry> t;
  // One kernel per dtype in `types`, all inputs and the output of that dtype.
  const auto same = [&](const char* op, std::span<const DType> types, int inputs, Fn fn,
                        dx_kernel_flags_t flags, Fn backward = nullptr) {
    for (DType d : types) {
      t.push_back({op, std::vector<DType>(inputs, d), {d}, fn, flags,
                   is_float(d) ? backward : nullptr});
    }
  };
  const DType kIntAndBool[] = {DType::kI64, DType::kI32, DType::kI16, DType::kI8, DType::kU8,
                               DType::kBool};

  // ---- elementwise binary ----
  for (auto [op, fn, bw] : {std::tuple{"dx.add", &add, &add_backward},
                            std::tuple{"dx.sub", &sub, &sub_backward},
                            std::tuple{"dx.mul", &mul, &mul_backward},
                            std::tuple{"dx.div", &div, &div_backward},
                            std::tuple{"dx.maximum", &maximum, &maximum_backward},
                            std::tuple{"dx.minimum", &minimum, &minimum_backward}}) {
    same(op, kFloatTypes, 2, fn, kInPlace, bw);
    same(op, kIntTypes, 2, fn, kInPlace);
  }
  same("dx.pow", kFloatTypes, 2, &pow, kInPlace, &pow_backward);
  for (auto [op, fn] : {std::pair{"dx.eq", &eq}, std::pair{"dx.ne", &ne},
                        std::pair{"dx.lt", &lt}, std::pair{"dx.le", &le},
                        std::pair{"dx.gt", &gt}, std::pair{"dx.ge", &ge}}) {
    for (DType d : kAllTypes) t.push_back({op, {d, d}, {DType::kBool}, fn, kDeterministic});
  }
  for (auto [op, fn] : {std::pair{"dx.logical_and", &logical_and},
                        std::pair{"dx.logical_or", &logical_or},
                        std::pair{"dx.logical_xor", &logical_xor}}) {
    t.push_back({op, {DType::kBool, DType::kBool}, {DType::kBool}, fn, kInPlace});
  }
  for (DType d : kAllTypes) {
    t.push_back({"dx.where", {DType::kBool, d, d}, {d}, &where, kInPlace,
                 is_float(d) ? &where_backward : nullptr});
  }

  // ---- elementwise unary ----
  same("dx.neg", kFloatTypes, 1, &neg, kInPlace, &neg_backward);
  same("dx.neg", kIntTypes, 1, &neg, kInPlace);
  same("dx.abs", kFloatTypes, 1, &abs, kInPlace, &abs_backward);
  same("dx.abs", kIntTypes, 1, &abs, kInPlace);
  same("dx.sign", kFloatTypes, 1, &sign, kInPlace, &sign_backward);
  same("dx.sign", kIntTypes, 1, &sign, kInPlace);
  for (auto [op, fn, bw] : {std::tuple{"dx.exp", &exp, &exp_backward},
                            std::tuple{"dx.relu", &relu, &relu_backward},
                            std::tuple{"dx.reciprocal", &reciprocal, &reciprocal_backward},
                            std::tuple{"dx.sqrt", &sqrt, &sqrt_backward},
                            std::tuple{"dx.rsqrt", &rsqrt, &rsqrt_backward},
                            std::tuple{"dx.expm1", &expm1, &expm1_backward},
                            std::tuple{"dx.log", &log, &log_backward},
                            std::tuple{"dx.log1p", &log1p, &log1p_backward},
                            std::tuple{"dx.sin", &sin, &sin_backward},
                            std::tuple{"dx.cos", &cos, &cos_backward},
                            std::tuple{"dx.tan", &tan, &tan_backward},
                            std::tuple{"dx.tanh", &tanh, &tanh_backward},
                            std::tuple{"dx.erf", &erf, &erf_backward},
                            std::tuple{"dx.sigmoid", &sigmoid, &sigmoid_backward},
                            std::tuple{"dx.silu", &silu, &silu_backward},
                            std::tuple{"dx.gelu", &gelu, &gelu_backward}}) {
    same(op, kFloatTypes, 1, fn, kInPlace, bw);
  }
  same("dx.floor", kFloatTypes, 1, &floor, kInPlace);
  same("dx.ceil", kFloatTypes, 1, &ceil, kInPlace);
  same("dx.round", kFloatTypes, 1, &round, kInPlace);
  same("dx.clamp", kFloatTypes, 1, &clamp, kInPlace, &clamp_backward);
  same("dx.clamp", kIntTypes, 1, &clamp, kInPlace);
  t.push_back({"dx.logical_not", {DType::kBool}, {DType::kBool}, &logical_not, kInPlace});
  same("dx.bitwise_not", kIntAndBool, 1, &bitwise_not, kInPlace);
  for (DType from : kAllTypes) {
    for (DType to : kAllTypes) {
      // Same-size casts read element i before writing it; others may not alias.
      const dx_kernel_flags_t flags = size_of(from) == size_of(to) ? kInPlace : kDeterministic;
      t.push_back({"dx.cast", {from}, {to}, &cast, flags,
                   is_float(from) && is_float(to) ? &cast_backward : nullptr});
    }
  }

  // ---- reductions ----
  same("dx.sum", kFloatTypes, 1, &sum, kDeterministic, &sum_backward);
  for (DType d : kIntTypes) t.push_back({"dx.sum", {d}, {DType::kI64}, &sum, kDeterministic});
  same("dx.mean", kFloatTypes, 1, &mean, kDeterministic, &mean_backward);
  for (DType d : kIntTypes) t.push_back({"dx.mean", {d}, {DType::kF64}, &mean, kDeterministic});
  same("dx.prod", kFloatTypes, 1, &prod, kDeterministic, &prod_backward);
  for (DType d : kIntTypes) t.push_back({"dx.prod", {d}, {DType::kI64}, &prod, kDeterministic});
  same("dx.max", kFloatTypes, 1, &max, kDeterministic, &max_backward);
  same("dx.max", kIntTypes, 1, &max, kDeterministic);
  same("dx.min", kFloatTypes, 1, &min, kDeterministic, &min_backward);
  same("dx.min", kIntTypes, 1, &min, kDeterministic);
  for (DType d : kFloatTypes) {
    t.push_back({"dx.argmax", {d}, {DType::kI64}, &argmax, kDeterministic});
    t.push_back({"dx.argmin", {d}, {DType::kI64}, &argmin, kDeterministic});
  }
  for (DType d : kIntTypes) {
    t.push_back({"dx.argmax", {d}, {DType::kI64}, &argmax, kDeterministic});
    t.push_back({"dx.argmin", {d}, {DType::kI64}, &argmin, kDeterministic});
  }

  // ---- linear algebra, nn ----
  same("dx.matmul", kFloatTypes, 2, &matmul, kDeterministic, &matmul_backward);
  t.push_back({"dx.matmul", {DType::kI8, DType::kI8}, {DType::kI32}, &matmul, kDeterministic});
  same("dx.softmax", kFloatTypes, 1, &softmax, kDeterministic, &softmax_backward);
  same("dx.log_softmax", kFloatTypes, 1, &log_softmax, kDeterministic, &log_softmax_backward);
  for (DType d : kFloatTypes) {
    t.push_back({"dx.linear", {d, d, d}, {d}, &linear, kDeterministic, &linear_backward, 0b100});
    t.push_back({"dx.layer_norm", {d, d, d}, {d, d, d}, &layer_norm, kDeterministic,
                 &layer_norm_backward, 0b110});
    t.push_back({"dx.rms_norm", {d, d}, {d}, &rms_norm, kDeterministic, &rms_norm_backward, 0b10});
    for (DType index : {DType::kI32, DType::kI64}) {
      t.push_back({"dx.embedding", {d, index}, {d}, &embedding, kDeterministic, &embedding_backward});
    }
    t.push_back({"dx.cross_entropy", {d, DType::kI64}, {d}, &cross_entropy, kDeterministic,
                 &cross_entropy_backward});
    t.push_back({"dx.conv2d", {d, d, d}, {d}, &conv2d, kDeterministic, &conv2d_backward, 0b100});
    t.push_back({"dx.max_pool2d", {d}, {d}, &max_pool2d, kDeterministic, &max_pool2d_backward});
    t.push_back({"dx.avg_pool2d", {d}, {d}, &avg_pool2d, kDeterministic, &avg_pool2d_backward});
    // Running stats are updated in place (inputs 3 and 4) when training.
    t.push_back({"dx.batch_norm", {d, d, d, d, d}, {d}, &batch_norm, kDeterministic,
                 &batch_norm_backward, 0b11110});
    for (DType mask : {d, DType::kBool}) {
      t.push_back({"dx.scaled_dot_product_attention", {d, d, d, mask}, {d},
                   &scaled_dot_product_attention, kDeterministic,
                   &scaled_dot_product_attention_backward, 0b1000});
    }
  }

  // ---- data movement, creation ----
  same("dx.transpose", kAllTypes, 1, &transpose, kDeterministic, &transpose_backward);
  same("dx.copy", kAllTypes, 1, &copy, kInPlace, &copy_backward);
  same("dx.fill", kAllTypes, 0, &fill, kDeterministic);
  for (auto [op, fn, bw] : {std::tuple{"dx.reshape", &reshape, &reshape_backward},
                            std::tuple{"dx.broadcast_to", &broadcast_to_op, &broadcast_to_backward},
                            std::tuple{"dx.slice", &slice, &slice_backward},
                            std::tuple{"dx.pad", &pad, &pad_backward},
                            std::tuple{"dx.tile", &tile, &tile_backward}}) {
    same(op, kAllTypes, 1, fn, kDeterministic, bw);
  }
  for (DType d : kAllTypes) {
    const Fn float_only = nullptr;
    KernelEntry cat{"dx.concat", {d}, {d}, &concat, kDeterministic | DX_KERNEL_FLAG_VARIADIC,
                    is_float(d) ? &concat_backward : float_only};
    cat.variadic = true;
    t.push_back(cat);
    for (int n = 1; n <= kMaxSplitOutputs; ++n) {
      t.push_back({"dx.split", {d}, std::vector<DType>(n, d), &split, kDeterministic,
                   is_float(d) ? &split_backward : float_only});
    }
    for (DType index : {DType::kI32, DType::kI64}) {
      t.push_back({"dx.index_select", {d, index}, {d}, &index_select, kDeterministic,
                   is_float(d) ? &index_select_backward : float_only});
    }
    t.push_back({"dx.gather", {d, DType::kI64}, {d}, &gather, kDeterministic,
                 is_float(d) ? &gather_backward : float_only});
    if (d != DType::kBool) {
      t.push_back({"dx.scatter_add", {d, DType::kI64, d}, {d}, &scatter_add, kDeterministic,
                   is_float(d) ? &scatter_add_backward : float_only});
    }
  }
  same("dx.arange", kFloatTypes, 0, &arange, kDeterministic);
  same("dx.arange", kIntTypes, 0, &arange, kDeterministic);
  same("dx.uniform", kFloatTypes, 0, &uniform, kDeterministic);
  same("dx.normal", kFloatTypes, 0, &normal, kDeterministic);
  for (DType d : kFloatTypes) {
    t.push_back({"dx.dropout", {d}, {d, DType::kBool}, &dropout, kDeterministic, &dropout_backward});
  }
  return t;
}

// The host of the most recent registration: lets the trampoline report a malformed call whose
// `host` pointer is null (the only way to create an error is through a host).
std::atomic<const dx_host_t*> g_fallback_host{nullptr};

std::string signature_of(const KernelEntry& e) {
  std::string s = std::string(e.op) + "(";
  for (std::size_t i = 0; i < e.inputs.size(); ++i) s += (i ? ", " : "") + std::string(name_of(e.inputs[i]));
  s += ") -> (";
  for (std::size_t i = 0; i < e.outputs.size(); ++i) s += (i ? ", " : "") + std::string(name_of(e.outputs[i]));
  return s + ")";
}

void check_dtype(const DLTensor* t, DType expected, const std::string& role, const KernelEntry& e) {
  if (t == nullptr) fail(DX_INVALID_ARGUMENT, role + " is null in a call of " + signature_of(e));
  const DLDataType want = to_dlpack(expected);
  if (t->dtype.code != want.code || t->dtype.bits != want.bits || t->dtype.lanes != want.lanes) {
    fail(DX_INVALID_ARGUMENT, role + " has the wrong dtype for " + signature_of(e));
  }
}

bool is_optional(const KernelEntry& e, std::size_t i) {
  return i < 32 && ((e.optional_inputs >> i) & 1u) != 0;
}

// The forward (and backward) function of every registered kernel; kernel_data is its
// KernelEntry.
template <bool kBackward>
dx_error_t* trampoline(const dx_kernel_call_t* call) {
  const dx_host_t* host =
      call != nullptr && call->host != nullptr ? call->host : g_fallback_host.load();
  if (host == nullptr) return nullptr;  // no way to report anything; cannot happen via a host
  try {
    if (call == nullptr) fail(DX_INVALID_ARGUMENT, "null kernel call");
    if (call->struct_size < DX_KERNEL_CALL_SIZE_1_0) {
      fail(DX_INVALID_ARGUMENT, "dx_kernel_call_t.struct_size " +
                                    std::to_string(call->struct_size) + " is too small");
    }
    const auto* entry = static_cast<const KernelEntry*>(call->kernel_data);
    if (entry == nullptr) fail(DX_INVALID_ARGUMENT, "kernel_data is null");
    if (call->num_inputs < 0 || call->num_outputs < 0 || call->num_attrs < 0 ||
        (call->num_inputs > 0 && call->inputs == nullptr) ||
        (call->num_outputs > 0 && call->outputs == nullptr) ||
        (call->num_attrs > 0 && call->attrs == nullptr)) {
      fail(DX_INVALID_ARGUMENT, "malformed dx_kernel_call_t for " + signature_of(*entry));
    }
    Call c{std::span<const DLTensor* const>(call->inputs, static_cast<std::size_t>(call->num_inputs)),
           std::span<const DLTensor* const>(call->outputs, static_cast<std::size_t>(call->num_outputs)),
           std::span<const dx_attr_t>(call->attrs, static_cast<std::size_t>(call->num_attrs))};
    if constexpr (kBackward) {
      run_backward(*entry, c);
    } else {
      run_kernel(*entry, c);
    }
    return nullptr;
  } catch (const Error& e) {
    return host->error_create(e.code, e.message.c_str());
  } catch (const std::bad_alloc&) {
    return host->error_create(DX_OUT_OF_MEMORY, "reference kernel: out of memory");
  } catch (const std::exception& e) {
    return host->error_create(DX_INTERNAL, e.what());
  } catch (...) {
    return host->error_create(DX_INTERNAL, "reference kernel: unknown exception");
  }
}

}  // namespace

const std::vector<KernelEntry>& kernel_table() {
  static const std::vector<KernelEntry> table = build_table();
  return table;
}

void run_kernel(const KernelEntry& entry, const Call& call) {
  if (entry.variadic) {
    if (call.inputs.empty() || call.outputs.size() != entry.outputs.size()) {
      fail(DX_INVALID_ARGUMENT, signature_of(entry) + " takes one or more inputs and " +
                                    std::to_string(entry.outputs.size()) + " outputs");
    }
    for (std::size_t i = 0; i < call.inputs.size(); ++i) {
      check_dtype(call.inputs[i], entry.inputs[0], "input " + std::to_string(i), entry);
    }
    for (std::size_t i = 0; i < call.outputs.size(); ++i) {
      check_dtype(call.outputs[i], entry.outputs[i], "output " + std::to_string(i), entry);
    }
    entry.compute(call);
    return;
  }
  if (call.inputs.size() != entry.inputs.size() || call.outputs.size() != entry.outputs.size()) {
    fail(DX_INVALID_ARGUMENT, signature_of(entry) + " takes " +
                                  std::to_string(entry.inputs.size()) + " inputs and " +
                                  std::to_string(entry.outputs.size()) + " outputs, got " +
                                  std::to_string(call.inputs.size()) + " and " +
                                  std::to_string(call.outputs.size()));
  }
  for (std::size_t i = 0; i < call.inputs.size(); ++i) {
    if (call.inputs[i] == nullptr && is_optional(entry, i)) continue;
    check_dtype(call.inputs[i], entry.inputs[i], "input " + std::to_string(i), entry);
  }
  for (std::size_t i = 0; i < call.outputs.size(); ++i) {
    check_dtype(call.outputs[i], entry.outputs[i], "output " + std::to_string(i), entry);
  }
  entry.compute(call);
}

void run_backward(const KernelEntry& entry, const Call& call) {
  if (entry.backward == nullptr) fail(DX_UNSUPPORTED, signature_of(entry) + " has no backward");
  const std::size_t m = entry.outputs.size();
  // A variadic op has as many forward inputs as the call carries.
  const std::size_t n = entry.variadic ? (call.inputs.size() > 2 * m ? call.inputs.size() - 2 * m : 0)
                                       : entry.inputs.size();
  if ((entry.variadic && n == 0) || call.inputs.size() != 2 * m + n || call.outputs.size() != n) {
    fail(DX_INVALID_ARGUMENT, "backward of " + signature_of(entry) + " takes " +
                                  std::to_string(2 * m + n) + " inputs (output gradients, "
                                  "forward inputs, forward outputs) and " + std::to_string(n) +
                                  " outputs (input gradients), got " +
                                  std::to_string(call.inputs.size()) + " and " +
                                  std::to_string(call.outputs.size()));
  }
  for (std::size_t i = 0; i < m; ++i) {
    check_dtype(call.inputs[i], entry.outputs[i], "output gradient " + std::to_string(i), entry);
    check_dtype(call.inputs[m + n + i], entry.outputs[i], "forward output " + std::to_string(i),
                entry);
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (call.inputs[m + i] == nullptr && is_optional(entry, i)) {
      if (call.outputs[i] != nullptr) {
        fail(DX_INVALID_ARGUMENT, "backward of " + signature_of(entry) + ": gradient " +
                                      std::to_string(i) + " requested for an absent optional input");
      }
      continue;
    }
    const DType type = entry.variadic ? entry.inputs[0] : entry.inputs[i];
    check_dtype(call.inputs[m + i], type, "forward input " + std::to_string(i), entry);
    if (call.outputs[i] != nullptr) {
      check_dtype(call.outputs[i], type, "input gradient " + std::to_string(i), entry);
    }
  }
  entry.backward(call);
}

}  // namespace deepx::ref

extern "C" dx_error_t* deepx_reference_register(const dx_host_t* host,
                                                 dx_host_context_t* context) {
  using namespace deepx::ref;
  if (host == nullptr || host->struct_size < DX_STRUCT_SIZE(dx_host_t, error_create) ||
      host->error_create == nullptr) {
    return nullptr;  // nothing to report an error with; register nothing
  }
  try {
    if (DX_VERSION_MAJOR(host->abi_version) != DX_ABI_VERSION_MAJOR) {
      return dx_errorf(host, DX_VERSION_MISMATCH,
                       "reference kernels speak ABI %u.x, the host speaks %u.%u",
                       DX_ABI_VERSION_MAJOR, DX_VERSION_MAJOR(host->abi_version),
                       DX_VERSION_MINOR(host->abi_version));
    }
    if (host->struct_size < DX_STRUCT_SIZE(dx_host_t, register_kernel) ||
        host->register_kernel == nullptr) {
      return host->error_create(DX_INVALID_ARGUMENT, "host table has no register_kernel");
    }
    g_fallback_host.store(host);
    for (const KernelEntry& entry : kernel_table()) {
      std::vector<DLDataType> dtypes;
      for (DType d : entry.inputs) dtypes.push_back(to_dlpack(d));
      for (DType d : entry.outputs) dtypes.push_back(to_dlpack(d));
      dx_kernel_desc_t desc{};
      desc.struct_size = DX_KERNEL_DESC_SIZE_1_0;
      desc.op_name = entry.op;
      desc.device_type = kDLCPU;
      desc.num_inputs = static_cast<int32_t>(entry.inputs.size());
      desc.num_outputs = static_cast<int32_t>(entry.outputs.size());
      desc.dtypes = dtypes.data();
      desc.flags = entry.flags;
      desc.kernel_data = const_cast<KernelEntry*>(&entry);  // the trampoline only reads it
      desc.forward = &trampoline<false>;
      desc.backward = entry.backward != nullptr ? &trampoline<true> : nullptr;
      if (dx_error_t* error = host->register_kernel(context, &desc)) return error;
    }
    return nullptr;
  } catch (const std::bad_alloc&) {
    return host->error_create(DX_OUT_OF_MEMORY, "reference: out of memory while registering");
  } catch (...) {
    return host->error_create(DX_INTERNAL, "reference: unexpected exception while registering");
  }
}

extern "C" int32_t deepx_reference_kernel_count(void) {
  try {
    return static_cast<int32_t>(deepx::ref::kernel_table().size());
  } catch (...) {
    return 0;
  }
}
