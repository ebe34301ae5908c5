/* template: the null executor plugin, for vendors to clone (README.md says how).
 *
 * Every slot of the descriptor is filled (init, shutdown, get_extension) and every step a real
 * plugin takes is here: the entry negotiates the ABI major, init checks the host's table,
 * allocates per-runtime state and says (in the host's log) what it offers, shutdown releases the
 * state. What it offers is nothing: the plugin ABI has no way to register an op as "present but
 * unsupported" (a registered kernel is a claim the certification runner tests, and a kernel that
 * answers DX_UNSUPPORTED to a valid call fails its cases as UNIMPLEMENTED), so an op this plugin
 * does not run is an op it does not register: the host then dispatches it elsewhere or answers
 * that no kernel serves it. The places where a clone registers its memory spaces and kernels are
 * marked TODO below. */
#include <stdlib.h>

#include "deepx/plugin.h"

#define TEMPLATE_PLUGIN_NAME "template" /* also NAME in CMakeLists.txt */

/* Per-runtime state: init makes one for each runtime that loads the plugin. A clone keeps its
 * device handles, streams and pools here. */
typedef struct template_state {
  const dx_host_t* host; /* borrowed until shutdown returns */
  int kernels_registered;
} template_state;

static dx_error_t* template_init(const dx_host_t* host, dx_host_context_t* context,
                                 void** out_state) {
  template_state* state;
  /* The host's table is read only up to the size it declares; the 1.0 slots are all there. */
  if (host->struct_size < DX_HOST_SIZE_1_0 ||
      DX_VERSION_MAJOR(host->abi_version) != DX_ABI_VERSION_MAJOR) {
    return host->error_create(DX_FAILED_PRECONDITION,
                              TEMPLATE_PLUGIN_NAME ": the host's table is not ABI 1.x");
  }
  state = (template_state*)calloc(1, sizeof *state);
  if (state == NULL) {
    return host->error_create(DX_OUT_OF_MEMORY, TEMPLATE_PLUGIN_NAME ": no memory for its state");
  }
  state->host = host;

  /* TODO(clone): register your memory spaces here, one dx_memory_space_desc_t per device
   * (host->register_memory_space(context, &space); see docs/plugin-author-guide.md). */

  /* TODO(clone): register your kernels here, one dx_kernel_desc_t per op, device type and
   * dtype signature (host->register_kernel(context, &kernel); examples/minimal-plugin shows
   * one), and count them in state->kernels_registered. On an error, free the state and pass
   * the error on: the host then discards everything this init registered. */

  host->log(context, DX_LOG_INFO,
            TEMPLATE_PLUGIN_NAME ": a null plugin: it registers no memory space and no kernel");
  *out_state = state;
  return NULL;
}

/* Called once, when the runtime that loaded the plugin is destroyed (never after a failed init). */
static void template_shutdown(void* state) { free(state); }

/* A clone that offers extensions (dx_extension_t) returns them here; the template offers none. */
static const dx_extension_t* template_get_extension(void* state, const char* name,
                                                    uint32_t min_version) {
  (void)state;
  (void)name;
  (void)min_version;
  return NULL;
}

static const dx_plugin_t template_plugin = {
    DX_PLUGIN_SIZE_1_0,    /* struct_size */
    DX_ABI_VERSION,        /* abi_version: the headers this was built with */
    0,                     /* reserved */
    TEMPLATE_PLUGIN_NAME,  /* name: [a-z0-9_.-], unique per runtime */
    "deepx",               /* vendor: yours */
    "0.1.0",               /* the plugin's own version */
    "template",            /* build id: a commit hash or build date */
    0,                     /* capabilities: DX_PLUGIN_CAP_KERNELS once it registers kernels */
    template_init,         /* init: mandatory */
    template_shutdown,     /* shutdown */
    template_get_extension /* get_extension */
};

/* The one exported symbol. Answer null if the host speaks no version of our major. */
DX_EXPORT const dx_plugin_t* dx_plugin_entry(uint32_t host_abi_min, uint32_t host_abi_max) {
  if (DX_VERSION_MAJOR(host_abi_min) > DX_ABI_VERSION_MAJOR ||
      DX_VERSION_MAJOR(host_abi_max) < DX_ABI_VERSION_MAJOR) {
    return NULL;
  }
  return &template_plugin;
}
