/* A plugin with one DX_MEMORY_DEVICE space ("scrambled") for safetensors_test: its memory is
 * host malloc, but every byte is stored XOR 0x5A, so the tensor's bytes are right only when
 * the host goes through this space's copy function. A host that read or wrote the storage
 * directly would see (or leave) scrambled data, and the round-trip test would fail. */
#include <stdlib.h>
#include <string.h>

#include "deepx/plugin.h"

static const dx_host_t* g_host;

static dx_error_t* scrambled_alloc(void* data, uint64_t size, dx_stream_t stream, void** out) {
  void* p = NULL;
  (void)data;
  (void)stream;
  if (posix_memalign(&p, 64, size ? (size_t)size : 1) != 0) {
    return dx_errorf(g_host, DX_OUT_OF_MEMORY, "scrambled: cannot allocate %llu bytes",
                     (unsigned long long)size);
  }
  memset(p, 0x5A, (size_t)size); /* zeros, scrambled */
  *out = p;
  return NULL;
}

static dx_error_t* scrambled_free(void* data, void* ptr, dx_stream_t stream) {
  (void)data;
  (void)stream;
  free(ptr);
  return NULL;
}

static dx_error_t* scrambled_copy(void* data, void* dst, const void* src, uint64_t size,
                                  int32_t direction, dx_stream_t stream) {
  unsigned char* d = (unsigned char*)dst;
  const unsigned char* s = (const unsigned char*)src;
  uint64_t i;
  (void)data;
  (void)stream;
  if (direction == DX_COPY_DEVICE_TO_DEVICE) {
    memmove(d, s, (size_t)size);
    return NULL;
  }
  for (i = 0; i < size; ++i) d[i] = (unsigned char)(s[i] ^ 0x5A);
  return NULL;
}

static dx_error_t* init(const dx_host_t* host, dx_host_context_t* context, void** out_state) {
  dx_memory_space_desc_t s;
  g_host = host;
  *out_state = NULL;
  memset(&s, 0, sizeof s);
  s.struct_size = DX_STRUCT_SIZE(dx_memory_space_desc_t, ipc_close);
  s.name = "scrambled";
  s.device.device_type = kDLExtDev;
  s.device.device_id = 0;
  s.kind = DX_MEMORY_DEVICE;
  s.alignment = 64;
  s.alloc = scrambled_alloc;
  s.free = scrambled_free;
  s.copy = scrambled_copy;
  return host->register_memory_space(context, &s);
}

static void shutdown(void* state) { (void)state; }

DX_EXPORT const dx_plugin_t* dx_plugin_entry(uint32_t host_abi_min, uint32_t host_abi_max) {
  static const dx_plugin_t plugin = {
      DX_PLUGIN_SIZE_1_0, DX_ABI_VERSION, 0, "scrambled", "deepx tests",
      "0.0.1", "test", DX_PLUGIN_CAP_MEMORY, init, shutdown, NULL};
  (void)host_abi_min;
  (void)host_abi_max;
  return &plugin;
}
