// The reference plugin module (libdeepx-plugin-reference.so): its dx_plugin_t, an init that
// registers every reference kernel plus one host memory space "reference-cpu", and that memory
// space's slots. Exports only dx_plugin_entry.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

#include "deepx/plugin.h"
#include "deepx/reference/register.h"

#ifndef DEEPX_REFERENCE_VERSION
#define DEEPX_REFERENCE_VERSION "unknown"
#endif

namespace {

constexpr std::uint64_t kAlignment = 64;

// Plugin state: what the memory-space slots need to create errors.
struct ReferenceState {
  const dx_host_t* host;
};

dx_error_t* error(void* space_data, dx_status_t code, const char* message) {
  return static_cast<ReferenceState*>(space_data)->host->error_create(code, message);
}

dx_error_t* space_alloc(void* space_data, std::uint64_t size, dx_stream_t, void** out_ptr) {
  try {
    if (out_ptr == nullptr) return error(space_data, DX_INVALID_ARGUMENT, "alloc: null out_ptr");
    // aligned_alloc wants a multiple of the alignment; a size-0 request still gets a real block.
    if (size > UINT64_MAX - (kAlignment - 1)) {
      return error(space_data, DX_OUT_OF_MEMORY, "alloc: size too large");
    }
    const std::uint64_t rounded = size == 0 ? kAlignment : (size + kAlignment - 1) / kAlignment * kAlignment;
    if (rounded > SIZE_MAX) return error(space_data, DX_OUT_OF_MEMORY, "alloc: size too large");
    void* p = std::aligned_alloc(kAlignment, static_cast<std::size_t>(rounded));
    if (p == nullptr) return error(space_data, DX_OUT_OF_MEMORY, "alloc: out of host memory");
    *out_ptr = p;
    return nullptr;
  } catch (...) {
    return error(space_data, DX_INTERNAL, "alloc: unexpected exception");
  }
}

dx_error_t* space_free(void*, void* ptr, dx_stream_t) {
  std::free(ptr);
  return nullptr;
}

dx_error_t* space_copy(void* space_data, void* dst, const void* src, std::uint64_t size,
                       std::int32_t direction, dx_stream_t) {
  if (direction != DX_COPY_HOST_TO_DEVICE && direction != DX_COPY_DEVICE_TO_HOST &&
      direction != DX_COPY_DEVICE_TO_DEVICE) {
    return error(space_data, DX_INVALID_ARGUMENT, "copy: unknown direction");
  }
  if (size == 0) return nullptr;
  if (dst == nullptr || src == nullptr) return error(space_data, DX_INVALID_ARGUMENT, "copy: null pointer");
  // Every direction is host memory to host memory; memmove also tolerates overlapping ranges.
  std::memmove(dst, src, static_cast<std::size_t>(size));
  return nullptr;
}

dx_error_t* space_fill(void* space_data, void* dst, std::uint64_t size, const void* pattern,
                       std::uint32_t pattern_size, dx_stream_t) {
  if (pattern_size != 1 && pattern_size != 2 && pattern_size != 4 && pattern_size != 8) {
    return error(space_data, DX_INVALID_ARGUMENT, "fill: pattern_size must be 1, 2, 4 or 8");
  }
  if (size % pattern_size != 0) {
    return error(space_data, DX_INVALID_ARGUMENT, "fill: size is not a multiple of pattern_size");
  }
  if (size == 0) return nullptr;
  if (dst == nullptr || pattern == nullptr) return error(space_data, DX_INVALID_ARGUMENT, "fill: null pointer");
  auto* out = static_cast<unsigned char*>(dst);
  for (std::uint64_t i = 0; i < size; i += pattern_size) std::memcpy(out + i, pattern, pattern_size);
  return nullptr;
}

dx_error_t* reference_init(const dx_host_t* host, dx_host_context_t* context, void** out_state) {
  if (host == nullptr || host->struct_size < DX_STRUCT_SIZE(dx_host_t, error_create) ||
      host->error_create == nullptr) {
    return nullptr;  // no way to report an error: register nothing
  }
  ReferenceState* state = nullptr;
  try {
    if (DX_VERSION_MAJOR(host->abi_version) != DX_ABI_VERSION_MAJOR) {
      return dx_errorf(host, DX_VERSION_MISMATCH, "reference plugin speaks ABI %u.x, host %u.%u",
                       DX_ABI_VERSION_MAJOR, DX_VERSION_MAJOR(host->abi_version),
                       DX_VERSION_MINOR(host->abi_version));
    }
    // Everything this plugin uses exists in 1.0; a 1.0 host table reaches register_transport.
    if (host->struct_size < DX_STRUCT_SIZE(dx_host_t, register_memory_space) ||
        host->register_kernel == nullptr || host->register_memory_space == nullptr) {
      return host->error_create(DX_INVALID_ARGUMENT,
                                "reference plugin: host table lacks register_kernel or "
                                "register_memory_space");
    }
    if (out_state == nullptr) return host->error_create(DX_INVALID_ARGUMENT, "init: null out_state");
    state = new ReferenceState{host};

    if (dx_error_t* e = deepx_reference_register(host, context)) {
      delete state;
      return e;
    }

    dx_memory_space_desc_t space{};
    space.struct_size = DX_MEMORY_SPACE_DESC_SIZE_1_0;
    space.name = "reference-cpu";
    space.device = DLDevice{kDLCPU, 0};
    space.kind = DX_MEMORY_HOST;
    space.capacity = 0;
    space.alignment = kAlignment;
    space.space_data = state;
    space.alloc = &space_alloc;
    space.free = &space_free;
    space.copy = &space_copy;
    space.fill = &space_fill;
    // Synchronous host memory: no streams, events or IPC (null slots = unsupported).
    if (dx_error_t* e = host->register_memory_space(context, &space)) {
      delete state;
      return e;
    }
    *out_state = state;
    return nullptr;
  } catch (const std::bad_alloc&) {
    delete state;
    return host->error_create(DX_OUT_OF_MEMORY, "reference plugin: out of memory in init");
  } catch (...) {
    delete state;
    return host->error_create(DX_INTERNAL, "reference plugin: unexpected exception in init");
  }
}

void reference_shutdown(void* state) { delete static_cast<ReferenceState*>(state); }

constexpr dx_plugin_t kReferencePlugin = {
    DX_PLUGIN_SIZE_1_0,
    DX_ABI_VERSION,
    0,
    "reference",
    "deepx",
    DEEPX_REFERENCE_VERSION,
    "reference-kernels",
    DX_PLUGIN_CAP_KERNELS | DX_PLUGIN_CAP_MEMORY | DX_PLUGIN_CAP_CONCURRENT_KERNELS,
    &reference_init,
    &reference_shutdown,
    nullptr,  // get_extension: no extensions
};

}  // namespace

extern "C" DX_EXPORT const dx_plugin_t* dx_plugin_entry(std::uint32_t host_abi_min,
                                                        std::uint32_t host_abi_max) {
  // Serve the host if our major lies within the range of versions it speaks.
  const unsigned ours = DX_ABI_VERSION_MAJOR;
  if (DX_VERSION_MAJOR(host_abi_min) <= ours && ours <= DX_VERSION_MAJOR(host_abi_max)) {
    return &kReferencePlugin;
  }
  return nullptr;
}
