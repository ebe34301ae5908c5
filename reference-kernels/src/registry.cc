// The table of reference kernels, the C trampoline every registered kernel goes through, and
// deepx_reference_register(). The trampoline is the only place where C++ meets the ABI: it
// checks the call, runs the kernel and turns every exception into a dx_error_t.
#include <atomic>
#include <new>
#include <string>

#include "deepx/reference/kernels.hpp"
#include "deepx/reference/register.h"

namespace deepx::ref {
namespace {

constexpr dx_kernel_flags_t kDeterministic = DX_KERNEL_FLAG_DETERMINISTIC;
// Elementwise kernels and copy read element i before writing element i and nothing else, so an
// output that aliases an input exactly is safe.
constexpr dx_kernel_flags_t kInPlace = DX_KERNEL_FLAG_DETERMINISTIC | DX_KERNEL_FLAG_INPLACE;

std::vector<KernelEntry> build_table() {
  std::vector<KernelEntry> t;
  const auto same = [&](const char* op, std::span<const DType> types, int inputs,
                        void (*fn)(const Call&), dx_kernel_flags_t flags) {
    for (DType d : types) t.push_back({op, std::vector<DType>(inputs, d), {d}, fn, flags});
  };
  for (auto [op, fn] : {std::pair{"dx.add", &add}, std::pair{"dx.sub", &sub},
                        std::pair{"dx.mul", &mul}, std::pair{"dx.div", &div}}) {
    same(op, kFloatTypes, 2, fn, kInPlace);
    same(op, kIntTypes, 2, fn, kInPlace);
  }
  same("dx.neg", kFloatTypes, 1, &neg, kInPlace);
  same("dx.neg", kIntTypes, 1, &neg, kInPlace);
  same("dx.exp", kFloatTypes, 1, &exp, kInPlace);
  same("dx.relu", kFloatTypes, 1, &relu, kInPlace);
  same("dx.sum", kFloatTypes, 1, &sum, kDeterministic);
  for (DType d : kIntTypes) t.push_back({"dx.sum", {d}, {DType::kI64}, &sum, kDeterministic});
  same("dx.max", kFloatTypes, 1, &max, kDeterministic);
  same("dx.max", kIntTypes, 1, &max, kDeterministic);
  same("dx.matmul", kFloatTypes, 2, &matmul, kDeterministic);
  t.push_back({"dx.matmul", {DType::kI8, DType::kI8}, {DType::kI32}, &matmul, kDeterministic});
  same("dx.softmax", kFloatTypes, 1, &softmax, kDeterministic);
  same("dx.transpose", kAllTypes, 1, &transpose, kDeterministic);
  same("dx.copy", kAllTypes, 1, &copy, kInPlace);
  same("dx.fill", kAllTypes, 0, &fill, kDeterministic);
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

// The forward function of every registered kernel; kernel_data is its KernelEntry.
dx_error_t* forward_trampoline(const dx_kernel_call_t* call) {
  const dx_host_t* host =
      call != nullptr && call->host != nullptr ? call->host : g_fallback_host.load();
  if (host == nullptr) return nullptr;  // no way to report anything; cannot happen via a host
  try {
    if (call == nullptr) fail(DX_INVALID_ARGUMENT, "null kernel call");
    if (call->struct_size < DX_STRUCT_SIZE(dx_kernel_call_t, host)) {
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
    run_kernel(*entry, c);
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
  if (call.inputs.size() != entry.inputs.size() || call.outputs.size() != entry.outputs.size()) {
    fail(DX_INVALID_ARGUMENT, signature_of(entry) + " takes " +
                                  std::to_string(entry.inputs.size()) + " inputs and " +
                                  std::to_string(entry.outputs.size()) + " outputs, got " +
                                  std::to_string(call.inputs.size()) + " and " +
                                  std::to_string(call.outputs.size()));
  }
  for (std::size_t i = 0; i < call.inputs.size(); ++i) {
    check_dtype(call.inputs[i], entry.inputs[i], "input " + std::to_string(i), entry);
  }
  for (std::size_t i = 0; i < call.outputs.size(); ++i) {
    check_dtype(call.outputs[i], entry.outputs[i], "output " + std::to_string(i), entry);
  }
  entry.compute(call);
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
      desc.struct_size = DX_STRUCT_SIZE(dx_kernel_desc_t, cost);
      desc.op_name = entry.op;
      desc.device_type = kDLCPU;
      desc.num_inputs = static_cast<int32_t>(entry.inputs.size());
      desc.num_outputs = static_cast<int32_t>(entry.outputs.size());
      desc.dtypes = dtypes.data();
      desc.flags = entry.flags;
      desc.kernel_data = const_cast<KernelEntry*>(&entry);  // the trampoline only reads it
      desc.forward = &forward_trampoline;
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
