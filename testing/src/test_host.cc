// The TestHost's slots and PluginLoad (include/deepx/testing/test_host.h).
#include "deepx/testing/test_host.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

namespace deepx::testing {
namespace {

// The TestHost's error layout: private, as the ABI keeps dx_error_t opaque.
struct TestError {
  dx_status_t code;
  std::string message;
};

std::atomic<int> g_live_errors{0};

bool Same(DLDataType a, DLDataType b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

}  // namespace

// The dx_host_t slots. A struct (a friend of TestHost) rather than free functions, so that they
// may take its private log lock.
struct TestHostSlots {
  static TestHost* Self(dx_host_context_t* context) { return reinterpret_cast<TestHost*>(context); }

  static dx_error_t* ErrorCreate(dx_status_t code, const char* message) {
    return TestHost::make_error(code, message != nullptr ? message : "");
  }
  static void ErrorDestroy(dx_error_t* error) { TestHost::destroy_error(error); }
  static dx_status_t ErrorCode(const dx_error_t* error) { return TestHost::error_code(error); }
  static const char* ErrorMessage(const dx_error_t* error) { return TestHost::error_message(error); }

  static void Log(dx_host_context_t* context, int32_t, const char* message) {
    if (context == nullptr) return;
    TestHost* self = Self(context);
    std::lock_guard<std::mutex> lock(self->log_mutex_);
    self->logs.emplace_back(message != nullptr ? message : "");
  }

  static void* HostAlloc(uint64_t size, uint64_t alignment) {
    if (alignment == 0) alignment = 64;
    if ((alignment & (alignment - 1)) != 0 || alignment < sizeof(void*)) return nullptr;
    void* p = nullptr;
    if (posix_memalign(&p, static_cast<size_t>(alignment), static_cast<size_t>(size ? size : 1)) != 0) {
      return nullptr;
    }
    return p;
  }
  static void HostFree(void* p) { std::free(p); }

  static dx_error_t* RegisterKernel(dx_host_context_t* context, const dx_kernel_desc_t* d) {
    if (context == nullptr) {
      return TestHost::make_error(DX_INVALID_ARGUMENT, "register_kernel: context is null");
    }
    if (d == nullptr || d->struct_size < DX_KERNEL_DESC_SIZE_1_0 || d->op_name == nullptr ||
        d->forward == nullptr || d->num_inputs < 0 || d->num_outputs < 0 ||
        (d->dtypes == nullptr && d->num_inputs + d->num_outputs > 0)) {
      return TestHost::make_error(DX_INVALID_ARGUMENT, "register_kernel: malformed kernel descriptor");
    }
    RegisteredKernel k;
    k.desc = *d;
    k.desc.op_name = nullptr;
    k.desc.dtypes = nullptr;
    k.desc.next = nullptr;
    k.op = d->op_name;
    const int32_t num_inputs = (d->flags & DX_KERNEL_FLAG_VARIADIC) ? 1 : d->num_inputs;
    k.dtypes.assign(d->dtypes, d->dtypes + num_inputs + d->num_outputs);
    const std::vector<DLDataType> in(k.dtypes.begin(), k.dtypes.begin() + num_inputs);
    const std::vector<DLDataType> out(k.dtypes.begin() + num_inputs, k.dtypes.end());
    const std::string key = TestHost::key(k.op, in, out) + "@" + std::to_string(d->device_type);
    if (!Self(context)->kernels.emplace(key, std::move(k)).second) {
      return TestHost::make_error(DX_ALREADY_EXISTS, "register_kernel: a second kernel " + key);
    }
    return nullptr;
  }

  static dx_error_t* RegisterSpace(dx_host_context_t* context, const dx_memory_space_desc_t* d) {
    if (context == nullptr) {
      return TestHost::make_error(DX_INVALID_ARGUMENT, "register_memory_space: context is null");
    }
    if (d == nullptr || d->struct_size < DX_MEMORY_SPACE_DESC_MIN_SIZE_1_0 || d->name == nullptr) {
      return TestHost::make_error(DX_INVALID_ARGUMENT,
                                  "register_memory_space: malformed memory-space descriptor");
    }
    TestHost* self = Self(context);
    if (self->space(d->name) != nullptr) {
      return TestHost::make_error(DX_ALREADY_EXISTS,
                                  std::string("register_memory_space: a second space ") + d->name);
    }
    RegisteredSpace s;
    std::memcpy(&s.desc, d, std::min(d->struct_size, sizeof s.desc));
    s.desc.struct_size = sizeof s.desc;
    s.name = d->name;
    s.desc.name = nullptr;
    s.desc.next = nullptr;
    self->spaces.push_back(std::move(s));
    return nullptr;
  }

  static dx_error_t* RegisterTransport(dx_host_context_t* context, const dx_transport_desc_t* d) {
    if (context == nullptr) {
      return TestHost::make_error(DX_INVALID_ARGUMENT, "register_transport: context is null");
    }
    if (d == nullptr || d->struct_size < DX_TRANSPORT_DESC_SIZE_1_0 || d->name == nullptr) {
      return TestHost::make_error(DX_INVALID_ARGUMENT, "register_transport: malformed transport descriptor");
    }
    RegisteredTransport t;
    t.desc = *d;
    t.name = d->name;
    t.desc.name = nullptr;
    t.desc.next = nullptr;
    Self(context)->transports.push_back(std::move(t));
    return nullptr;
  }

