/* Fixture of the certificate tests: plugin "origin", which links a library of its own
 * directory (origin_dep.c) through RUNPATH $ORIGIN, as vendor plugins do. Under certification
 * the host loads a sealed in-memory copy, where $ORIGIN would not name that directory: it must
 * still load. Its init fails unless the library answers. */
#include <string.h>

#include "deepx/plugin.h"

int deepx_origin_dep_answer(void);

static dx_error_t* init(const dx_host_t* host, dx_host_context_t* context, void** out_state) {
  (void)context;
  *out_state = NULL;
  if (deepx_origin_dep_answer() != 42) return host->error_create(DX_INTERNAL, "origin: wrong library");
  return NULL;
}

DX_EXPORT const dx_plugin_t* dx_plugin_entry(uint32_t host_abi_min, uint32_t host_abi_max) {
  static const dx_plugin_t plugin = {DX_PLUGIN_SIZE_1_0, DX_ABI_VERSION, 0, "origin", "deepx tests",
                                     "0.0.1", "test", 0, init, NULL, NULL};
  (void)host_abi_min;
  (void)host_abi_max;
  return &plugin;
}
