/* The fixture plugin of the fuzz targets (libdeepx-plugin-fuzzhost.so): two memory spaces and no
 * kernels.
 *
 *   "fuzzhost"  DX_MEMORY_HOST on kDLCPU: the host reads and writes its memory directly.
 *   "fuzzdev"   DX_MEMORY_DEVICE on kDLExtDev: host memory too, but the host may only reach it
 *               through `copy`, so the strided device paths of dx_tensor_read/write/copy run.
 *
 * Every allocation is a malloc of exactly the size asked for (no rounding, no pool), so that
 * AddressSanitizer sees one byte past the end of a storage as an overflow. Each space counts
 * its live allocations and reports them through `stats`: the fuzzers check after every input
 * that everything was freed, and freed once. */
#include <stdlib.h>
#include <string.h>

#include "deepx/plugin.h"

static const dx_host_t* g_host;

typedef struct space_counters {
  long allocs;
  long frees;
  unsigned long long live_bytes;
} space_counters_t;

static space_counters_t g_host_space, g_device_space;

static dx_error_t* space_alloc(void* data, uint64_t size, dx_stream_t stream, void** out) {
  space_counters_t* c = (space_counters_t*)data;
  void* p;
  (void)stream;
  if (size > ((uint64_t)1 << 30)) {
    return dx_errorf(g_host, DX_OUT_OF_MEMORY, "fuzz space: %llu bytes is more than 1 GiB",
                     (unsigned long long)size);
  }
  p = malloc(size ? (size_t)size : 1);
  if (p == NULL) return dx_errorf(g_host, DX_OUT_OF_MEMORY, "fuzz space: malloc failed");
  __atomic_add_fetch(&c->allocs, 1, __ATOMIC_RELAXED);
  __atomic_add_fetch(&c->live_bytes, size, __ATOMIC_RELAXED);
  *out = p;
  return NULL;
}

static dx_error_t* space_free(void* data, void* ptr, dx_stream_t stream) {
  space_counters_t* c = (space_counters_t*)data;
  (void)stream;
  if (ptr != NULL) __atomic_add_fetch(&c->frees, 1, __ATOMIC_RELAXED);
  free(ptr);
  return NULL;
}

static dx_error_t* space_copy(void* data, void* dst, const void* src, uint64_t size,
                              int32_t direction, dx_stream_t stream) {
  (void)data;
  (void)stream;
  if (direction == DX_COPY_DEVICE_TO_DEVICE) {
    memmove(dst, src, (size_t)size);
  } else {
    memcpy(dst, src, (size_t)size);
  }
  return NULL;
}

static dx_error_t* space_stats(void* data, dx_memory_stats_t* out) {
  space_counters_t* c = (space_counters_t*)data;
  if (out->struct_size < DX_MEMORY_STATS_SIZE_1_0) {
    return dx_errorf(g_host, DX_INVALID_ARGUMENT, "fuzz space: stats struct_size %zu",
                     out->struct_size);
  }
  out->live_allocations = (uint64_t)(__atomic_load_n(&c->allocs, __ATOMIC_RELAXED) -
                                     __atomic_load_n(&c->frees, __ATOMIC_RELAXED));
  return NULL;
}

static dx_error_t* register_space(dx_host_context_t* context, const char* name, int32_t device_type,
                                  int32_t kind, space_counters_t* counters) {
  dx_memory_space_desc_t s;
  memset(&s, 0, sizeof s);
  s.struct_size = DX_MEMORY_SPACE_DESC_SIZE_1_0;
  s.name = name;
  s.device.device_type = device_type;
  s.device.device_id = 0;
  s.kind = kind;
  s.alignment = 64; /* what the descriptor promises; malloc gives 16, which no fuzzer relies on */
  s.space_data = counters;
  s.alloc = space_alloc;
  s.free = space_free;
  s.copy = space_copy;
  s.stats = space_stats;
  return g_host->register_memory_space(context, &s);
}

static dx_error_t* init(const dx_host_t* host, dx_host_context_t* context, void** out_state) {
  dx_error_t* e;
  g_host = host;
  *out_state = NULL;
  if ((e = register_space(context, "fuzzhost", kDLCPU, DX_MEMORY_HOST, &g_host_space)) != NULL) {
    return e;
  }
  return register_space(context, "fuzzdev", kDLExtDev, DX_MEMORY_DEVICE, &g_device_space);
}

static void shutdown(void* state) { (void)state; }

DX_EXPORT const dx_plugin_t* dx_plugin_entry(uint32_t host_abi_min, uint32_t host_abi_max) {
  static const dx_plugin_t plugin = {DX_PLUGIN_SIZE_1_0,
                                     DX_ABI_VERSION,
                                     0,
                                     "fuzzhost",
                                     "deepx fuzz targets",
                                     "0.0.1",
                                     "fuzz",
                                     DX_PLUGIN_CAP_MEMORY,
                                     init,
                                     shutdown};
  (void)host_abi_min;
  (void)host_abi_max;
  return &plugin;
}
