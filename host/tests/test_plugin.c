/* A small plugin the host tests drive: counting memory space, a compact f32 dx.add, a dx.sum
 * that checks it receives attributes in schema order, and a vendor op that always fails. */
#include <stdlib.h>
#include <string.h>

#include "deepx/ops.h"
#include "deepx/plugin.h"

static const dx_host_t* g_host;
/* Counters the tests read through the exported accessor below (found with dlsym). */
static long g_allocs, g_frees, g_shutdowns;

DX_EXPORT long hosttest_counter(int which);
DX_EXPORT long hosttest_counter(int which) {
  return which == 0 ? g_allocs : which == 1 ? g_frees : g_shutdowns;
}

static dx_error_t* space_alloc(void* data, uint64_t size, dx_stream_t stream, void** out) {
  void* p = NULL;
  (void)data;
  (void)stream;
  if (size > ((uint64_t)1 << 40)) return dx_errorf(g_host, DX_OUT_OF_MEMORY, "too big: %llu",
                                                    (unsigned long long)size);
  if (posix_memalign(&p, 64, size ? (size_t)size : 1) != 0) {
    return dx_errorf(g_host, DX_OUT_OF_MEMORY, "posix_memalign failed");
  }
  __atomic_add_fetch(&g_allocs, 1, __ATOMIC_RELAXED);
  *out = p;
  return NULL;
}
static dx_error_t* space_free(void* data, void* ptr, dx_stream_t stream) {
  (void)data;
  (void)stream;
  if (ptr) __atomic_add_fetch(&g_frees, 1, __ATOMIC_RELAXED);
  free(ptr);
  return NULL;
}
/* Reports the live allocation count and a marker the host test recognises. */
static dx_error_t* space_stats(void* data, dx_memory_stats_t* out) {
  (void)data;
  if (out->struct_size < DX_MEMORY_STATS_SIZE_1_0) {
    return dx_errorf(g_host, DX_INVALID_ARGUMENT, "stats: struct_size %zu", out->struct_size);
  }
  out->live_allocations = (uint64_t)(__atomic_load_n(&g_allocs, __ATOMIC_RELAXED) -
                                     __atomic_load_n(&g_frees, __ATOMIC_RELAXED));
  out->reserved_bytes = 12345;
  return NULL;
}
static dx_error_t* space_copy(void* data, void* dst, const void* src, uint64_t size,
                              int32_t direction, dx_stream_t stream) {
  (void)data;
  (void)direction;
  (void)stream;
  memcpy(dst, src, (size_t)size);
  return NULL;
}

static int64_t numel(const DLTensor* t) {
  int64_t n = 1;
  int32_t i;
  for (i = 0; i < t->ndim; ++i) n *= t->shape[i];
  return n;
}

static dx_error_t* add_f32(const dx_kernel_call_t* call) {
  const DLTensor* a = call->inputs[0];
  const DLTensor* b = call->inputs[1];
  const DLTensor* y = call->outputs[0];
  const float* pa = (const float*)((const char*)a->data + a->byte_offset);
  const float* pb = (const float*)((const char*)b->data + b->byte_offset);
  float* py = (float*)((char*)y->data + y->byte_offset);
  int64_t n = numel(y), i;
  if (numel(a) != n || numel(b) != n) {
    return dx_errorf(call->host, DX_UNSUPPORTED, "test add: broadcasting not supported");
  }
  for (i = 0; i < n; ++i) py[i] = pa[i] + pb[i];
  return NULL;
}

/* Backward of add: inputs (dy, a, b, y), outputs (da, db), either may be null. */
static dx_error_t* add_f32_backward(const dx_kernel_call_t* call) {
  const DLTensor* dy = call->inputs[0];
  const float* pdy = (const float*)((const char*)dy->data + dy->byte_offset);
  int64_t n = numel(dy), i;
  int32_t k;
  if (call->num_inputs != 4 || call->num_outputs != 2) {
    return dx_errorf(call->host, DX_INTERNAL, "backward arity %d/%d", call->num_inputs,
                     call->num_outputs);
  }
  for (k = 0; k < 2; ++k) {
    const DLTensor* g = call->outputs[k];
    if (g == NULL) continue;
    for (i = 0; i < n; ++i) ((float*)((char*)g->data + g->byte_offset))[i] = pdy[i] * (float)(k + 1);
  }
  return NULL;
}