  // No extensions: plugins must cope with null (dx_extension_t).
  static const dx_extension_t* GetExtension(dx_host_context_t*, const char*, uint32_t) {
    return nullptr;
  }
};

TestHost::TestHost() {
  host_.struct_size = DX_HOST_SIZE_1_0;
  host_.abi_version = DX_ABI_VERSION;
  host_.error_create = &TestHostSlots::ErrorCreate;
  host_.error_destroy = &TestHostSlots::ErrorDestroy;
  host_.error_code = &TestHostSlots::ErrorCode;
  host_.error_message = &TestHostSlots::ErrorMessage;
  host_.log = &TestHostSlots::Log;
  host_.host_alloc = &TestHostSlots::HostAlloc;
  host_.host_free = &TestHostSlots::HostFree;
  host_.register_kernel = &TestHostSlots::RegisterKernel;
  host_.register_memory_space = &TestHostSlots::RegisterSpace;
  host_.register_transport = &TestHostSlots::RegisterTransport;
  host_.get_extension = &TestHostSlots::GetExtension;
}

std::string TestHost::dtype_name(DLDataType t) {
  if (t.lanes == 1) {
    switch (t.code) {
      case kDLFloat:
        if (t.bits == 64 || t.bits == 32 || t.bits == 16) return "f" + std::to_string(t.bits);
        break;
      case kDLBfloat:
        if (t.bits == 16) return "bf16";
        break;
      case kDLInt:
        if (t.bits == 64 || t.bits == 32 || t.bits == 16 || t.bits == 8) return "i" + std::to_string(t.bits);
        break;
      case kDLUInt:
        if (t.bits == 8) return "u8";
        break;
      case DX_DLPACK_CODE_BOOL:
        if (t.bits == 8) return "bool";
        break;
      default:
        break;
    }
  }
  return "code" + std::to_string(t.code) + "b" + std::to_string(t.bits) + "l" + std::to_string(t.lanes);
}

std::string TestHost::key(const std::string& op, const std::vector<DLDataType>& inputs,
                          const std::vector<DLDataType>& outputs) {
  std::string s = op + "(";
  for (size_t i = 0; i < inputs.size(); ++i) s += (i ? "," : "") + dtype_name(inputs[i]);
  s += ")->(";
  for (size_t i = 0; i < outputs.size(); ++i) s += (i ? "," : "") + dtype_name(outputs[i]);
  return s + ")";
}

const RegisteredKernel* TestHost::find(const std::string& op, const std::vector<DLDataType>& inputs,
                                       const std::vector<DLDataType>& outputs,
                                       int32_t device_type) const {
  const std::string at = "@" + std::to_string(device_type);
  auto it = kernels.find(key(op, inputs, outputs) + at);
  if (it != kernels.end()) return &it->second;
  if (inputs.empty()) return nullptr;
  it = kernels.find(key(op, {inputs[0]}, outputs) + at);
  return it != kernels.end() && it->second.variadic() ? &it->second : nullptr;
}

const RegisteredKernel* TestHost::find(const std::string& op, const std::vector<DLDataType>& signature,
                                       int32_t device_type) const {
  for (const auto& [key, k] : kernels) {
    if (k.op == op && k.desc.device_type == device_type && k.dtypes.size() == signature.size() &&
        std::equal(k.dtypes.begin(), k.dtypes.end(), signature.begin(), Same)) {
      return &k;
    }
  }
  return nullptr;
}

const RegisteredSpace* TestHost::space(const std::string& name) const {
  for (const RegisteredSpace& s : spaces) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

dx_error_t* TestHost::make_error(dx_status_t code, const std::string& message) {
  ++g_live_errors;
  return reinterpret_cast<dx_error_t*>(new TestError{code, message});
}

dx_status_t TestHost::error_code(const dx_error_t* error) {
  return error != nullptr ? reinterpret_cast<const TestError*>(error)->code : DX_OK;
}

const char* TestHost::error_message(const dx_error_t* error) {
  return error != nullptr ? reinterpret_cast<const TestError*>(error)->message.c_str() : "";
}

void TestHost::destroy_error(dx_error_t* error) {
  if (error == nullptr) return;
  --g_live_errors;
  delete reinterpret_cast<TestError*>(error);
}

Status TestHost::take(dx_error_t* error) {
  Status s;
  if (error != nullptr) {
    s.code = error_code(error);
    s.message = error_message(error);
    destroy_error(error);
  }
  return s;
}

int TestHost::live_errors() { return g_live_errors.load(); }

// ---- PluginLoad -----------------------------------------------------------------------------

PluginLoad::PluginLoad(const char* path, TestHost& host) : host_(host) {
  library_ = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (library_ == nullptr) {
    const char* why = dlerror();
    error_ = why != nullptr ? why : "dlopen failed";
    return;
  }
  auto entry = reinterpret_cast<dx_plugin_entry_fn>(dlsym(library_, DX_PLUGIN_ENTRY_SYMBOL));
  if (entry == nullptr) {
    error_ = std::string(path) + " exports no " DX_PLUGIN_ENTRY_SYMBOL;
    return;
  }
  plugin_ = entry(DX_ABI_VERSION, DX_ABI_VERSION);
  if (plugin_ == nullptr) {
    error_ = std::string(path) + ": the entry refused ABI version " + std::to_string(DX_ABI_VERSION);
    return;
  }
  if (plugin_->init == nullptr) {
    error_ = std::string(path) + ": the descriptor has no init";
    plugin_ = nullptr;
    return;
  }
  const Status s = TestHost::take(plugin_->init(host_.host(), host_.context(), &state_));
  if (!s.ok()) {
    init_status_ = s.code;
    error_ = s.message.empty() ? std::string("init failed with status ") + std::to_string(s.code) : s.message;
    return;
  }
  initialised_ = true;
}

PluginLoad::~PluginLoad() {
  if (initialised_ && plugin_->shutdown != nullptr) plugin_->shutdown(state_);
}

}  // namespace deepx::testing
