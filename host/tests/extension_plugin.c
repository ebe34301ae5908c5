/* A plugin that uses the ABI 1.0 extension mechanism from both ends:
 * - it offers the extension "fixture.counter" (version 2) through dx_plugin_t::get_extension:
 *   a struct that starts with dx_extension_t and carries a function the client calls;
 * - it also answers "fixture.broken" with a malformed header (the host must refuse it);
 * - it chains an extension the host does not know to the `next` of its kernel and memory-space
 *   descriptors (the host must skip it);
 * - in init it asks the host for an extension no 1.0 host offers and records the answer.
 * Its state proves init, get_extension and shutdown see the same object. */
#include <stdint.h>
#include <string.h>

#include "deepx/plugin.h"

/* The extension this plugin offers: the header, then its own fields. */
typedef struct fixture_counter_ext {
  dx_extension_t header;
  int64_t (*add)(void* state, int64_t delta); /* adds to the plugin's counter, returns it */
  void* state;
} fixture_counter_ext_t;

typedef struct fixture_state {
  int64_t counter;
  int host_extension_was_null; /* 1 when host->get_extension("dx.no_such_thing") gave null */
} fixture_state_t;

static fixture_state_t g_state;
static fixture_counter_ext_t g_counter;
static dx_extension_t g_broken;
static const dx_host_t* g_host;

static int64_t counter_add(void* state, int64_t delta) {
  fixture_state_t* s = (fixture_state_t*)state;
  s->counter += delta;
  return s->counter;
}

/* Exported for the test (found with dlsym): 1 when the host offered no unknown extension. */
DX_EXPORT int extfixture_host_extension_was_null(void);
DX_EXPORT int extfixture_host_extension_was_null(void) { return g_state.host_extension_was_null; }

static const dx_extension_t* get_extension(void* state, const char* name, uint32_t min_version) {
  if (state != &g_state) return NULL; /* init stored &g_state: anything else is a host bug */
  if (strcmp(name, "fixture.counter") == 0 && min_version <= g_counter.header.version) {
    return &g_counter.header;
  }
  if (strcmp(name, "fixture.broken") == 0) return &g_broken;
  return NULL;
}

static dx_error_t* copy_f32(const dx_kernel_call_t* call) {
  const DLTensor* x = call->inputs[0];
  const DLTensor* y = call->outputs[0];
  int64_t n = 1;
  int32_t d;
  for (d = 0; d < x->ndim; ++d) n *= x->shape[d];
  if ((x->strides != NULL && x->ndim > 1) || (y->strides != NULL && y->ndim > 1)) {
    return call->host->error_create(DX_UNSUPPORTED, "compact tensors only");
  }
  memcpy((char*)y->data + y->byte_offset, (const char*)x->data + x->byte_offset,
         (size_t)n * sizeof(float));
  return NULL;
}

static dx_error_t* init(const dx_host_t* host, dx_host_context_t* context, void** out_state) {
  /* An extension nobody knows, chained to both descriptors: a 1.0 host skips it. */
  static const dx_extension_t unknown = {DX_EXTENSION_SIZE_1_0, "fixture.unknown_to_the_host",
                                         7, 0, NULL};
  static const DLDataType f32x2[2] = {{kDLFloat, 32, 1}, {kDLFloat, 32, 1}};
  dx_kernel_desc_t k;
  dx_error_t* e;
  g_host = host;
  host->log(context, DX_LOG_INFO, "extfixture initialising");
  g_state.counter = 0;
  g_state.host_extension_was_null =
      DX_STRUCT_HAS(dx_host_t, host->struct_size, get_extension) && host->get_extension != NULL &&
      host->get_extension(context, "dx.no_such_thing", 1) == NULL;

  g_counter.header.struct_size = sizeof g_counter;
  g_counter.header.name = "fixture.counter";
  g_counter.header.version = 2;
  g_counter.header.next = NULL;
  g_counter.add = counter_add;
  g_counter.state = &g_state;
  g_broken.struct_size = 4; /* too small to be a header: the host must refuse it */
  g_broken.name = "fixture.broken";
  g_broken.version = 1;

  memset(&k, 0, sizeof k);
  k.struct_size = DX_KERNEL_DESC_SIZE_1_0;
  k.op_name = "fixture.copy";
  k.device_type = kDLCPU;
  k.num_inputs = 1;
  k.num_outputs = 1;
  k.dtypes = f32x2;
  k.flags = DX_KERNEL_FLAG_DETERMINISTIC;
  k.forward = copy_f32;
  k.next = &unknown;
  if ((e = host->register_kernel(context, &k)) != NULL) return e;
  *out_state = &g_state;
  return NULL;
}

static void shutdown(void* state) { (void)state; }

DX_EXPORT const dx_plugin_t* dx_plugin_entry(uint32_t host_abi_min, uint32_t host_abi_max) {
  static const dx_plugin_t plugin = {
      DX_PLUGIN_SIZE_1_0, DX_ABI_VERSION, 0, "extfixture", "deepx tests", "1.0.0", "test",
      DX_PLUGIN_CAP_KERNELS, init, shutdown, get_extension};
  (void)host_abi_min;
  (void)host_abi_max;
  return &plugin;
}