static dx_error_t* sum_f32(const dx_kernel_call_t* call) {
  const DLTensor* x = call->inputs[0];
  const DLTensor* y = call->outputs[0];
  const float* px = (const float*)((const char*)x->data + x->byte_offset);
  double s = 0;
  int64_t i, n = numel(x);
  if (call->num_attrs != 2 || strcmp(call->attrs[DX_REDUCE_AXES].name, "axes") != 0 ||
      strcmp(call->attrs[DX_REDUCE_KEEPDIMS].name, "keepdims") != 0) {
    return dx_errorf(call->host, DX_INTERNAL, "attrs not in schema order (num_attrs %d)",
                     call->num_attrs);
  }
  if (call->attrs[DX_REDUCE_AXES].type != DX_ATTR_NONE && call->attrs[DX_REDUCE_AXES].count) {
    return dx_errorf(call->host, DX_UNSUPPORTED, "test sum reduces all axes only");
  }
  for (i = 0; i < n; ++i) s += px[i];
  *(float*)((char*)y->data + y->byte_offset) = (float)s;
  return NULL;
}

static dx_error_t* always_fails(const dx_kernel_call_t* call) {
  return dx_errorf(call->host, DX_ARITHMETIC_ERROR, "boom from %s", "test.fail");
}

static dx_error_t* init(const dx_host_t* host, dx_host_context_t* context, void** out_state) {
  static const DLDataType f32x3[3] = {{kDLFloat, 32, 1}, {kDLFloat, 32, 1}, {kDLFloat, 32, 1}};
  dx_kernel_desc_t k;
  dx_memory_space_desc_t s;
  dx_error_t* e;
  g_host = host;
  *out_state = NULL;

  memset(&s, 0, sizeof s);
  s.struct_size = DX_MEMORY_SPACE_DESC_SIZE_1_0;
  s.name = "hosttest";
  s.device.device_type = kDLCPU;
  s.device.device_id = 0;
  s.kind = DX_MEMORY_HOST;
  s.alignment = 64;
  s.alloc = space_alloc;
  s.free = space_free;
  s.copy = space_copy;
  s.stats = space_stats;
  if ((e = host->register_memory_space(context, &s)) != NULL) return e;

  memset(&k, 0, sizeof k);
  k.struct_size = DX_KERNEL_DESC_SIZE_1_0;
  k.device_type = kDLCPU;
  k.dtypes = f32x3;
  k.flags = DX_KERNEL_FLAG_DETERMINISTIC;

  k.op_name = "dx.add";
  k.num_inputs = 2;
  k.num_outputs = 1;
  k.forward = add_f32;
  k.backward = add_f32_backward;
  if ((e = host->register_kernel(context, &k)) != NULL) return e;
  k.backward = NULL;

  k.op_name = "dx.sum";
  k.num_inputs = 1;
  k.forward = sum_f32;
  if ((e = host->register_kernel(context, &k)) != NULL) return e;

  k.op_name = "test.fail";
  k.forward = always_fails;
  k.backward = always_fails;
  return host->register_kernel(context, &k);
}

static void shutdown(void* state) {
  (void)state;
  __atomic_add_fetch(&g_shutdowns, 1, __ATOMIC_RELAXED);
}

DX_EXPORT const dx_plugin_t* dx_plugin_entry(uint32_t host_abi_min, uint32_t host_abi_max) {
  static const dx_plugin_t plugin = {
      DX_PLUGIN_SIZE_1_0, DX_ABI_VERSION, 0, "hosttest", "deepx tests",
      "0.0.1", "test", DX_PLUGIN_CAP_KERNELS | DX_PLUGIN_CAP_MEMORY, init, shutdown, NULL};
  (void)host_abi_min;
  (void)host_abi_max;
  return &plugin;
}
