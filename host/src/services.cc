// The host services: the dx_host_t table every plugin receives in init (errors, logging, host
// memory, registration, extensions), the log sink behind its `log` slot and the host's own
// messages, and the ABI version the host speaks (dx_abi_version()).
#include <cstdio>
#include <cstdlib>

#include "internal.h"

namespace deepx::host {
namespace {

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

// ABI 1.0 hosts offer no extensions yet; plugins must cope with null (see dx_extension_t).
const dx_extension_t* ServiceGetExtension(dx_host_context_t*, const char*, uint32_t) {
  return nullptr;
}

dx_host_t MakeServices() {
  dx_host_t h;
  std::memset(&h, 0, sizeof h);
  h.struct_size = DX_HOST_SIZE_1_0;
  h.get_extension = ServiceGetExtension;
  h.abi_version = DX_ABI_VERSION;
  h.error_create = ErrorCreate;
  h.error_destroy = DestroyError;
  h.error_code = ErrorCode;
  h.error_message = ErrorMessage;
  h.log = ServiceLog;
  h.host_alloc = ServiceHostAlloc;
  h.host_free = ServiceHostFree;
  h.register_kernel = RegisterKernel;          // loader.cc
  h.register_memory_space = RegisterMemorySpace;
  h.register_transport = RegisterTransport;
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

}  // namespace deepx::host

extern "C" DX_EXPORT uint32_t dx_abi_version(void) { return DX_ABI_VERSION; }
