// Errors (the objects both sides of the ABI exchange, and the message an entry point parks
// while it fails), status names, and the host-services table.
#include <cstdio>
#include <cstdlib>

#include "internal.h"

namespace deepx::host {
namespace {

// The message of the failure the current entry point is returning; see Guard() in internal.h.
thread_local std::string t_pending_message;

// Returned when even an error cannot be allocated; destroying it is a no-op.
dx_error g_out_of_memory_error{DX_OUT_OF_MEMORY, "out of memory (while creating an error)"};

dx_error_t* ServiceErrorCreate(dx_status_t code, const char* message) {
  try {
    return new dx_error{code, message ? message : ""};
  } catch (...) {
    return &g_out_of_memory_error;
  }
}

void ServiceErrorDestroy(dx_error_t* error) {
  if (error != nullptr && error != &g_out_of_memory_error) delete error;
}

dx_status_t ServiceErrorCode(const dx_error_t* error) { return error ? error->code : DX_OK; }

const char* ServiceErrorMessage(const dx_error_t* error) {
  return error ? error->message.c_str() : "";
}

void ServiceLog(dx_host_context_t* context, int32_t level, const char* message) {
  const Plugin* plugin = context ? context->plugin : nullptr;
  LogTo(plugin ? plugin->core : nullptr, level, plugin ? plugin->name.c_str() : "host",
        message ? message : "");
}

void* ServiceHostAlloc(uint64_t size, uint64_t alignment) {
  if (alignment == 0) alignment = 64;
  if ((alignment & (alignment - 1)) != 0 || alignment < sizeof(void*)) return nullptr;
  if (size == 0) size = 1;
  void* p = nullptr;
  if (posix_memalign(&p, static_cast<size_t>(alignment), static_cast<size_t>(size)) != 0) {
    return nullptr;
  }
  return p;
}

void ServiceHostFree(void* ptr) { std::free(ptr); }

dx_error_t* ServiceRegisterKernel(dx_host_context_t* context, const dx_kernel_desc_t* desc);
dx_error_t* ServiceRegisterSpace(dx_host_context_t* context, const dx_memory_space_desc_t* desc);
dx_error_t* ServiceRegisterTransport(dx_host_context_t* context, const dx_transport_desc_t* desc);

// ABI 1.0 hosts offer no extensions yet; plugins must cope with null (see dx_extension_t).
const dx_extension_t* ServiceGetExtension(dx_host_context_t*, const char*, uint32_t) {
  return nullptr;
}

}  // namespace

// Registration callbacks live in loader.cc; these forwarders keep the table in one place.
dx_error_t* RegisterKernel(dx_host_context_t* context, const dx_kernel_desc_t* desc);
dx_error_t* RegisterMemorySpace(dx_host_context_t* context, const dx_memory_space_desc_t* desc);
dx_error_t* RegisterTransport(dx_host_context_t* context, const dx_transport_desc_t* desc);

namespace {
dx_error_t* ServiceRegisterKernel(dx_host_context_t* context, const dx_kernel_desc_t* desc) {
  return RegisterKernel(context, desc);
}
dx_error_t* ServiceRegisterSpace(dx_host_context_t* context, const dx_memory_space_desc_t* desc) {
  return RegisterMemorySpace(context, desc);
}
dx_error_t* ServiceRegisterTransport(dx_host_context_t* context, const dx_transport_desc_t* desc) {
  return RegisterTransport(context, desc);
}

dx_host_t MakeServices() {
  dx_host_t h;
  std::memset(&h, 0, sizeof h);
  h.struct_size = DX_HOST_SIZE_1_0;
  h.get_extension = ServiceGetExtension;
  h.abi_version = DX_ABI_VERSION;
  h.error_create = ServiceErrorCreate;
  h.error_destroy = ServiceErrorDestroy;
  h.error_code = ServiceErrorCode;
  h.error_message = ServiceErrorMessage;
  h.log = ServiceLog;
  h.host_alloc = ServiceHostAlloc;
  h.host_free = ServiceHostFree;
  h.register_kernel = ServiceRegisterKernel;
  h.register_memory_space = ServiceRegisterSpace;
  h.register_transport = ServiceRegisterTransport;
  return h;
}

const dx_host_t g_services = MakeServices();

}  // namespace

const dx_host_t* HostServices() { return &g_services; }

void LogTo(const Core* core, int32_t level, const char* source, const std::string& message) {
  if (core != nullptr && core->log != nullptr) {
    core->log(core->log_user_data, level, source, message.c_str(), message.size());
    return;
  }
  static const char* const kLevels[] = {"debug", "info", "warn", "error"};
  const char* level_name = (level >= 0 && level <= 3) ? kLevels[level] : "log";
  const char* env = std::getenv("DEEPX_LOG_LEVEL");
  int threshold = env ? std::atoi(env) : DX_LOG_WARN;
  if (level < threshold) return;
  std::fprintf(stderr, "deepx[%s] %s: %s\n", source, level_name, message.c_str());
}

const std::string& PendingMessage() { return t_pending_message; }

void ClearPendingMessage() { t_pending_message.clear(); }

dx_status_t Fail(dx_status_t code, std::string message) {
  try {
    t_pending_message = std::move(message);
  } catch (...) {
    // Keep whatever was there: the code still says what happened.
  }
  return code;
}

dx_error_t* TakeError(dx_status_t code) noexcept {
  if (code == DX_OK) {
    t_pending_message.clear();
    return nullptr;
  }
  dx_error_t* e;
  if (t_pending_message.empty()) {
    e = MakeError(code, std::string(dx_status_string(code)));
  } else {
    e = MakeError(code, std::move(t_pending_message));
  }
  t_pending_message.clear();
  return e;
}

dx_status_t FailHandle(HandleProblem problem, const char* where, const char* param,
                       const char* kind) {
  return Failf(problem == HandleProblem::kNull ? DX_INVALID_ARGUMENT : DX_FAILED_PRECONDITION,
               "%s: %s is %s (expected a live %s handle)", where, param,
               HandleProblemText(problem), kind);
}

dx_status_t Failf(dx_status_t code, const char* fmt, ...) {
  char buffer[2048];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buffer, sizeof buffer, fmt, args);
  va_end(args);
  return Fail(code, buffer);
}

dx_status_t FailFromError(dx_error_t* error, std::string_view prefix) {
  dx_status_t code = error ? error->code : DX_INTERNAL;
  if (code == DX_OK || code < 0 || code >= DX_STATUS_COUNT_) code = DX_UNKNOWN;
  std::string message(prefix);
  message += error ? error->message : std::string("(no error object)");
  ServiceErrorDestroy(error);
  return Fail(code, std::move(message));
}

dx_error_t* MakeError(dx_status_t code, std::string message) {
  try {
    return new dx_error{code, std::move(message)};
  } catch (...) {
    return &g_out_of_memory_error;
  }
}

void DestroyError(dx_error_t* error) { ServiceErrorDestroy(error); }

bool IsKnownDtype(dx_dtype_t d) {
  switch (d) {
    case DX_DTYPE_F64: case DX_DTYPE_F32: case DX_DTYPE_F16: case DX_DTYPE_BF16:
    case DX_DTYPE_I64: case DX_DTYPE_I32: case DX_DTYPE_I16: case DX_DTYPE_I8:
    case DX_DTYPE_U8: case DX_DTYPE_BOOL:
      return true;
    default:
      return false;
  }
}

std::string DtypeName(dx_dtype_t d) {
  if (IsKnownDtype(d)) return dx_dtype_string(d);
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "dtype(code=%u,bits=%u,lanes=%u)", d & 0xFFu,
                (d >> 8) & 0xFFu, d >> 16);
  return buffer;
}

}  // namespace deepx::host

using namespace deepx::host;

extern "C" {

DX_EXPORT uint32_t dx_abi_version(void) { return DX_ABI_VERSION; }

DX_EXPORT const char* dx_status_string(dx_status_t code) {
  switch (code) {
#define DX_STATUS_CASE_(name, value, desc) \
  case value:                              \
    return #name;
    DX_STATUS_TABLE(DX_STATUS_CASE_)
#undef DX_STATUS_CASE_
    default:
      return "UNKNOWN";
  }
}

DX_EXPORT const char* dx_dtype_string(dx_dtype_t dtype) {
  switch (dtype) {
    case DX_DTYPE_F64: return "f64";
    case DX_DTYPE_F32: return "f32";
    case DX_DTYPE_F16: return "f16";
    case DX_DTYPE_BF16: return "bf16";
    case DX_DTYPE_I64: return "i64";
    case DX_DTYPE_I32: return "i32";
    case DX_DTYPE_I16: return "i16";
    case DX_DTYPE_I8: return "i8";
    case DX_DTYPE_U8: return "u8";
    case DX_DTYPE_BOOL: return "bool";
    default: return "unknown";
  }
}

DX_EXPORT dx_status_t dx_error_code(const dx_error_t* error) {
  return error ? error->code : DX_OK;
}

DX_EXPORT const char* dx_error_message(const dx_error_t* error, size_t* out_length) {
  if (error == nullptr) {
    if (out_length) *out_length = 0;
    return "";
  }
  if (out_length) *out_length = error->message.size();
  return error->message.c_str();
}

DX_EXPORT void dx_error_destroy(dx_error_t* error) { ServiceErrorDestroy(error); }

}  // extern "C"
